import numpy as np
import pytest
import torch
from transformers import LogitsProcessor

from icw import ICWKey, sentence_initials, verify, vocabulary
from icw.generation import chat_prompt, generate_responses
from icw.keys import green_mask
from icw.processors import (
    SentenceAcrosticLogitsProcessor,
    TokenSetPreferenceLogitsProcessor,
    WordInitialPreferenceLogitsProcessor,
    logits_processor,
)

QUESTIONS = ["What causes rain?", "Why do we dream?", "How does a bicycle stay upright?",
             "What is inflation?", "How do plants make food?", "Why is the ocean salty?"]


# ----------------------------------------------------------------------- mechanics
def test_static_bias_rows_follow_keys(qwen3):
    keys = [ICWKey.create("tsp", seed=s, tokenizer=qwen3) for s in (1, 2)]
    proc = TokenSetPreferenceLogitsProcessor(keys, qwen3, delta=2.5)
    width = len(qwen3) + 267  # model embeddings are padded past the tokenizer
    scores = torch.zeros(4, width)  # 2 prompts x num_return_sequences=2
    out = proc(torch.zeros(4, 3, dtype=torch.long), scores)
    view = vocabulary(qwen3)
    for row, key in zip(range(4), [keys[0], keys[0], keys[1], keys[1]], strict=True):
        expected = np.zeros(width, dtype=np.float32)
        expected[: view.size] = green_mask(key, view) * 2.5
        assert torch.equal(out[row], torch.from_numpy(expected))
    with pytest.raises(ValueError, match="2 keys for a batch of 3 rows"):
        proc(torch.zeros(3, 3, dtype=torch.long), torch.zeros(3, width))


def test_wip_bias_targets_word_initial_green_letters(qwen3):
    key = ICWKey.create("wip", seed=7, tokenizer=qwen3)
    out = WordInitialPreferenceLogitsProcessor(key, qwen3)(torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, len(qwen3)))
    boosted = torch.nonzero(out[0]).flatten().tolist()
    view = vocabulary(qwen3)
    assert all(view.surfaces[i][0] == " " and view.surfaces[i][1].upper() in key.green_letters for i in boosted[::50])
    assert out[0, qwen3.convert_tokens_to_ids("Ġ" + "apple")] == (3.0 if "A" in key.green_letters else 0.0)


def test_family_checks(qwen3, gpt2):
    with pytest.raises(ValueError, match="implements the tsp family"):
        TokenSetPreferenceLogitsProcessor(ICWKey.create("sa", seed=1), qwen3)
    with pytest.raises(ValueError, match="built for tokenizer 'qwen3'"):
        WordInitialPreferenceLogitsProcessor(ICWKey.create("wip", seed=1, tokenizer=qwen3), gpt2)
    assert isinstance(logits_processor("icw:sa:seed=1,length=18", qwen3), SentenceAcrosticLogitsProcessor)


def test_sa_state_machine_step_by_step(gpt2):
    key = ICWKey.create("sa", secret="TAXI")
    proc = SentenceAcrosticLogitsProcessor(key, gpt2, delta=5.0)
    text = "Tom ran. Bob sat. Cat ate. Dog ran. Apples fell."
    ids = gpt2(text)["input_ids"]
    prompt = [50256, 50256]
    width = len(gpt2)
    biased_letters = []
    for t in range(len(ids) + 1):
        seq = torch.tensor([prompt + ids[:t]])
        out = proc(seq, torch.zeros(1, width))
        boosted = torch.nonzero(out[0]).flatten()
        biased_letters.append(gpt2.decode([int(boosted[0])]).strip()[0].upper() if len(boosted) else None)
    proc.finish(torch.tensor([prompt + ids]))
    assert proc.tracked_letters == [sentence_initials(text)] == ["TBCDA"]
    # T matched at once; then B, C, D are three misses for A, so A is dropped and X becomes the target
    assert proc.targets == [2] and "X" in biased_letters and biased_letters[0] == "T"


# ----------------------------------------------------------------------- real model
@pytest.fixture(scope="module")
def prompts(smollm2):
    model, tok = smollm2
    return [chat_prompt(tok, q) for q in QUESTIONS]


@pytest.fixture(scope="module")
def plain_answers(smollm2):
    model, tok = smollm2
    return generate_responses(model, tok, QUESTIONS, mode="plain", max_new_tokens=140, batch_size=6)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["tsp", "wip", "sa"])
def test_bias_raises_z_far_above_threshold(family, smollm2, plain_answers):
    model, tok = smollm2
    keys = [ICWKey.create(family, seed=100 + i, tokenizer=tok if family != "sa" else None) for i in range(len(QUESTIONS))]
    plain = plain_answers
    biased = generate_responses(model, tok, QUESTIONS, keys, mode="bias", max_new_tokens=140, batch_size=6)
    z_plain = np.array([r.z_score for r in verify(plain, keys, tok)])
    z_bias = np.array([r.z_score for r in verify(biased, keys, tok)])
    assert z_bias.mean() > 3.0 and np.median(z_bias) > 2.326, z_bias
    assert abs(z_plain.mean()) < 1.5, z_plain
    assert (z_bias > z_plain).mean() >= 5 / 6


@pytest.mark.slow
def test_sa_tracked_letters_equal_the_extractor(smollm2, prompts):
    model, tok = smollm2
    tok.padding_side = "left"
    enc = tok(prompts[:4], return_tensors="pt", padding=True, add_special_tokens=False)  # left padding, unequal lengths
    keys = [ICWKey.create("sa", seed=s) for s in range(4)]  # one key per prompt (covers its sampled copies)
    for sample in (False, True):
        proc = SentenceAcrosticLogitsProcessor(keys, tok)
        torch.manual_seed(0)
        out = model.generate(**enc, logits_processor=[proc], max_new_tokens=120, do_sample=sample,
                             num_return_sequences=2 if sample else 1, pad_token_id=tok.pad_token_id)
        tracked = proc.finish(out)
        texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        assert len(texts) == (8 if sample else 4)
        for letters, text in zip(tracked, texts, strict=True):
            assert letters == sentence_initials(text)
        assert sum(len(t) for t in tracked) > 10


@pytest.mark.slow
def test_num_return_sequences_keeps_each_prompts_key(smollm2, prompts):
    model, tok = smollm2
    tok.padding_side = "left"
    keys = [ICWKey.create("tsp", seed=s, tokenizer=tok) for s in (1, 2)]
    enc = tok(prompts[:2], return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(0)
    out = model.generate(**enc, logits_processor=[TokenSetPreferenceLogitsProcessor(keys, tok)], max_new_tokens=80,
                         do_sample=True, num_return_sequences=3, pad_token_id=tok.pad_token_id)
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    own = [verify(t, keys[i // 3], tok).z_score for i, t in enumerate(texts)]
    other = [verify(t, keys[1 - i // 3], tok).z_score for i, t in enumerate(texts)]
    assert min(own) > 2.0 and np.mean(own) > np.mean(other) + 2.5, (own, other)


# ------------------------------------------------------------ decoding strategies (issue 12.3)
class _Checker(LogitsProcessor):
    """Runs after the three processors at every call: the SA rows must track the letters of the
    decoded continuation of each row *at that call*, and TSP/WIP must have added exactly their
    key's bias on each row (keys follow rows in consecutive blocks, whatever the strategy)."""

    def __init__(self, tok, sa, static, prompt_length):
        self.tok, self.sa, self.static, self.prompt_length = tok, sa, static, prompt_length
        self.calls = self.rows_checked = 0

    def __call__(self, input_ids, scores):
        self.calls += 1
        texts = self.tok.batch_decode(input_ids[:, self.prompt_length:], skip_special_tokens=True)
        assert self.sa.tracked_letters == [sentence_initials(t) for t in texts], (self.calls, texts)
        self.rows_checked += len(texts)
        return scores


class _Recorder(LogitsProcessor):
    def __init__(self, proc):
        self.proc, self.seen = proc, []

    def __call__(self, input_ids, scores):
        out = self.proc(input_ids, scores)
        self.seen.append(out - scores)
        return out


STRATEGIES = {
    "greedy": dict(do_sample=False),
    "sampling": dict(do_sample=True, num_return_sequences=2),
    "beam-3-of-3": dict(num_beams=3, num_return_sequences=3, do_sample=False),
    "beam-1-of-3": dict(num_beams=3, do_sample=False),
    "prompt-lookup": dict(prompt_lookup_num_tokens=3, do_sample=False),
    "assisted": dict(do_sample=False),  # the assistant is SmolLM2 itself (transformers allows it offline)
}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_family_under_every_decoding_strategy(strategy, smollm2, prompts):
    model, tok = smollm2
    tok.padding_side = "left"
    kwargs = dict(STRATEGIES[strategy])
    batch = prompts[:1] if strategy in ("prompt-lookup", "assisted") else prompts[:2]  # assisted: batch size 1
    if strategy == "assisted":
        kwargs["assistant_model"] = model
    enc = tok(batch, return_tensors="pt", padding=True, add_special_tokens=False)
    prompt_length = enc["input_ids"].shape[1]
    keys = {f: [ICWKey.create(f, seed=40 + i, tokenizer=None if f == "sa" else tok) for i in range(len(batch))]
            for f in ("sa", "wip", "tsp")}
    sa = SentenceAcrosticLogitsProcessor(keys["sa"], tok)
    static = {f: _Recorder(logits_processor(keys[f], tok)) for f in ("wip", "tsp")}
    checker = _Checker(tok, sa, static, prompt_length)
    torch.manual_seed(0)
    out = model.generate(**enc, logits_processor=[sa, *static.values(), checker], max_new_tokens=24,
                         pad_token_id=tok.pad_token_id, **kwargs)
    texts = tok.batch_decode(out[:, prompt_length:], skip_special_tokens=True)
    returned = len(batch) * kwargs.get("num_return_sequences", 1)
    assert len(texts) == returned
    assert sa.finish(out) == [sentence_initials(t) for t in texts]
    assert sum(map(len, sa.tracked_letters)) >= returned  # something was tracked
    assert checker.calls >= 24 and checker.rows_checked >= checker.calls * len(batch)
    view = vocabulary(tok)
    for family, rec in static.items():
        masks = np.stack([green_mask(k, view) for k in keys[family]]).astype(np.float32) * rec.proc.delta
        for added in rec.seen:
            per_key = added.shape[0] // len(batch)
            for row in range(added.shape[0]):
                expected = torch.from_numpy(masks[row // per_key])  # (scores + bias) - scores: float rounding
                torch.testing.assert_close(added[row, : view.size], expected, atol=1e-3, rtol=0, msg=(family, row))


# --------------------------------------------------------------- special tokens (issue 12.4)
def test_sa_processor_agrees_with_the_extractor_on_random_smollm2_tokens(smollm2):
    """SmolLM2's added tokens 3-16 (``<filename>``, ...) are special: decoding drops them, so the
    processor must read them as nothing (they were read as HTML tags)."""
    _, tok = smollm2
    view = vocabulary(tok)
    special = sorted(tok.added_tokens_decoder)
    assert all(view.surfaces[i] == "" for i in special) and len(special) == 17
    rng = np.random.default_rng(12)
    prompt = tok("Hello", add_special_tokens=False)["input_ids"]
    sequences = []
    for _ in range(2000):
        length = int(rng.integers(1, 24))
        ids = rng.integers(0, view.size, size=length)
        mix = rng.random(length) < 0.25  # many special and markup-heavy tokens, where the bug was
        ids[mix] = rng.choice(special + tok.convert_tokens_to_ids(["<", ">", ".", "Ċ", "Ġ<", "ĠThe"]), size=mix.sum())
        sequences.append(ids.tolist())
    disagree = 0
    for start in range(0, len(sequences), 250):
        chunk = sequences[start:start + 250]
        width = max(map(len, chunk))
        padded = torch.tensor([prompt + ids + [tok.eos_token_id] * (width - len(ids)) for ids in chunk])
        proc = SentenceAcrosticLogitsProcessor(ICWKey.create("sa", seed=3), tok)
        proc(padded[:, : len(prompt)], torch.zeros(len(chunk), view.size))
        tracked = proc.finish(padded)
        texts = [tok.decode(ids, skip_special_tokens=True) for ids in chunk]
        disagree += sum(a != sentence_initials(t) for a, t in zip(tracked, texts, strict=True))
    assert disagree == 0
