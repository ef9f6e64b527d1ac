"""The key-swap probe tells an instruction-reader (B > 0) from a fixed preference (B ~ 0, C ~ A).

The two models under test are the tiny random Qwen3 (real Qwen3 tokenizer) with a known logit
shift on top, so the probe's answer is known exactly: a shift of ``delta`` on a key's green set
lifts that set's log-odds by exactly ``delta``. The *reader* adds ``delta`` on the green set of
whichever key's instruction its prompt contains (it reads the instruction and nothing else); the
*fixed* model adds ``delta`` on one key's set whatever the prompt says (what SDLP on rows that all
share a key teaches, and what a prefix-reader looks like on rows written under that key).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from icw import ICWKey
from icw.keys import green_mask
from icw.train.probe import key_swap_probe
from icw.vocab import vocabulary

DELTA = 2.0
FIRST, SECOND = "ABCDEFGHIJKLM", "NOPQRSTUVWXYZ"
QUERIES = ["Why is the sky blue?", "How do bees make honey?", "What causes tides?", "Why do cats purr?"]
ANSWERS = ["Because sunlight scatters off small molecules, and blue light scatters most of all.",
           "Bees gather nectar, carry it home, and fan it with their wings until it thickens.",
           "The moon pulls on the oceans, and the earth turning under that pull makes tides.",
           "Nobody knows for sure, but purring seems to calm cats and may help them heal."]


class Shifted(torch.nn.Module):
    """The tiny model plus ``DELTA`` on a key's green set: the key named in the prompt (``keys`` =
    candidates to look for), or always ``fixed``."""

    def __init__(self, model, tok, keys=(), fixed=None):
        super().__init__()
        self.model, self.tok, self.keys, self.fixed = model, tok, list(keys), fixed
        self.view = vocabulary(tok)

    def forward(self, input_ids, attention_mask=None, **kwargs):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        for b in range(input_ids.shape[0]):
            key = self.fixed
            if key is None:
                text = self.tok.decode(input_ids[b])
                key = next((k for k in self.keys if k.instruction(self.tok) in text), None)
            if key is not None:
                mask = torch.from_numpy(green_mask(key, self.view))
                out.logits[b, :, : len(mask)] += DELTA * mask
        return out


def _rows(key):
    return [{"query": q, "key": key.to_string(), "response": a} for q, a in zip(QUERIES, ANSWERS, strict=True)]


@pytest.fixture(scope="module")
def halves(qwen3):
    return (ICWKey.create("wip", tokenizer=qwen3, letters=FIRST), ICWKey.create("wip", tokenizer=qwen3, letters=SECOND))


def test_instruction_reader_has_b_equal_to_its_lift(tiny_qwen, halves):
    model, tok = tiny_qwen
    first, second = halves
    reader = Shifted(model, tok, keys=halves)
    report = key_swap_probe(reader, tok, _rows(first), base_model=model, other_keys=[second] * 4)
    assert report["A"].mean == pytest.approx(DELTA, abs=1e-3)
    assert report["B"].mean == pytest.approx(DELTA, abs=1e-3)  # it follows the prompt's key
    assert report["C"].mean == pytest.approx(-DELTA, abs=1e-3)  # told the other half: the writer's letters lose
    assert report["plain"].mean == pytest.approx(0.0, abs=1e-3)
    assert report["B"].num_rows == 4 and report["B"].num_positions > 40


def test_fixed_preference_has_b_near_zero_and_c_equal_to_a(tiny_qwen, halves):
    model, tok = tiny_qwen
    first, _ = halves
    fixed = Shifted(model, tok, fixed=first)
    # other keys balanced against the fixed preference: 6 letters from FIRST and 7 from SECOND
    rng = np.random.default_rng(0)
    others = [ICWKey.create("wip", tokenizer=tok, letters="".join(rng.choice(list(FIRST), 6, replace=False))
                            + "".join(rng.choice(list(SECOND), 7, replace=False))) for _ in range(4)]
    report = key_swap_probe(fixed, tok, _rows(first), base_model=model, other_keys=others)
    a, b, c, plain = (report[k].mean for k in ("A", "B", "C", "plain"))
    assert a == pytest.approx(DELTA, abs=1e-3) and c == pytest.approx(a, abs=1e-3) and plain == pytest.approx(a, abs=1e-3)
    assert abs(b) < 0.5 * DELTA, report.to_markdown()
    assert abs(b) < 3 * report["B"].stderr + 0.5, report.to_markdown()


def test_untrained_model_against_itself_is_zero_without_instruction(tiny_qwen):
    model, tok = tiny_qwen
    key = ICWKey.create("wip", seed=3, tokenizer=tok)
    report = key_swap_probe(model, tok, _rows(key))
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
