"""The key-swap probe tells an instruction-reader (B > 0) from a fixed preference (B ~ 0, C ~ A), for WIP and SA.

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
from icw.acrostic import sa_bias_codes, sa_bias_rows
from icw.keys import green_mask
from icw.train.probe import acrostic_transitions, key_swap_probe, other_key
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


SA_ANSWERS = ["Sunlight scatters off air. Blue light scatters most. Red light passes through. So the sky looks blue.",
              "Bees gather nectar. They carry it home. Workers fan it dry. Then they seal it in wax.",
              "The moon pulls the sea. Earth turns under that pull. Two bulges follow the moon. Coasts see them as tides.",
              "Cats purr when calm. Some purr when hurt. The sound may help healing. Nobody is fully sure why."]


class ShiftedSA(torch.nn.Module):
    """The tiny model plus ``DELTA`` where the SA teacher would put its bias: on the tokens opening a sentence with
    the letter a key's secret asks for there (the key named in the prompt, or always ``fixed``), replayed along
    whichever of the known ``responses`` ends the sequence."""

    def __init__(self, model, tok, responses, keys=(), fixed=None):
        super().__init__()
        self.model, self.tok, self.responses, self.keys, self.fixed = model, tok, responses, list(keys), fixed
        self.view = vocabulary(tok)
        self.table = torch.from_numpy(sa_bias_rows(self.view)).float()

    def forward(self, input_ids, attention_mask=None, **kwargs):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        for b in range(input_ids.shape[0]):
            n = int(attention_mask[b].sum())
            seq = input_ids[b, :n].tolist()
            text = self.tok.decode(seq)
            key = self.fixed or next((k for k in self.keys if k.secret_string in text), None)
            response = next(r for r in self.responses if seq[n - len(r):] == r)
            if key is not None:
                codes = sa_bias_codes(key.secret_string, response, self.view)
                rows = self.table[torch.tensor(codes)]
                out.logits[b, n - len(response) - 1 : n - 1, : rows.shape[1]] += DELTA * rows
        return out


@pytest.fixture(scope="module")
def sa_keys():
    return ICWKey.create("sa", secret="ABCDEFGHIJKLM"), ICWKey.create("sa", secret="NOPQRSTUVWXYZ")


def _sa_rows(tok, key):
    rows = [{"query": q, "key": key.to_string(), "response": a} for q, a in zip(QUERIES, SA_ANSWERS, strict=True)]
    return rows, [tok(a, add_special_tokens=False)["input_ids"] for a in SA_ANSWERS]


def test_sa_probe_scores_sentence_openings_on_the_letter_the_secret_asks_for(tiny_qwen, sa_keys):
    """The SA teacher's bias lifts the log-odds of the asked letter among sentence openings by exactly its delta, so
    a model that writes the acrostic of the prompt's secret has A = B = delta; one that always writes the same
    acrostic has C = A = delta and B below it (the other secret asks for other letters)."""
    model, tok = tiny_qwen
    first, second = sa_keys
    rows, responses = _sa_rows(tok, first)
    reader = ShiftedSA(model, tok, responses, keys=sa_keys)
    report = key_swap_probe(reader, tok, rows, base_model=model, other_keys=[second] * 4)
    # within 0.01: the random model's own small response to the instruction, over 16 positions rather than WIP's 40+
    assert report["A"].mean == pytest.approx(DELTA, abs=1e-2)
    assert report["B"].mean == pytest.approx(DELTA, abs=1e-2)
    assert report["plain"].mean == pytest.approx(0.0, abs=1e-2)
    assert report["C"].mean < -0.05  # told the other secret: its letters, never the writer's, gain
    assert report["B"].num_positions == 16  # four sentence openings in each of the four answers
    # by the acrostic's state: the writer's own secret (A) never misses on its first letter; every state lifts by delta
    assert set(report.by_state["A"]) >= {"first letter"} and report.by_state["A"]["first letter"].num_positions == 4
    assert sum(s.num_positions for s in report.by_state["B"].values()) == 16
    for state in report.by_state["B"].values():
        assert state.mean == pytest.approx(DELTA, abs=0.05)
    assert "after a miss" in report.to_markdown() and "by_state" in report.to_dict()
    fixed = ShiftedSA(model, tok, responses, fixed=first)
    report = key_swap_probe(fixed, tok, rows, base_model=model, other_keys=[second] * 4)
    assert report["A"].mean == pytest.approx(DELTA, abs=1e-2) and report["C"].mean == pytest.approx(DELTA, abs=1e-2)
    assert report["plain"].mean == pytest.approx(DELTA, abs=1e-2)
    assert report["B"].mean < 0.5 * DELTA, report.to_markdown()


def test_sa_other_key_keeps_the_secret_length_and_differs(qwen3):
    key = ICWKey.create("sa", seed=7, length=18)
    other = other_key(key, qwen3, 3)
    assert len(other.secret_string) == 18 and other.secret_string != key.secret_string


def test_acrostic_transitions_follow_the_verifier_through_hits_misses_and_repeats():
    key = ICWKey.create("sa", seed=3, length=4)
    s = key.secret_string
    assert len(set(s)) == 4  # no letter repeats, so a repeat is never a hit
    wrong = next(c for c in "QXZJ" if c not in s)
    # an on-key answer walks the whole secret, then its extra sentences are not read
    walk = " ".join(f"{c}x." for c in s) + " Zz. Zz."
    # holding the first letter: a hit, then repeats that miss; the third miss in a row moves the acrostic on
    hold = f"{s[0]}a. {s[0]}b. {s[0]}c. {s[0]}d. {wrong}e."
    t = acrostic_transitions([walk, hold], [key, key.to_string()])
    assert t["first letter"] == (1.0, 0.0, 2)
    # walk: 3 hits after hits; hold: s0 after the hit on s0 misses and repeats
    assert t["after a hit"] == (3 / 4, 1 / 4, 4)
    # hold after its misses: s0 twice more (repeats; the second is the third miss and moves on to s2), then the
    # wrong letter: three openings, none a hit
    assert t["after a miss"] == (0.0, 2 / 3, 3)
    with pytest.raises(ValueError):
        acrostic_transitions([walk], [key, key])


def test_probe_rejects_rows_of_mixed_families(tiny_qwen):
    model, tok = tiny_qwen
    rows = [{"query": "Why?", "key": ICWKey.create("sa", seed=1).to_string(), "response": "Because."},
            {"query": "Why?", "key": ICWKey.create("wip", seed=1, tokenizer=tok).to_string(), "response": "Because."}]
    with pytest.raises(ValueError, match="one family"):
        key_swap_probe(model, tok, rows)


def test_cli_reports_a_missing_dataset_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "icw.cli", "train", "probe", "--model", "smollm2",
                           "--dataset_name", str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("icw: error:") and "Traceback" not in proc.stderr


class GatedTSP(torch.nn.Module):
    """The tiny model plus ``DELTA`` on the green tokens of the prompt's TSP key that the response has not used yet
    (the gated SDLP teacher), replayed along whichever of the known ``responses`` ends the sequence."""

    def __init__(self, model, tok, responses, keys):
        super().__init__()
        self.model, self.tok, self.responses, self.keys = model, tok, responses, list(keys)
        self.view = vocabulary(tok)

    def forward(self, input_ids, attention_mask=None, **kwargs):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        for b in range(input_ids.shape[0]):
            n = int(attention_mask[b].sum())
            seq = input_ids[b, :n].tolist()
            key = next((k for k in self.keys if k.instruction(self.tok) in self.tok.decode(seq)), None)
            if key is None:
                continue
            response = next(r for r in self.responses if seq[n - len(r):] == r)
            green = torch.from_numpy(green_mask(key, self.view)).float()
            for j in range(len(response)):  # logits at n - len(response) - 1 + j predict response[j]
                unused = green.clone()
                unused[[t for t in response[:j] if t < len(unused)]] = 0.0
                out.logits[b, n - len(response) - 1 + j, : len(unused)] += DELTA * unused
        return out


def test_tsp_probe_splits_the_lift_into_unused_and_used_green_tokens(tiny_qwen):
    """A model that lifts only the green tokens its answer has not used (the gated teacher) shows ``delta`` on the
    unused ones and 0 on the used ones; a model that lifts the whole green set shows ``delta`` on both."""
    model, tok = tiny_qwen
    first, second = (ICWKey.create("tsp", seed=s, tokenizer=tok, pool_size=3000) for s in (1, 2))
    answers = [f"{a} {a}" for a in ANSWERS]  # the second half repeats the first: its green tokens are used
    rows = [{"query": q, "key": first.to_string(), "response": a} for q, a in zip(QUERIES, answers, strict=True)]
    responses = [tok(a, add_special_tokens=False)["input_ids"] for a in answers]
    report = key_swap_probe(GatedTSP(model, tok, responses, (first, second)), tok, rows, base_model=model,
                            other_keys=[second] * 4)
    # within 0.05 / 0.15: the random model's own response to the long instruction (the used split has ~40 positions)
    for condition in ("A", "B"):
        assert report.by_use[condition]["unused green"].mean == pytest.approx(DELTA, abs=0.05), report.to_markdown()
        assert report.by_use[condition]["used green"].mean == pytest.approx(0.0, abs=0.15), report.to_markdown()
        assert report.by_use[condition]["used green"].num_rows >= 3
    uniform = key_swap_probe(Shifted(model, tok, keys=(first, second)), tok, rows, base_model=model,
                             other_keys=[second] * 4)
    for split in ("unused green", "used green"):
        assert uniform.by_use["A"][split].mean == pytest.approx(DELTA, abs=0.15), uniform.to_markdown()
    assert "used green" in uniform.to_markdown() and "by_use" in uniform.to_dict()


def _tsp_teacher_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "tsp_teacher.py"
    spec = importlib.util.spec_from_file_location("icw_script_tsp_teacher", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tsp_teacher_split_profile_composes_the_static_and_the_gated_bias(tiny_qwen):
    """``split:U:R`` puts R on every green token and U on the unused ones: split:3:0 decodes as unused:3 and
    split:3:3 as static:3, token for token under the same seed."""
    model, tok = tiny_qwen
    script = _tsp_teacher_script()
    queries = ["Why is the sky blue?", "How do bees make honey?"]
    keys = [ICWKey.create("tsp", seed=s, tokenizer=tok, pool_size=300) for s in (1, 2)]
    texts = {s: script.answers(model, tok, queries, keys, s, max_new_tokens=24)
             for s in ("unused:3", "split:3:0", "static:3", "split:3:3")}
    assert texts["split:3:0"] == texts["unused:3"]
    assert texts["split:3:3"] == texts["static:3"]
    assert texts["unused:3"] != texts["static:3"]  # 24 tokens repeat some green token, where the two differ
