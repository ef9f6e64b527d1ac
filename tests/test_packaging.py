"""The calls a new user types, from outside the checkout: bare-name metrics, the key's tokenizer, the wheel.

Each test runs a fresh Python in a temporary directory (so nothing resolves through the
repository's ``metrics/`` folder or the working directory), fully offline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1"}


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **OFFLINE, **(env or {})}
    return subprocess.run(args, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


def test_evaluate_load_by_bare_name_after_install_metrics(tmp_path):
    cache = tmp_path / "modules"
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {"HF_MODULES_CACHE": str(cache)}
    script = ("import evaluate\n"
              "m = evaluate.load('icw_sa')\n"
              "r = m.compute(predictions=['Apples fall. Bears run. Cats sleep.'], keys='icw:sa:seed=1,length=18')\n"
              "print(type(m).__name__, r['num_texts'])\n")
    before = _run([sys.executable, "-c", script], work, env)
    assert before.returncode != 0 and "icw_sa" in before.stderr  # nothing registered yet: the reported failure

    installed = _run([sys.executable, "-m", "icw.cli", "install-metrics"], work, env)
    assert installed.returncode == 0, installed.stderr
    for name in ("icw_tsp", "icw_wip", "icw_sa", "icw_detection"):
        assert f"{name}: {cache}" in installed.stdout

    after = _run([sys.executable, "-c", script], work, env)
    assert after.returncode == 0, after.stderr
    assert after.stdout.split() == ["IcwSa", "1"]

    # reinstalling (e.g. after an upgrade) keeps one copy per metric, which evaluate then loads
    again = _run([sys.executable, "-m", "icw.cli", "install-metrics"], work, env)
    assert again.returncode == 0, again.stderr
    folder = cache / "evaluate_modules" / "metrics" / "evaluate-metric--icw_tsp"
    assert len([p for p in folder.iterdir() if p.is_dir() and len(p.name) == 64]) == 1


def test_pipeline_without_model_uses_the_keys_tokenizer_offline(tmp_path):
    script = (
        "import json\n"
        "import icw\n"
        "from transformers import pipeline\n"
        "from icw.models import load_tokenizer\n"
        "key = icw.ICWKey.create('wip', 3, load_tokenizer('gpt2'))\n"
        "text = 'Apples and bananas are tasty. Zebras yawn quietly near the river.'\n"
        "det = pipeline('icw-detection', keys=key)\n"
        "ref = icw.verify([text], key, load_tokenizer('gpt2'))[0]\n"
        "out = det(text)\n"
        "print(json.dumps({'vocab': len(det.tokenizer), 'z': out['z_score'], 'ref': ref.z_score}))\n"
        "try:\n"
        "    pipeline('icw-detection', key='icw:sa:seed=1,length=18')\n"
        "except ValueError as err:\n"
        "    print('error:', err)\n"
    )
    result = _run([sys.executable, "-c", script], tmp_path)
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.strip().splitlines()
    row = json.loads(first)
    assert row["vocab"] == 50257  # GPT-2's tokenizer, as the key records, not the Hub default
    assert row["z"] == pytest.approx(row["ref"])
    assert second.startswith("error:") and "names no tokenizer" in second and "model=" in second


def test_wheel_installed_outside_the_checkout_works(tmp_path):
    """`pip wheel` the project, install it into a fresh venv (torch etc. from the main environment),
    and use icw from a directory with no checkout in sight: the CLI, the pipeline, the metrics, the card template."""
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(wheels), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("icw-*.whl")
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("icw/metrics/icw_tsp/icw_tsp.py", "icw/metrics/icw_sa/README.md", "icw/model_cards/template.md"):
        assert name in names, name

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # the main environment's packages (torch, transformers, evaluate, ...) without its editable icw
    main_site = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "torch").is_dir())
    (site / "main_env.pth").write_text(str(main_site) + "\n", encoding="utf-8")
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                                str(wheel)], capture_output=True, text=True, timeout=300, env=env)
    assert installed.returncode == 0, installed.stderr

    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "a.txt").write_text("Apples fall. Bears run. Cats sleep.", encoding="utf-8")
    env = {**env, **OFFLINE}
    detect = subprocess.run([str(venv / "bin" / "icw"), "detect", "--key", "icw:sa:seed=3,secret=ABC", "a.txt"],
                            cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert detect.returncode == 0, detect.stderr
    row = json.loads(detect.stdout)
    assert row["family"] == "sa" and row["num_aligned"] == 3

    script = (
        "import json, evaluate, icw\n"
        "from pathlib import Path\n"
        "from transformers import pipeline\n"
        "from icw.cards import model_card_template\n"
        "from icw.evaluate_metrics import metric_path\n"
        "from icw.models import load_tokenizer\n"
        "key = icw.ICWKey.create('wip', 1, load_tokenizer('gpt2'))\n"
        "det = pipeline('icw-detection', keys=key)\n"
        "m = evaluate.load(metric_path('icw_sa'))\n"
        "r = m.compute(predictions=['Apples fall. Bears run. Cats sleep.'], keys='icw:sa:seed=3,secret=ABC')\n"
        "print(json.dumps({'icw': icw.__file__, 'metric': metric_path('icw_sa'), 'card': str(model_card_template()),\n"
        "                  'z': r['z_scores'][0], 'pipe': det('Hello there. It works.')['family']}))\n"
    )
    out = subprocess.run([str(python), "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    for field in ("icw", "metric", "card"):
        assert Path(got[field]).is_relative_to(site), got  # from the wheel, not the checkout
    assert got["z"] == pytest.approx(row["z_score"]) and got["pipe"] == "wip"


def test_space_bundle_has_no_links_and_carries_the_package_data(tmp_path):
    out = subprocess.run(["bash", str(ROOT / "scripts" / "launch_space.sh"), "--bundle", str(tmp_path / "space")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    bundle = tmp_path / "space"
    assert not [p for p in bundle.rglob("*") if p.is_symlink()]
    for name in ("icw/metrics/icw_tsp/icw_tsp.py", "icw/model_cards/template.md", "app.py"):
        assert (bundle / name).is_file() and not (bundle / name).is_symlink(), name
    assert not [p for p in ROOT.joinpath("src", "icw").rglob("*") if p.is_symlink()]  # one real copy in the repository
