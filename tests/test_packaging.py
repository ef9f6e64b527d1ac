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
        "det = pipeline('icw-detection', key=key)\n"
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
