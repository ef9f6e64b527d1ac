import itertools
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from icw import ICWKey, ICWKeyError, KeyMismatchError, TextTooLongError, verify, vocabulary
from icw.keys import SA_POOL
from icw.lcs import lcs_lengths, letter_codes, secret_masks
from icw.verification import (
    WIP_SCORE_STEP,
    english_initial_frequencies,
    sequential_stop,
    wip_excess_test,
    wip_key_null_sf,
    wip_letter_counts,
    wip_letter_scores,
    z_statistic,
)

HUMAN = ("The committee met on Tuesday to discuss the budget. Members raised concerns about rising costs, "
         "and several proposals were tabled for further review. A final decision is expected next month. ") * 3


def python_lcs(a: str, b: str) -> int:
    row = [0] * (len(b) + 1)
    for ca in a:
        prev = 0
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], prev + 1 if ca == cb else max(row[j], row[j - 1])
    return row[-1]


def test_bit_parallel_lcs_matches_dynamic_programming():
    rng = random.Random(0)
    for _ in range(300):
        k = rng.randint(1, 63)
        secret = "".join(rng.choice("ABCDE") for _ in range(k))
        text = "".join(rng.choice("ABCDEF") for _ in range(rng.randint(1, 90)))
        got = lcs_lengths(secret_masks(letter_codes(secret)[None, :]), letter_codes(text)[None, :], k)[0]
        assert got == python_lcs(secret, text)


def test_tsp_statistic_and_exact_p_against_brute_force(gpt2):
    # A 12-token pool makes every possible green set enumerable.
    key = ICWKey.create("tsp", seed=11, tokenizer=gpt2, gamma=0.25, pool_size=12)
    view = vocabulary(gpt2)
    pool = view.v_en[:12]
    text = "\n".join(view.surfaces[i] for i in pool[:7]) + "\nand more words that are not in the pool"
    result = verify(text, key, gpt2)
    ids = set(gpt2(text, add_special_tokens=False)["input_ids"])
    scored = ids & set(pool.tolist())
    green = set(key.token_set(gpt2).tolist())
    n, x = len(scored), len(scored & green)
    assert n == 7
    assert (result.num_tokens_scored, result.num_aligned) == (n, x)
    assert result.z_score == pytest.approx((x - n * 0.25) / math.sqrt(n * 0.25 * 0.75))
    size = math.floor(0.25 * 12)
    subsets = list(itertools.combinations(pool.tolist(), size))
    brute = sum(len(scored & set(s)) >= x for s in subsets) / len(subsets)
    assert result.p_value == pytest.approx(brute, rel=1e-9)


def test_wip_exact_null_against_brute_force():
    rng = np.random.default_rng(1)
    for k in (1, 2, 3, 4):
        counts = rng.integers(0, 6, size=26)
        sums = np.array([counts[list(c)].sum() for c in itertools.combinations(range(26), k)])
        for x in range(0, int(sums.max()) + 2):
            assert wip_key_null_sf(counts, k, x) == pytest.approx((sums >= x).mean(), abs=1e-12)


@pytest.mark.parametrize("budget", [1 << 22, 1 << 12], ids=["one-chunk", "many-chunks"])
def test_wip_exact_null_batched_equals_one_at_a_time(monkeypatch, budget):
    monkeypatch.setattr(sys.modules["icw.wip"], "_TAIL_BUDGET", budget)
    rng = np.random.default_rng(2)
    counts = rng.integers(0, 9, size=(40, 26)) * rng.integers(1, 4, size=(40, 1))  # texts of unequal length
    counts[3] = 0  # a text with nothing scored
    letters, x = rng.integers(1, 26, size=40), rng.integers(-1, 200, size=40)
    batched = wip_key_null_sf(counts, letters, x)
    assert batched.shape == (40,)
    for b in range(40):
        assert batched[b] == pytest.approx(wip_key_null_sf(counts[b], int(letters[b]), int(x[b])), abs=1e-12)


def knapsack_sf(counts: np.ndarray, letters: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``P(X' >= x)`` by the 26-step dynamic program over every text at once: the tail's former
    implementation, kept in ``icw.wip._subset_sums`` for the whole distribution."""
    from icw.wip import _subset_sums

    width = np.minimum(np.maximum(x, 0), counts.sum(1) + 1)
    total = np.array([math.comb(26, int(k)) for k in letters], dtype=np.float64)
    if int(width.max()) == 0:
        return np.ones(len(counts))
    ways = _subset_sums(counts, letters, int(width.max()))
    below = np.where(np.arange(int(width.max()))[None, :] < width[:, None], ways, 0.0).sum(1)
    return (total - below) / total


def test_wip_tail_equals_the_knapsack_bit_for_bit():
    """Meeting in the middle gives the dynamic program's p-values exactly, on random counts of every size."""
    rng = np.random.default_rng(7)
    for _ in range(60):
        batch = int(rng.integers(1, 40))
        counts = rng.integers(0, int(rng.integers(1, 900)), size=(batch, 26))
        counts[rng.random((batch, 26)) < 0.2] = 0  # absent letters
        letters = rng.integers(0, 27, size=batch)
        x = rng.integers(-3, int(counts.sum(1).max()) + 5, size=batch)
        assert np.array_equal(wip_key_null_sf(counts, letters, x), knapsack_sf(counts, letters, x))


def test_wip_p_values_on_human_texts_equal_the_knapsack(qwen3):
    """verify's WIP p-values on 400 human passages under three keys are the dynamic program's, bit for bit."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from _common import human_passages

    passages = [t for _, t in human_passages()]
    texts = passages[::max(1, len(passages) // 400)][:400]
    counts = wip_letter_counts(texts, qwen3)
    scores = wip_letter_scores(counts)
    shifted = scores - scores.min(1, keepdims=True)
    for seed, size in ((1, 13), (2, 13), (3, 5)):
        key = ICWKey.create("wip", seed=seed, tokenizer=qwen3, num_letters=size)
        green = np.zeros(26, dtype=bool)
        green[[ord(c) - 65 for c in key.green_letters]] = True
        x = shifted[:, green].sum(1)
        expected = np.where(counts.sum(1) > 0, knapsack_sf(shifted, np.full(len(texts), size), x), 1.0)
        got = [r.p_value for r in verify(texts, key, qwen3)]
        assert np.array_equal(np.minimum(expected, 1.0), np.array(got))


def every_key_sum(scores: np.ndarray, k: int) -> np.ndarray:
    """The summed scores of every k-letter key, all C(26, k) of them: each key is a subset of
    A-M joined with a subset of N-Z, so two 8,192-row tables enumerate them all."""
    half = np.array(list(itertools.product([0, 1], repeat=13)), dtype=np.int64)
    size = half.sum(1)
    a, b = half @ scores[:13], half @ scores[13:]
    out = np.concatenate([np.add.outer(a[size == j], b[size == k - j]).ravel() for j in range(max(0, k - 13), min(k, 13) + 1)])
    assert len(out) == math.comb(26, k)
    return out


def test_wip_excess_p_value_against_every_13_letter_key():
    rng = np.random.default_rng(5)
    for trial in range(4):  # small texts: 10 to 80 distinct word-initial tokens, skewed like English
        counts = rng.multinomial(int(rng.integers(10, 80)), english_initial_frequencies())
        green = np.zeros(26, dtype=bool)
        green[rng.choice(26, 13, replace=False)] = True
        if trial == 0:
            green[:] = False
            green[np.argsort(-counts)[:13]] = True  # the most extreme key: p = 1 / C(26, 13) up to ties
        d, p = wip_excess_test(counts[None], green[None])
        scores = wip_letter_scores(counts)
        sums = every_key_sum(scores, 13)
        observed = int(scores[green].sum())
        assert d[0] == pytest.approx(observed * WIP_SCORE_STEP)
        assert p[0] == pytest.approx((sums >= observed).mean(), abs=1e-12)


def test_wip_excess_p_value_against_itertools_for_small_keys():
    rng = np.random.default_rng(6)
    for k in (1, 2, 3, 24):
        counts = rng.integers(0, 7, size=26)
        scores = wip_letter_scores(counts)
        sums = np.array([scores[list(c)].sum() for c in itertools.combinations(range(26), k)])
        for _ in range(5):
            green = np.zeros(26, dtype=bool)
            green[rng.choice(26, k, replace=False)] = True
            assert wip_excess_test(counts[None], green[None])[1][0] == pytest.approx(
                (sums >= scores[green].sum()).mean(), abs=1e-12)


def test_wip_result_against_brute_force(qwen3):
    key = ICWKey.create("wip", seed=2, tokenizer=qwen3, num_letters=3)
    view = vocabulary(qwen3)
    result = verify(HUMAN, key, qwen3)
    words = {i for i in qwen3(HUMAN, add_special_tokens=False)["input_ids"] if view.is_word[i]}
    letters = [int(view.word_letter[i]) for i in words]
    counts = np.bincount(letters, minlength=26)
    assert (wip_letter_counts([HUMAN], qwen3)[0] == counts).all()
    green = [ord(c) - 65 for c in key.green_letters]
    x = int(counts[green].sum())
    assert (result.num_tokens_scored, result.num_aligned) == (len(words), x)
    p0 = float(view.letter_fractions[green].sum())
    assert result.p0 == pytest.approx(p0) and result.z_score == pytest.approx(z_statistic(x, len(words), p0))
    # the decision statistic: per-letter excess over English, rounded to the step, summed over the key
    scores = np.rint((counts - len(words) * english_initial_frequencies()) / WIP_SCORE_STEP)
    sums = np.array([scores[list(c)].sum() for c in itertools.combinations(range(26), 3)])
    assert result.p_value == pytest.approx(np.mean(sums >= scores[green].sum()))
    assert result.statistic.startswith("D = ") and "exact, over all 2,600 3-letter keys" in result.p_value_method


def test_wip_default_key_p_value_against_every_key(qwen3):
    key = ICWKey.create("wip", seed=9, tokenizer=qwen3)
    text = " ".join(f"{c}{c.lower()}xyz" for c in key.green_letters) + " " + HUMAN
    result = verify(text, key, qwen3)
    scores = wip_letter_scores(wip_letter_counts([text], qwen3)[0])
    green = np.array([c in key.green_letters for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"])
    assert result.p_value == pytest.approx((every_key_sum(scores, 13) >= scores[green].sum()).mean(), abs=1e-12)


def test_sa_statistics():
    key = ICWKey.create("sa", secret="HELLO")
    text = "Here we go. Every day is new. Lots to do. Let us start. Over and out. Xylophones ring."
    r = verify(text, key)
    assert (r.num_tokens_scored, r.num_aligned) == (6, 5)
    # the paper's permutation z: recompute the null by brute force over all orderings of Phi
    perms = {"".join(p) for p in itertools.permutations("HELLOX")}
    # every distinct ordering is equally likely under a uniform permutation of the multiset
    values = np.array([python_lcs("HELLO", p) for p in perms])
    assert r.null_mean == pytest.approx(values.mean(), abs=0.1)
    assert r.null_sd == pytest.approx(values.std(ddof=1), abs=0.1)
    assert r.z_score == pytest.approx((5 - r.null_mean) / r.null_sd)
    assert r.permutation_p_value == pytest.approx((np.sum(values >= 5) / len(values) * 1000 + 1) / 1001, abs=0.01)
    assert r.p_value_resolution == pytest.approx(1e-4)
    # z depends on the text and key only: not on the Monte Carlo size, not on earlier calls
    assert verify(text, key, num_null_keys=1).z_score == r.z_score == verify(text, key).z_score


def test_sa_monte_carlo_p_against_enumeration():
    # 2-letter secrets from the 20-letter pool: 400 keys, enumerable
    key = ICWKey.create("sa", secret="TA")
    text = "The cat sat. A dog ran. Then rain fell. Birds flew."
    r = verify(text, key, num_null_keys=20000, sequential=False)
    phi = "TATB"
    exact = np.mean([python_lcs(a + b, phi) >= r.num_aligned for a in SA_POOL for b in SA_POOL])
    sd = math.sqrt(exact * (1 - exact) / 20000)
    assert abs(r.p_value - exact) < 4 * sd + 1e-4
    # sequential (the default): stopped at the h-th exceedance, p = h / l estimates the same probability
    # with relative standard error about sqrt((1 - p) / h)
    seq = verify(text, key, num_null_keys=20000)
    h = sequential_stop(0.01, 20000)
    assert f"h = {h}th" in seq.p_value_method and seq.p_value > 0.01
    assert abs(seq.p_value - exact) < 4 * exact * math.sqrt((1 - exact) / h) + 1e-4


def test_results_state_statistic_null_and_p(qwen3):
    for family in ("tsp", "wip", "sa"):
        key = ICWKey.create(family, seed=1, tokenizer=qwen3 if family != "sa" else None)
        r = verify(HUMAN, key, qwen3)
        assert r.statistic and r.null_hypothesis and r.p_value_method
        assert 0 < r.p_value <= 1 and math.isfinite(r.z_score)
        assert r.is_watermarked == (r.p_value <= 0.01)
        assert r.to_dict()["key"] == key.to_string()


def test_batched_mixed_keys_equal_single_calls(qwen3):
    texts = [HUMAN, "Rain forms when vapour condenses. Drops grow. Gravity wins.", HUMAN[:90]]
    keys = [ICWKey.create("tsp", seed=1, tokenizer=qwen3), ICWKey.create("sa", seed=2), ICWKey.create("wip", seed=3, tokenizer=qwen3)]
    batch = verify(texts, keys, qwen3)
    for text, key, res in zip(texts, keys, batch, strict=True):
        single = verify(text, key, qwen3)
        assert single.to_dict() == res.to_dict()
    # a key's own embedded tokenizer is loaded when none is given
    assert verify(texts[0], keys[0]).to_dict() == batch[0].to_dict()


def test_highlights(qwen3):
    for family in ("tsp", "wip", "sa"):
        key = ICWKey.create(family, seed=4, tokenizer=qwen3 if family != "sa" else None)
        r = verify(HUMAN, key, qwen3, highlights=True)
        assert r.highlights
        for h in r.highlights:
            assert HUMAN[h.start : h.end] == h.text
        if family != "sa":
            aligned = {qwen3.convert_tokens_to_ids(qwen3.tokenize(h.text)[0]) for h in r.highlights if h.aligned}
            assert len(aligned) == r.num_aligned
        else:
            assert sum(h.aligned for h in r.highlights) == r.num_aligned


@pytest.mark.parametrize("text", ["", "   \n\t ", "这是一个完全用中文写成的句子，没有英文。", "1234 5678 !!! ???", "\x00\x01\x02\x7f" * 20])
def test_texts_with_nothing_to_score(text, qwen3):
    for family in ("tsp", "wip", "sa"):
        key = ICWKey.create(family, seed=1, tokenizer=qwen3 if family != "sa" else None)
        r = verify(text, key, qwen3)
        assert r.num_tokens_scored == 0 and r.z_score == 0.0 and r.p_value == 1.0 and not r.is_watermarked
        assert r.note


def test_mostly_non_english_text_is_flagged(qwen3):
    text = "Le ciel est bleu. " + "这是一个完全用中文写成的句子。" * 10
    note = verify(text, ICWKey.create("wip", seed=1, tokenizer=qwen3), qwen3).note
    assert "non-English" in note and "only its English" in note


@pytest.mark.parametrize("text", ["这是一个完全用中文写成的句子。这是第二句。", "Это предложение написано по-русски. Ещё одно."])
def test_non_english_only_text_says_nothing_was_scored(text, qwen3):
    for family in ("tsp", "wip", "sa"):
        key = ICWKey.create(family, seed=1, tokenizer=qwen3 if family != "sa" else None)
        r = verify(text, key, qwen3)
        assert (r.num_tokens_scored, r.z_score, r.p_value) == (0, 0.0, 1.0)
        assert "nothing was scored" in r.note and "non-English" in r.note and "only its English" not in r.note


@pytest.mark.parametrize("surrogate", ["\ud800", "\udfff", "\ud83d\ude00"])
def test_lone_surrogates_score_like_the_replacement_character(surrogate, qwen3):
    text = f"The committee met {surrogate} on Tuesday. Members raised concerns{surrogate}. A decision is expected."
    clean = text.replace(surrogate, "\ufffd" * len(surrogate))
    for family in ("tsp", "wip", "sa"):
        key = ICWKey.create(family, seed=1, tokenizer=qwen3 if family != "sa" else None)
        got, expected = verify(text, key, qwen3, highlights=True), verify(clean, key, qwen3, highlights=True)
        assert got.to_dict() == expected.to_dict() and got.num_tokens_scored > 0
        assert [(h.start, h.end) for h in got.highlights] == [(h.start, h.end) for h in expected.highlights]


def test_bad_inputs(qwen3, gpt2):
    key = ICWKey.create("tsp", seed=1, tokenizer=qwen3)
    with pytest.raises(TextTooLongError, match=r"text 1 has 1,100,000 characters.*max_chars=.*--max-chars") as exc:
        verify(["fine", "word " * 220_000], key, qwen3)
    assert (exc.value.index, exc.value.length, exc.value.max_chars) == (1, 1_100_000, 100_000)
    assert verify("word " * 30, key, qwen3, max_chars=150).num_tokens_scored > 0
    with pytest.raises(TextTooLongError):
        verify("word " * 30, key, qwen3, max_chars=149)
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="max_chars must be a positive integer"):
            verify("Some text.", key, qwen3, max_chars=bad)
    with pytest.raises(TypeError, match="bytes"):
        verify(b"binary \xff\xfe junk", key, qwen3)
    with pytest.raises(TypeError, match="text 1 is a int"):
        verify(["fine", 3], key, qwen3)
    with pytest.raises(ValueError, match="no texts"):
        verify([], key, qwen3)
    with pytest.raises(KeyMismatchError, match="built for tokenizer 'qwen3'"):
        verify("Some text here.", key, gpt2)
    with pytest.raises(ICWKeyError, match="malformed key"):
        verify("Some text here.", "icw-tsp-1", qwen3)
    with pytest.raises(ValueError, match="alpha"):
        verify("Some text.", key, qwen3, alpha=5)


def test_vectorized_hypergeometric_tails_match_scipy():
    from scipy.stats import hypergeom

    from icw.verification import hypergeom_tails

    rng = np.random.default_rng(0)
    big = rng.integers(10, 150_000, 3000)
    k = (big * rng.uniform(0.05, 0.5, 3000)).astype(int)
    n = np.minimum(rng.integers(0, 800, 3000), big)
    x = rng.integers(-2, 300, 3000)
    expected = hypergeom.sf(x - 1, big, k, n)
    got = hypergeom_tails(x, big, k, n)
    assert np.allclose(got, expected, rtol=1e-8, atol=1e-300)


def test_batched_token_scoring_equals_plain_sets_on_human_texts(qwen3):
    """n and X of every text in one mixed batch (TSP keys of two pool sizes, WIP keys of two sizes, keys
    shared and not) equal Python sets over that text's own token ids."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from _common import human_passages

    texts = [t for _, t in human_passages()][::40][:90] + ["", "   ", "这是中文。"]
    keys = [ICWKey.create("tsp", seed=1, tokenizer=qwen3), ICWKey.create("tsp", seed=2, tokenizer=qwen3, pool_size=5000),
            ICWKey.create("wip", seed=1, tokenizer=qwen3), ICWKey.create("wip", seed=3, tokenizer=qwen3, num_letters=5)]
    per_text = [keys[i % 4] if i % 3 else keys[0] for i in range(len(texts))]
    view = vocabulary(qwen3)
    results = verify(texts, per_text, qwen3)
    for text, key, r in zip(texts, per_text, results, strict=True):
        from icw.keys import green_mask, scored_mask

        ids = set(qwen3(text, add_special_tokens=False)["input_ids"])
        scored = {t for t in ids if 0 <= t < view.size and scored_mask(key, view)[t]}
        assert r.num_tokens_scored == len(scored)
        assert r.num_aligned == sum(bool(green_mask(key, view)[t]) for t in scored)
        assert r.to_dict() == verify(text, key, qwen3).to_dict()


def test_to_dict_is_asdict_without_the_deep_copies(qwen3):
    from dataclasses import asdict

    for family in ("tsp", "wip", "sa"):
        key = ICWKey.create(family, seed=1, tokenizer=qwen3 if family != "sa" else None)
        for highlights in (False, True):
            r = verify(HUMAN, key, qwen3, highlights=highlights)
            expected = {k: v for k, v in asdict(r).items() if highlights or k != "highlights"}
            assert r.to_dict() == expected and list(r.to_dict()) == list(expected)
