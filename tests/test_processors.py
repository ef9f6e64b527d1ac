import numpy as np
import pytest
import torch

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
    keys = [ICWKey.create("sa", seed=s) for s in range(2)]  # 4 prompts... one key per pair below
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
