"""SDLP loss, perturbation replay and collator alignment (tiny tensors and the tiny random Qwen3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LogitsProcessor

from icw import ICWKey
from icw.keys import green_mask
from icw.processors import SentenceAcrosticLogitsProcessor, TokenSetPreferenceLogitsProcessor
from icw.train.sdlp import (
    SDLPCollator,
    SDLPConfig,
    chunked_sdlp_loss,
    sa_bias_codes,
    sdlp_loss,
    teacher_delta,
    tokenize_row,
)
from icw.vocab import vocabulary

ANSWER = ("Bridges stand because forces balance. Engineers compute loads carefully! "
          "However, wind matters too.\n\n- Steel resists tension. Concrete resists compression.")


def _hand_kl(student: np.ndarray, teacher: np.ndarray, k: int | None) -> float:
    """KL(p~T || p~S) for one position, written out with numpy."""
    idx = np.argsort(-teacher)[:k] if k else np.arange(len(teacher))
    pt = np.exp(teacher[idx] - teacher[idx].max())
    pt /= pt.sum()
    ps = np.exp(student[idx] - student[idx].max())
    ps /= ps.sum()
    return float((pt * np.log(pt / ps)).sum())


@pytest.mark.parametrize("k", [3, None])
def test_loss_equals_hand_computed_topk_kl(k):
    gen = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(2, 4, 11, generator=gen), torch.randn(2, 4, 11, generator=gen)
    delta = torch.zeros(2, 1, 11)
    delta[0, 0, [1, 5]] = 2.0
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    expected = 0.0
    for b in range(2):
        for t in range(int(mask[b].sum())):
            expected += _hand_kl(student[b, t].numpy(), (teacher[b, t] + delta[b, 0]).numpy(), k)
    got = sdlp_loss(student, teacher, mask, delta, top_k=k)
    assert got.item() == pytest.approx(expected / 2, rel=1e-5)


def test_loss_is_zero_when_student_matches_perturbed_teacher_on_support():
    gen = torch.Generator().manual_seed(1)
    teacher, delta = torch.randn(3, 5, 40, generator=gen), 3.0 * (torch.rand(1, 1, 40, generator=gen) < 0.3)
    target = teacher + delta
    support = target.topk(8, dim=-1).indices
    # off the support and up to a constant shift the student is free: renormalization ignores both
    student = torch.randn(3, 5, 40, generator=gen) * 10
    student.scatter_(-1, support, target.gather(-1, support) + 7.0)
    assert sdlp_loss(student, teacher, delta=delta, top_k=8).item() == pytest.approx(0.0, abs=1e-5)
    assert sdlp_loss(teacher + delta, teacher, delta=delta, top_k=None).item() == pytest.approx(0.0, abs=1e-5)
    assert sdlp_loss(teacher, teacher, delta=delta, top_k=8).item() > 1e-3


def test_gradients_flow_only_into_the_student():
    gen = torch.Generator().manual_seed(2)
    student = torch.randn(2, 3, 20, generator=gen, requires_grad=True)
    teacher = torch.randn(2, 3, 20, generator=gen, requires_grad=True)
    sdlp_loss(student, teacher, top_k=5).backward()
    assert teacher.grad is None
    assert student.grad is not None and student.grad.abs().sum() > 0
    # the top-k loss touches the student only on the teacher's support
    support = teacher.detach().topk(5, dim=-1).indices
    off = torch.ones_like(student.grad, dtype=torch.bool).scatter_(-1, support, False)
    assert student.grad[off].abs().max() == 0


@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_chunked_loss_from_hidden_states_matches_dense_loss(chunk):
    gen = torch.Generator().manual_seed(3)
    head_s, head_t = torch.nn.Linear(6, 30, bias=False), torch.nn.Linear(6, 30, bias=False)
    hs, ht = torch.randn(3, 4, 6, generator=gen, requires_grad=True), torch.randn(3, 4, 6, generator=gen)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]]).float()
    rows = torch.rand(3, 30, generator=gen) < 0.3
    rows[0] = False
    values = torch.tensor([0.0, 2.0, 5.0])
    index = torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0], [2, 1, 2, 0]])
    top_k = torch.tensor([4, 0, 4])  # row 1 uses the full vocabulary
    got = chunked_sdlp_loss(hs, ht, head_s, head_t, mask, rows, values, index, top_k, chunk_size=chunk)
    delta = rows[index].float() * values[index][..., None]
    s_logits, t_logits = head_s(hs), head_t(ht)
    each = [sdlp_loss(s_logits[b : b + 1], t_logits[b : b + 1], mask[b : b + 1], delta[b : b + 1],
                      top_k=int(top_k[b]) or None) for b in range(3)]
    assert got.item() == pytest.approx((sum(each) / 3).item(), rel=1e-5)
    per_row = chunked_sdlp_loss(hs, ht, head_s, head_t, mask, rows, values, index, top_k, chunk_size=chunk, per_row=True)
    assert per_row.tolist() == pytest.approx([e.item() for e in each], rel=1e-5)  # what the trainer logs by family
    got.backward()
    assert head_t.weight.grad is None and head_s.weight.grad is not None and hs.grad is not None


@pytest.mark.parametrize("chunk", [1, 64])
def test_chunked_loss_with_unused_only_rows_matches_the_dense_replay(chunk):
    gen = torch.Generator().manual_seed(4)
    head_s, head_t = torch.nn.Linear(6, 30, bias=False), torch.nn.Linear(6, 30, bias=False)
    hs, ht = torch.randn(2, 5, 6, generator=gen), torch.randn(2, 5, 6, generator=gen)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]).float()
    rows = torch.zeros(3, 30, dtype=torch.bool)
    rows[1, :12] = rows[2, 5:20] = True
    values, gated = torch.tensor([0.0, 4.0, 3.0]), torch.tensor([False, True, False])
    index = torch.tensor([[1, 1, 1, 1, 1], [2, 2, 2, 0, 0]])
    ids = torch.tensor([[3, 7, 3, 25, 7], [6, 6, 8, 30, 30]])  # row 0 repeats green tokens; 30 pads row 1
    top_k = torch.tensor([0, 4])
    got = chunked_sdlp_loss(hs, ht, head_s, head_t, mask, rows, values, index, top_k, chunk, gated, ids)
    delta = rows[index].float() * values[index][..., None]
    for t in range(1, 5):  # row 0 only: no bias on tokens it used before t
        delta[0, t, ids[0, :t]] = 0.0
    s_logits, t_logits = head_s(hs), head_t(ht)
    want = sum(sdlp_loss(s_logits[b : b + 1], t_logits[b : b + 1], mask[b : b + 1], delta[b : b + 1],
                         top_k=int(top_k[b]) or None) for b in range(2)) / 2
    assert got.item() == pytest.approx(want.item(), rel=1e-5)
    ungated = chunked_sdlp_loss(hs, ht, head_s, head_t, mask, rows, values, index, top_k, chunk)
    assert ungated.item() != pytest.approx(got.item(), rel=1e-3)  # the gate changed the target


class _Recording(LogitsProcessor):
    """Wraps a processor and keeps what it added to the first row's logits at each step."""

    def __init__(self, inner):
        self.inner, self.applied = inner, []

    def __call__(self, input_ids, scores):
        out = self.inner(input_ids, scores)
        self.applied.append((out - scores)[0].clone())
        return out


def _generate_recording(model, tok, processor, max_new_tokens):
    """One sampled answer to a fixed question under ``processor``: its ids and the bias applied at each of its steps
    (``(steps, V)``; (scores + delta) - scores is delta up to float rounding)."""
    rec = _Recording(processor)
    enc = tok(["Why is the sky blue?"], return_tensors="pt")
    torch.manual_seed(0)
    out = model.generate(**enc, logits_processor=[rec], max_new_tokens=max_new_tokens, do_sample=True,
                         pad_token_id=tok.eos_token_id)
    ids = out[0, enc["input_ids"].shape[1] :].tolist()
    return ids, torch.stack(rec.applied)[: len(ids)]


def test_unused_only_replay_matches_what_the_processor_applied_during_generation(tiny_qwen):
    """The SDLP teacher's gated TSP bias (collator, loss) is the one the processor applies when generating:
    delta on the green set, except on the green tokens the answer already holds."""
    model, tok = tiny_qwen
    key = ICWKey.create("tsp", seed=3, tokenizer=tok, pool_size=40)
    # strong enough that green tokens would repeat if allowed
    ids, applied = _generate_recording(model, tok, TokenSetPreferenceLogitsProcessor(key, tok, 12.0, unused_only=True), 20)
    replayed = teacher_delta(key, ids, tok, delta=12.0, vocab_size=applied.shape[-1], unused_only=True)
    assert torch.allclose(replayed, applied, atol=1e-3)
    green = set(key.token_set(tok).tolist())
    used_green = [t for t in ids[:-1] if t in green]
    assert used_green, "the bias should have made the model use green tokens"
    assert all(applied[-1][t] == 0 for t in used_green) and applied[0][used_green[0]] > 0
    static = teacher_delta(key, ids, tok, delta=12.0, vocab_size=applied.shape[-1])
    assert not torch.equal(static, replayed)  # the gate removed the bias from used tokens


def test_collator_marks_only_tsp_rows_for_unused_only(qwen3):
    keys = {f: ICWKey.create(f, seed=1, tokenizer=qwen3, **({"pool_size": 400} if f == "tsp" else {})).to_string()
            for f in ("tsp", "wip")}
    rows = [{"family": f, "key": keys[f], "query": "Why do cats purr?", "response": "Cats purr, cats purr.", "label": 1}
            for f in ("tsp", "wip")]
    feats = [{**r, **tokenize_row(r, qwen3)} for r in rows]
    plain = SDLPCollator(qwen3, len(qwen3), SDLPConfig(output_dir="unused", report_to="none"))(feats)
    assert "bias_unused_only" not in plain and "response_ids" not in plain
    config = SDLPConfig(output_dir="unused", report_to="none", tsp_unused_only=True)
    batch = SDLPCollator(qwen3, len(qwen3), config)(feats)
    gated = batch["bias_unused_only"][batch["bias_index"][:, 0]]
    assert gated.tolist() == [True, False]
    assert batch["response_ids"][0, : len(feats[0]["response_ids"])].tolist() == feats[0]["response_ids"]


def _processor_replay(key, ids, tok, width):
    """What SentenceAcrosticLogitsProcessor adds at each step when the sequence grows by ``ids``."""
    proc = SentenceAcrosticLogitsProcessor(key, tok, delta=8.0)
    prompt = [tok.eos_token_id]
    out = []
    for t in range(len(ids)):
        seq = torch.tensor([prompt + ids[:t]])
        out.append(proc(seq, torch.zeros(1, width))[0])
    return torch.stack(out)


def test_sa_replay_matches_the_processor_on_text(qwen3):
    key = ICWKey.create("sa", seed=5, secret="BEHSCT")
    ids = qwen3(ANSWER, add_special_tokens=False)["input_ids"] + [qwen3.eos_token_id]
    want = _processor_replay(key, ids, qwen3, len(qwen3))
    got = teacher_delta(key, ids, qwen3, delta=8.0, vocab_size=len(qwen3))
    assert torch.equal(got, want)
    assert (want.abs().sum(-1) > 0).sum() >= 5  # the replay is active at several sentence starts
    codes = sa_bias_codes(key.secret_string, ids, vocabulary(qwen3))
    assert codes[0] == ord("B") - 65  # the first token opens a sentence with the first letter


def test_sa_replay_matches_what_the_processor_applied_during_generation(tiny_qwen):
    model, tok = tiny_qwen
    key = ICWKey.create("sa", seed=3)
    ids, applied = _generate_recording(model, tok, SentenceAcrosticLogitsProcessor(key, tok, delta=8.0), 24)
    replayed = teacher_delta(key, ids, tok, delta=8.0, vocab_size=applied.shape[-1])[: len(applied)]
    assert torch.allclose(replayed, applied, atol=1e-4)
    assert applied[0].abs().sum() > 0  # the first step opens a sentence: the bias was active


@pytest.mark.parametrize("family", ["tsp", "wip"])
def test_static_delta_is_the_green_mask(qwen3, family):
    key = ICWKey.create(family, seed=2, tokenizer=qwen3, **({"pool_size": 400} if family == "tsp" else {}))
    delta = teacher_delta(key, [1, 2, 3], qwen3, delta=5.0)
    green = set(np.flatnonzero(green_mask(key, vocabulary(qwen3))).tolist())
    assert set(torch.nonzero(delta[0]).squeeze(-1).tolist()) == green
    if family == "tsp":
        assert green == set(key.token_set(qwen3).tolist())
    assert torch.all(delta[delta != 0] == 5.0) and torch.equal(delta[0], delta[2])


def test_collator_aligns_teacher_and_student_on_response_tokens(qwen3):
    keys = [ICWKey.create("wip", seed=1, tokenizer=qwen3).to_string(), ICWKey.create("sa", seed=2).to_string(), ""]
    rows = [{"family": f, "key": k, "query": "Why do cats purr?", "response": r, "label": int(bool(k))}
            for f, k, r in [("wip", keys[0], "Cats purr when content."), ("sa", keys[1], ANSWER),
                            ("tsp", keys[2], "No idea.")]]
    feats = [{**r, **tokenize_row(r, qwen3)} for r in rows]
    assert feats[2]["student_prompt_ids"] == feats[2]["teacher_prompt_ids"]  # D_H0: the query alone
    assert len(feats[0]["student_prompt_ids"]) > len(feats[0]["teacher_prompt_ids"])
    config = SDLPConfig(output_dir="unused", report_to="none")
    batch = SDLPCollator(qwen3, len(qwen3) + 7, config)(feats)
    for side in ("teacher", "student"):
        ids, pos = batch[f"{side}_input_ids"], batch[f"{side}_positions"]
        for b, f in enumerate(feats):
            n = len(f["response_ids"])
            assert ids[b, pos[b, :n] + 1].tolist() == f["response_ids"]
    assert batch["bias_rows"].shape[1] == len(qwen3) + 7
    assert batch["top_k"].tolist() == [0, 1000, 1000]
    assert batch["bias_index"][2].abs().sum() == 0  # D_H0 rows: delta = 0
    wip_rows = batch["bias_rows"][batch["bias_index"][0, 0]]
    key = ICWKey.from_string(keys[0])
    assert wip_rows[: len(qwen3)].numpy().sum() == int(
        np.sum(vocabulary(qwen3).is_word & np.isin(vocabulary(qwen3).word_letter, [ord(c) - 65 for c in key.green_letters])))
