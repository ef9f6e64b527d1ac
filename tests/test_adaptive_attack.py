"""The adaptive attack on CPU: `icw train adaptive-attack` trains a LoRA paraphraser for a few GRPO
steps on a tiny random model (real CLI, real trl), and `icw bench run --attacks adaptive
--attack-adapter DIR` loads it, rewrites the positives, scores them and reports their ESR."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from icw.bench.dataset import BenchBuildConfig, build
from icw.keys import ICWKey
from icw.train.adaptive_attack import EvasionReward, read_positives

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false", "WANDB_DISABLED": "true"}
WORDS = {"A": "Apples grow", "B": "Bees hum", "C": "Clouds drift", "D": "Dogs bark", "E": "Every river flows",
         "F": "Farmers plant", "G": "Grass grows", "H": "Horses run", "I": "Ice melts", "L": "Leaves fall",
         "M": "Mountains rise", "N": "Nights cool", "O": "Owls hunt", "P": "People walk", "R": "Rain falls",
         "S": "Snow settles", "T": "Trees sway", "U": "Umbrellas open", "W": "Wind blows", "Y": "Yaks graze"}


def _icw(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "icw.cli", *args], capture_output=True, text=True, env=ENV,
                          timeout=timeout)


def _acrostic(key: ICWKey) -> str:
    return " ".join(f"{WORDS[c]} today." for c in key.secret_string)


@pytest.fixture(scope="module")
def positives(tmp_path_factory) -> Path:
    """A run folder whose responses.jsonl holds four detected SA positives (and one failed row)."""
    run = tmp_path_factory.mktemp("positives")
    rows = []
    for i in range(4):
        key = ICWKey.create("sa", 200 + i)
        rows.append({"model": "m", "family": "sa", "id": f"sa-{i}", "role": "positive", "attack": "none",
                     "key": key.to_string(), "response": _acrostic(key), "z_score": 3.0, "p_value": 0.0001})
    rows.append({"model": "m", "family": "sa", "id": "sa-9", "role": "positive", "attack": "none",
                 "key": ICWKey.create("sa", 9).to_string(), "response": None, "error": "timeout"})
    (run / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


@pytest.fixture(scope="module")
def tiny_dir(tiny_qwen, tmp_path_factory) -> Path:
    model, tok = tiny_qwen
    path = tmp_path_factory.mktemp("tiny-qwen3")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_reward_prefers_evasion_and_kept_meaning():
    key = ICWKey.create("sa", 5)
    source = _acrostic(key)
    reward = EvasionReward()
    copied, scrambled, emptied = reward(completions=[source, " ".join(reversed(source.split(". "))), ""],
                                        key=[key.to_string()] * 3, source=[source] * 3)
    assert copied < 1.0  # still detected: utility 1 minus the z penalty, no evasion bonus
    assert emptied == pytest.approx(1.0)  # evades (p = 1) but keeps nothing
    assert scrambled > max(copied, emptied)  # evades and keeps most characters
    with pytest.raises(ValueError, match="cannot resolve"):
        EvasionReward(alpha=0.01, num_null_keys=50)


def test_positives_are_the_scored_unattacked_answers(positives):
    rows = read_positives(positives)
    assert len(rows) == 4 and {r["family"] for r in rows} == {"sa"}
    assert len(read_positives(positives, max_samples=2)) == 2
    with pytest.raises(ValueError, match="no scored, unattacked positives"):
        read_positives(positives, families=["tsp"])
    with pytest.raises(ValueError, match="icw bench run"):
        read_positives(positives / "missing")


def test_train_then_bench_run_applies_the_attacker(positives, tiny_dir, tmp_path):
    attacker = tmp_path / "attacker"
    proc = _icw("train", "adaptive-attack", "--model_name_or_path", str(tiny_dir), "--positives", str(positives),
                "--output_dir", str(attacker), "--use_peft", "--lora_r", "4", "--lora_alpha", "8",
                "--max_steps", "2", "--num_generations", "2", "--per_device_train_batch_size", "2",
                "--max_completion_length", "8", "--learning_rate", "1e-4", "--logging_steps", "1",
                "--use_cpu", "--report_to", "none", "--save_strategy", "no")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads((attacker / "adapter_config.json").read_text())["r"] == 4
    info = json.loads((attacker / "icw_attack.json").read_text())
    assert info["base_model"] == str(tiny_dir) and info["num_samples"] == 4 and "{text}" in info["prompt"]

    bench = build(BenchBuildConfig(out=str(tmp_path / "icwbench"), num_test=3, num_train=1, families=("sa",)),
                  progress=False)
    run = tmp_path / "run"
    proc = _icw("bench", "run", "--dataset", str(bench), "--model", str(tiny_dir), "--families", "sa",
                "--max-new-tokens", "8", "--attacks", "adaptive", "--attack-adapter", str(attacker),
                "--out", str(run), "--no-progress")
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = [json.loads(line) for line in (run / "responses.jsonl").read_text().splitlines()]
    attacked = [r for r in records if r["attack"] == "adaptive"]
    positives_by_id = {r["id"]: r for r in records if r["role"] == "positive" and r["attack"] == "none"}
    assert len(attacked) == 3 and all(r["z_score"] is not None and not r.get("error") for r in attacked)
    assert all(r["source_response"] == positives_by_id[r["id"]]["response"] for r in attacked)
    proc = _icw("bench", "report", str(run), "--no-figures", "--num-bootstrap", "20")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| SA | adaptive | 3 |" in proc.stdout


def test_bad_adaptive_options_are_one_line_errors(tmp_path):
    proc = _icw("bench", "run", "--out", str(tmp_path / "r"), "--attacks", "adaptive")
    assert proc.returncode == 2 and proc.stderr.startswith("icw: error:") and "--attack-adapter" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = _icw("bench", "run", "--out", str(tmp_path / "r"), "--attacks", "adaptive", "--attack-adapter",
                str(tmp_path))
    assert proc.returncode == 2 and "not an adaptive attacker" in proc.stderr and "Traceback" not in proc.stderr
