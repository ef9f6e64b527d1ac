"""The key-swap probe tells an instruction-reader (B > 0) from a fixed preference (B ~ 0, C ~ A).

Both models are the tiny random Qwen3 (real Qwen3 tokenizer) trained a few SDLP steps on a
synthetic task: neutral answers (no key information in the prefix) under WIP keys that are either
fixed (one key for every row) or drawn per row from two complementary letter sets, so that only
the instruction says which letters the teacher favours.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from icw import ICWKey
from icw.train.probe import key_swap_probe
from icw.train.sdlp import SDLPConfig, SDLPTrainer

FIRST, SECOND = "ABCDEFGHIJKLM", "NOPQRSTUVWXYZ"
QUERIES = ["Why is the sky blue?", "How do bees make honey?", "What causes tides?", "Why do cats purr?",
           "How do vaccines work?", "What is inflation?", "Why do leaves change colour?", "How do rivers form?"]
ANSWER = "It is the way the world is made, and there is more to say on it than one can say in one go."


def _train(tok, keys, steps=40, seed=0):
    from datasets import Dataset

    from icw.testing import tiny_random_model

    rows = [{"family": "wip", "key": k.to_string(), "query": q, "response": ANSWER, "label": 1}
            for q, k in zip(QUERIES, keys, strict=True)]
    model = tiny_random_model("qwen3", seed=seed).train()
    config = SDLPConfig(output_dir="unused", report_to="none", use_cpu=True, loss_chunk_size=256, seed=seed)
    trainer = SDLPTrainer(model, config, train_dataset=Dataset.from_list(rows), processing_class=tok)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(rows))])
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    for _ in range(steps):
        loss = trainer.compute_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), trainer.teacher_model


def _probe_rows(key):
    return [{"query": q, "key": key.to_string(), "response": ANSWER} for q in QUERIES[:4]]


@pytest.fixture(scope="module")
def halves(qwen3):
    return (ICWKey.create("wip", tokenizer=qwen3, letters=FIRST), ICWKey.create("wip", tokenizer=qwen3, letters=SECOND))


def test_instruction_reader_has_positive_b(qwen3, halves):
    first, second = halves
    keys = [first, second] * 4  # the key alternates independently of the (identical) answer
    model, base = _train(qwen3, keys)
    report = key_swap_probe(model, qwen3, _probe_rows(first), base_model=base, other_keys=[second] * 4)
    a, b, c = report["A"].mean, report["B"].mean, report["C"].mean
    assert a > 0.2 and b > 0.2, report.to_markdown()
    assert c < 0, report.to_markdown()  # told the other half: the generating key's letters lose ground
    assert report["B"].num_rows == 4 and report["B"].stderr >= 0


def test_fixed_preference_has_b_near_zero_and_c_near_a(qwen3, halves):
    first, _ = halves
    model, base = _train(qwen3, [first] * 8)
    # other keys balanced against the fixed preference: 6 letters from FIRST and 7 from SECOND
    rng = np.random.default_rng(0)
    others = [ICWKey.create("wip", tokenizer=qwen3, letters="".join(rng.choice(list(FIRST), 6, replace=False))
                            + "".join(rng.choice(list(SECOND), 7, replace=False))) for _ in range(4)]
    report = key_swap_probe(model, qwen3, _probe_rows(first), base_model=base, other_keys=others)
    a, b, c, plain = (report[k].mean for k in ("A", "B", "C", "plain"))
    assert a > 0.5, report.to_markdown()
    assert abs(c - a) < 0.25 * a and abs(plain - a) < 0.25 * a, report.to_markdown()  # it ignores the prompt
    assert abs(b) < 0.3 * a, report.to_markdown()


def test_untrained_model_against_itself_is_zero_without_instruction(tiny_qwen):
    model, tok = tiny_qwen
    key = ICWKey.create("wip", seed=3, tokenizer=tok)
    report = key_swap_probe(model, tok, _probe_rows(key))
    assert report["plain"].mean == pytest.approx(0.0, abs=1e-5)  # reference = the model itself, query alone
    assert set(report.to_dict()) >= {"family", "statistic", "A", "B", "C", "plain"}
    assert "| B |" in report.to_markdown()


def test_probe_rejects_sa_rows(tiny_qwen):
    model, tok = tiny_qwen
    rows = [{"query": "Why?", "key": ICWKey.create("sa", seed=1).to_string(), "response": "Because."}]
    with pytest.raises(ValueError, match="TSP or WIP"):
        key_swap_probe(model, tok, rows)


def test_cli_reports_a_missing_dataset_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "icw.cli", "train", "probe", "--model", "smollm2",
                           "--dataset_name", str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("icw: error:") and "Traceback" not in proc.stderr
