"""ICWBench as lm-evaluation-harness tasks: the harness itself runs them (``lm_eval`` in a
subprocess, the ``hf`` model type on the embedded SmolLM2 folder, offline) and its per-answer z must
equal what ``icw detect`` says about the same answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from icw import cli  # noqa: E402
from icw.bench.dataset import BenchBuildConfig, build  # noqa: E402
from icw.lmeval import TASKS, include_path  # noqa: E402
from icw.lmeval.hooks import load_icwbench  # noqa: E402

ROWS = 4


@pytest.fixture(scope="module")
def icwbench(tmp_path_factory) -> Path:
    """A four-row ICWBench folder written by ``icw bench build`` (TSP keys over a 200-token pool, so
    the TSP instruction fits SmolLM2's context)."""
    out = tmp_path_factory.mktemp("icwbench")
    return build(BenchBuildConfig(out=str(out), num_test=ROWS, num_train=1, tokenizer="smollm2", pool_size=200),
                 progress=False)


def test_include_path_indexes_the_group_and_tasks():
    from lm_eval.tasks import TaskManager

    printed = subprocess.run([sys.executable, "-m", "icw.cli", "bench", "lm-eval-path"], capture_output=True,
                             text=True, check=True).stdout.strip()
    assert Path(printed) == include_path()
    manager = TaskManager(include_path=printed, include_defaults=False)
    assert set(manager.all_subtasks) == set(TASKS)
    assert manager.all_groups == ["icwbench"]


def test_documents_pair_each_row_with_a_plain_prompt(icwbench):
    docs = load_icwbench("wip", dataset=str(icwbench))["test"]
    assert len(docs) == 2 * ROWS
    assert docs["role"][:4] == ["positive", "negative", "positive", "negative"]
    first, plain = docs[0], docs[1]
    assert first["id"] == plain["id"] and first["key"] == plain["key"]
    assert plain["prompt"] == plain["query"]
    assert first["prompt"].endswith("\n\n" + first["query"]) and len(first["prompt"]) > len(first["query"]) + 50
    only_positive = load_icwbench("wip", dataset=str(icwbench), negatives=False)["test"]
    assert only_positive["role"] == ["positive"] * ROWS


def test_missing_dataset_says_what_to_pass(tmp_path):
    with pytest.raises(ValueError, match=r"icw bench build --out DIR.*--metadata"):
        load_icwbench("sa", dataset=str(tmp_path / "nowhere"))


@pytest.mark.slow
def test_harness_z_equals_icw_detect(icwbench, tmp_path, capsys):
    from icw.models import smollm2_path

    out = tmp_path / "lmeval"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, "-m", "lm_eval", "--model", "hf",
         "--model_args", f"pretrained={smollm2_path()},dtype=float32", "--device", "cpu", "--batch_size", "8",
         "--apply_chat_template", "--tasks", "icwbench", "--include_path", str(include_path()),
         "--metadata", json.dumps({"dataset": str(icwbench)}), "--limit", str(2 * ROWS),
         "--gen_kwargs", "max_gen_toks=16", "--seed", "0", "--output_path", str(out), "--log_samples"],
        capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(next(out.rglob("results_*.json")).read_text())
    for task in TASKS:
        samples = [json.loads(line) for f in out.rglob(f"samples_{task}_*.jsonl") for line in f.read_text().splitlines()]
        assert len(samples) == 2 * ROWS
        assert {s["doc"]["id"] for s in samples} == {f"{task.split('_')[1]}-test-{i:05d}" for i in range(ROWS)}
        by_key: dict[str, list[dict]] = {}
        for s in samples:
            by_key.setdefault(s["doc"]["key"], []).append(s)
        zs = {True: [], False: []}
        for key, group in by_key.items():
            jsonl = tmp_path / "answers.jsonl"
            jsonl.write_text("".join(json.dumps({"text": s["filtered_resps"][0]}) + "\n" for s in group))
            capsys.readouterr()
            assert cli.main(["detect", "--jsonl", "--key", key, str(jsonl)]) in (None, 0)
            detected = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
            assert len(detected) == len(group)
            for s, d in zip(group, detected, strict=True):
                is_positive, z, p, verdict = s["mean_z"]
                assert is_positive == (s["doc"]["role"] == "positive")
                assert z == pytest.approx(d["z_score"], abs=1e-9) and verdict == d["is_watermarked"]
                assert p == pytest.approx(d["p_value"], abs=1e-9)
                zs[is_positive].append(z)
        metrics = results["results"][task]
        assert metrics["mean_z,none"] == pytest.approx(sum(zs[True]) / ROWS)
        assert metrics["mean_z_plain,none"] == pytest.approx(sum(zs[False]) / ROWS)
        assert 0.0 <= metrics["roc_auc,none"] <= 1.0


def test_tpr_at_fpr_is_not_estimable_below_the_reports_floor():
    """Below the plain answers `icw bench report` needs, the task's TPR@1%FPR is NaN, as the report says
    "not estimable"; from that many on, it is detection_report's number."""
    import math
    import random

    from icw.bench.report import MIN_NEGATIVES_FOR_TPR_AT_1FPR
    from icw.detection import detection_report
    from icw.lmeval import hooks

    rng = random.Random(0)
    positives = [[True, rng.gauss(3, 1), 0.5, False] for _ in range(MIN_NEGATIVES_FOR_TPR_AT_1FPR)]
    negatives = [[False, rng.gauss(0, 1), 0.5, False] for _ in range(MIN_NEGATIVES_FOR_TPR_AT_1FPR)]
    assert math.isnan(hooks.tpr_at_fpr(positives + negatives[:4]))  # `--limit 8`: four plain answers
    assert math.isnan(hooks.tpr_at_fpr(positives + negatives[:-1]))
    assert not math.isnan(hooks.roc_auc(positives + negatives[:4]))  # AUC has no such floor
    expected = detection_report([z for _, z, _, _ in positives], [z for _, z, _, _ in negatives], fpr=hooks.FPR,
                                num_bootstrap=1).tpr_at_fpr
    assert hooks.tpr_at_fpr(positives + negatives) == expected and 0.0 < expected <= 1.0
