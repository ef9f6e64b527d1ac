"""scripts/speedrun.sh end to end at toy size: ICWBench -> D_cs -> SDLP -> GRPO -> ICWBench of every stage ->
the table of stages and the card, through the shipped configs (a tiny random Qwen3, one family, a few steps);
run again, it finds every stage done and trains nothing. Every Python warning is an error in every command it
runs (those a user cannot act on are silenced where they arise, each with its reason:
icw.recipe_runner.THIRD_PARTY_NOISE), and nothing on its stderr is a warning."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
#: What a warning looks like on stderr: Python's, one raised inside a destructor, accelerate launch's notice.
WARNING = re.compile(r"\w*Warning\b|Exception ignored in|were not passed to `accelerate launch`")


def _speedrun(out: Path, model: Path) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "OUT": str(out), "MODEL": str(model), "TOKENIZER": str(model), "FAMILIES": "wip",
           "NUM_H1": "4", "NUM_H0": "2", "NUM_EVAL": "4", "EVAL_TOKENS": "12", "TRAIN_TOKENS": "8",
           "SDLP_STEPS": "2", "GRPO_STEPS": "1", "GRPO_PROMPTS": "2", "SAVE_STEPS": "1", "OMP_NUM_THREADS": "1",
           "PY": sys.executable, "ACCELERATE": str(bin_dir / "accelerate"), "ICW": str(bin_dir / "icw"),
           "PYTHONWARNINGS": "error"}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "speedrun.sh")], capture_output=True, text=True,
                          timeout=1800, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert not WARNING.search(proc.stderr), [line for line in proc.stderr.splitlines() if WARNING.search(line)]
    return proc


def test_speedrun_runs_every_stage_and_resumes(tiny_qwen, tmp_path):
    model, tok = tiny_qwen
    model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    out = tmp_path / "run"
    _speedrun(out, tmp_path / "tiny")
    table = (out / "stages.md").read_text()
    for stage in ("Base", "+SDLP", "+SDLP+GRPO"):
        assert f"| {stage} | 4 + 4 |" in table, table
    assert "Word-Initial Preference (WIP)" in table and "Wilcoxon p" in table and "McNemar p" in table
    stages = json.loads((out / "stages.json").read_text())["stages"]
    assert [s["model"] for s in stages] == [str(tmp_path / "tiny"), str(out / "sdlp"), str(out / "grpo")]
    for stage in ("sdlp", "grpo"):  # trained by the shipped recipes, with the toy overrides only
        facts = json.loads((out / stage / "icw_training.json").read_text())
        assert facts["progress"]["final"] and facts["recipe"] == stage
    sdlp = json.loads((out / "sdlp" / "icw_training.json").read_text())["settings"]
    assert sdlp["lmbda"] == 1.0 and sdlp["relabel_copies"] == 8 and sdlp["learning_rate"] == 1e-4
    grpo = json.loads((out / "grpo" / "icw_training.json").read_text())["settings"]  # 2 prompts: one micro-batch each
    assert (grpo["per_device_train_batch_size"], grpo["gradient_accumulation_steps"]) == (4, 2)
    card = (out / "grpo" / "README.md").read_text()
    assert "## How it was trained" in card and "Recipe: GRPO" in card and "Not evaluated" not in card
    assert "## Training stages" in card and "| +SDLP+GRPO | 4 + 4 |" in card  # stages.json, paired tests included
    from icw.precision import describe

    timings = [json.loads(line) for line in (out / "timings.jsonl").read_text().splitlines()]
    assert [t["stage"] for t in timings] == ["icwbench", "synthesis", "sdlp", "grpo", "eval-base", "eval-sdlp",
                                             "eval-grpo"]
    assert all(t["seconds"] >= 0 and t["machine"]["precision"] == describe("cpu") for t in timings)
    report = (out / "report.md").read_text()  # the report card: wall time per stage, the machine and precision
    assert f"| sdlp | {timings[2]['seconds'] / 3600:.2f} h ({timings[2]['seconds']} s) | 1 |" in report
    assert describe("cpu") in report and timings[0]["machine"]["cpu"] in report
    cost = card.split("## Cost", 1)[1]  # the card's cost: the stages timed before it was written, and the machine
    assert f"| sdlp | {timings[2]['seconds'] / 3600:.2f} h" in cost and "| eval-grpo |" in cost and describe("cpu") in cost

    weights = (out / "grpo" / "model.safetensors").stat().st_mtime
    again = _speedrun(out, tmp_path / "tiny")  # every stage is done: nothing is trained or generated again
    assert (out / "grpo" / "model.safetensors").stat().st_mtime == weights
    assert "saved the model" not in again.stdout + again.stderr
    assert (out / "stages.md").read_text() == table
    rerun = (out / "report.md").read_text()  # the evaluations looked again (nothing to do), training did not run
    assert "| eval-grpo |" in rerun and rerun.count(" | 2 |") == 3 and rerun.count(" | 1 |") == 4
