"""One home per mechanism and one vocabulary of names (issue 13): the shared implementations behave
as documented, the static copies match their source, and the renamed names keep working for a release."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from icw import ICWKey
from icw.citation import BIBTEX

ROOT = Path(__file__).resolve().parents[1]


def _icw(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "icw.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


# ------------------------------------------------------------------------------- citation
@pytest.mark.parametrize("readme", sorted((ROOT / "metrics").glob("*/README.md")), ids=lambda p: p.parent.name)
def test_static_metric_readmes_cite_the_one_bibtex(readme):
    text = readme.read_text(encoding="utf-8")
    assert BIBTEX in text
    assert text.count("@article{") == 1


def test_cards_and_metrics_cite_the_one_bibtex():
    from icw.cards import model_card
    from icw.evaluate_metrics import CITATION

    assert CITATION.strip() == BIBTEX
    card = model_card({"model": "m", "families": {"sa": {"roc_auc": 0.5}}})
    assert BIBTEX in card.text
    assert "Liu, Yepeng and Chen, Tianyi and Zhao, Xuandong and Song, Dawn and Bu, Yuheng" in BIBTEX


# ---------------------------------------------------------------------------- perplexity
def test_perplexity_batches_pads_and_trims_like_one_at_a_time(tiny_qwen):
    from icw.perplexity import perplexities

    model, tok = tiny_qwen
    queries = ["Why is the sky blue?", "What is rain?", "Hi", "Tell me a story."]
    answers = ["Because of Rayleigh scattering of sunlight.", "", "Hello there, friend. " * 3, "Once."]
    batched = perplexities(model, tok, queries, answers, batch_size=4)
    alone = [perplexities(model, tok, [q], [a], batch_size=1)[0] for q, a in zip(queries, answers, strict=True)]
    assert batched[1] is None and alone[1] is None  # an empty answer has no perplexity (never NaN)
    for got, want in zip(batched, alone, strict=True):
        assert got is None or got == pytest.approx(want, rel=1e-4)
    assert all(p > 1 and math.isfinite(p) for p in batched if p is not None)
    # a context shorter than prompt + answer: the prompt is trimmed, the answer's last tokens still scored
    limit = model.config.max_position_embeddings
    try:
        model.config.max_position_embeddings = 12
        short = perplexities(model, tok, ["A long question " * 10], ["Hello there, friend. " * 6])
    finally:
        model.config.max_position_embeddings = limit
    assert short[0] is not None and math.isfinite(short[0])


def test_synthesis_uses_the_shared_perplexity_and_question_reader(tmp_path):
    from icw import perplexity, questions
    from icw.bench import quality
    from icw.train import synthesis

    assert synthesis.perplexities is perplexity.perplexities is quality.perplexities
    assert synthesis.read_questions is questions.read_questions
    jl = tmp_path / "q.jsonl"
    jl.write_text('{"query": "Q1?", "question": "Preferred?"}\n{"title": "T?"}\n', encoding="utf-8")
    config = synthesis.SynthesisConfig(queries_file=str(jl))
    assert synthesis.read_queries(config) == ["Preferred?", "T?"]  # the bench reader's precedence
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "no question field"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        synthesis.read_queries(synthesis.SynthesisConfig(queries_file=str(bad)))


def test_one_value_per_constant():
    from icw import cards, keys
    from icw.bench import dataset, runner
    from icw.train import synthesis

    assert runner.DEFAULT_DATASET == cards.DEFAULT_DATASET_ID == dataset.ICWBENCH_ID
    assert synthesis.TRAIN_SEED_OFFSET == dataset.TRAIN_SEED_START == keys.TRAIN_SEED_START
    assert dataset.TEST_SEED_START == keys.TEST_SEED_START < keys.TRAIN_SEED_START


def test_prompt_overflow_is_the_runners_and_the_spaces_check(tiny_qwen):
    from icw.bench.runner import context_warning
    from icw.generation import prompt_overflow

    model, tok = tiny_qwen
    backend = type("B", (), {"model": model, "tokenizer": tok, "name": "tiny"})()
    long = "Why" + " not" * 5000
    assert prompt_overflow(model, tok, ["short", long]) == (5001, 4096)
    assert "5001 tokens" in context_warning(backend, ["short", long])
    assert context_warning(backend, ["short"]) is None
    assert prompt_overflow(None, tok, [long]) is None  # remote backends have no local context to check


# --------------------------------------------------------------------------------- names
def test_detection_report_names_and_deprecated_aliases():
    from icw.detection import detection_report

    rep = detection_report([3.0, 2.5, 4.0], [0.1, -0.2, 0.3], num_bootstrap=20)
    assert rep.roc_auc == 1.0 and rep.tpr_at_fpr == 1.0 and set(rep.to_dict()) >= {
        "roc_auc", "roc_auc_ci", "tpr_at_fpr", "tpr_at_fpr_ci", "fpr"}
    for old, new in (("auc", "roc_auc"), ("auc_ci", "roc_auc_ci"), ("tpr", "tpr_at_fpr"), ("tpr_ci", "tpr_at_fpr_ci")):
        with pytest.warns(DeprecationWarning, match=f"use .{new}"):
            assert getattr(rep, old) == getattr(rep, new)


def test_old_results_json_still_makes_a_card(tmp_path):
    from icw.cards import eval_results

    old = tmp_path / "results.json"
    old.write_text(json.dumps({"model": "m", "families": {"wip": {
        "auc": 0.75, "auc_ci": [0.5, 0.9], "tpr_at_1fpr": 0.25, "tpr_ci": [0.0, 0.5],
        "attacks": {"deletion": {"auc": 0.6, "tpr_at_1fpr": 0.1}}}}}))
    with pytest.warns(DeprecationWarning, match="old field names"):
        got = {r.metric_type: r.metric_value for r in eval_results(old)}
    assert got == {"roc_auc": 0.75, "tpr_at_fpr": 0.25}
    proc = _icw("hub", "model-card", str(old), "--out", str(tmp_path / "card"))
    assert proc.returncode == 0, proc.stderr
    card = (tmp_path / "card" / "README.md").read_text()
    assert "| 0.750 | [0.500, 0.900] | TPR@1%FPR: 0.250 |" in card and "deletion: AUC 0.600" in card


def test_pipeline_keys_and_deprecated_key(gpt2):
    from transformers import pipeline

    import icw

    key = ICWKey.create("sa", secret="HI")
    text = "Hello there. It works."
    det = pipeline("icw-detection", model=gpt2, keys=key)
    assert isinstance(det, icw.ICWDetectionPipeline) and det(text)["num_aligned"] == 2
    with pytest.warns(DeprecationWarning, match="key= is deprecated"):
        old = pipeline("icw-detection", model=gpt2, key=key)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert old(text) == det(text) == det(text, keys=key.to_string())
    with pytest.warns(DeprecationWarning):
        assert det(text, key=key) == det(text)
    with pytest.raises(TypeError, match="not both"):
        det(text, keys=key, key=key)
    assert icw.detector(keys=key, tokenizer="gpt2")(text) == det(text)


def test_processors_and_detector_are_exported_lazily():
    code = ("import sys, icw\n"
            "assert 'torch' not in sys.modules and 'transformers.pipelines' not in sys.modules\n"
            "from icw import (ICWDetectionPipeline, SentenceAcrosticLogitsProcessor, TokenSetPreferenceLogitsProcessor,\n"
            "                 WordInitialPreferenceLogitsProcessor, detector, logits_processor)\n"
            "from icw.processors import logits_processor as lp\n"
            "assert logits_processor is lp and ICWDetectionPipeline.__name__ == 'ICWDetectionPipeline'\n"
            "assert set(icw.__all__) <= set(dir(icw))\n"
            "import icw.verification\n"
            "assert icw.verification.__name__ == 'icw.verification' and callable(icw.verify)\n"
            "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_key_new_num_letters_through_the_cli():
    proc = _icw("key", "new", "--family", "wip", "--seed", "3", "--tokenizer", "gpt2", "--num-letters", "5")
    assert proc.returncode == 0, proc.stderr
    key = ICWKey.from_string(proc.stdout)
    assert key.num_letters == 5 and len(key.green_letters) == 5
    old = _icw("key", "new", "--family", "wip", "--seed", "3", "--tokenizer", "gpt2", "--length", "5")
    assert old.returncode == 0 and old.stdout == proc.stdout and "use --num-letters" in old.stderr
    bad = _icw("key", "new", "--family", "sa", "--seed", "3", "--num-letters", "5")
    assert bad.returncode == 2 and bad.stderr.startswith("icw: error: num_letters is a WIP key parameter")
    assert "Traceback" not in bad.stderr and bad.stderr.count("\n") == 1


def test_icw_train_lists_sft():
    proc = _icw("train", "--help")
    assert proc.returncode == 0 and "sft" in proc.stdout


def _lines(path: Path) -> int:
    try:
        return len(path.read_text(encoding="utf-8").splitlines())
    except UnicodeDecodeError:  # a binary file (an image) has no lines to count
        return 0


def test_no_source_file_over_500_lines():
    """A module of the package, or any file of a Space, past 500 lines is split by job instead."""
    spaces = [p for p in (ROOT / "spaces").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    long = {str(p.relative_to(ROOT)): n for p in [*(ROOT / "src").rglob("*.py"), *spaces] if (n := _lines(p)) > 500}
    assert not long, long


# ------------------------------------------------------------------------------- the test run itself
def test_test_workers_share_the_cores_not_oversubscribe_them():
    """pyproject runs the suite in pytest-xdist workers; the root conftest gives each its share of the torch
    threads (two workers of two OpenMP threads would oversubscribe two cores), and its subprocesses inherit it."""
    import torch

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cores = len(os.sched_getaffinity(0))
    assert torch.get_num_threads() * workers <= max(cores, workers)
    child = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                           capture_output=True, text=True, timeout=120, check=True)
    assert int(child.stdout) == torch.get_num_threads()
