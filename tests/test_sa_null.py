"""The SA nulls: the permutation null for long texts, drawn block by block (issue 12.6): the same
null as shuffling the whole letter string, without holding ``N`` shuffles of the text in memory; and
the sequential Monte Carlo p-value (issue 25): the full Monte Carlo's decision, valid on human text."""

import random
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom

from icw import ICWKey, verify
from icw.lcs import (
    PERMUTATION_BLOCK,
    lcs_lengths,
    letter_codes,
    permutation_null,
    permutations,
    secret_table,
)
from icw.verification import sequential_stop

SECRET = "ABCDEFGHILMNOPRSTU"


@pytest.mark.parametrize("m", [PERMUTATION_BLOCK + 1, 700])
def test_blocked_null_matches_whole_shuffles(m):
    rng = np.random.default_rng(m)
    weights = rng.dirichlet(np.ones(26) * 0.5)  # skewed letter frequencies, as in real texts
    codes = rng.choice(26, size=m, p=weights).astype(np.int64)
    count = 4000
    blocked = permutation_null(SECRET, codes, count)
    whole = lcs_lengths(secret_table(SECRET), codes[permutations.__wrapped__(m, count)], len(SECRET))
    # two independent Monte Carlo samples of one distribution: means within 4 standard errors
    se = np.sqrt(blocked.var(ddof=1) / count + whole.var(ddof=1) / count)
    assert abs(blocked.mean() - whole.mean()) < 4 * se + 1e-9, (blocked.mean(), whole.mean())
    assert abs(blocked.std() - whole.std()) < 0.1 * max(whole.std(), 0.05)


def test_batched_nulls_equal_one_text_at_a_time(monkeypatch):
    """Texts of many lengths (long ones blocked), in groups of every size: each text's null is
    permutation_null's, number for number."""
    from icw import lcs

    rng = np.random.default_rng(3)
    lengths = [1, 2, 5, 5, 5, 17, 40, 40, PERMUTATION_BLOCK, PERMUTATION_BLOCK + 3] + list(rng.integers(1, 60, 40))
    phis = [rng.integers(0, 26, int(m)).astype(np.int64) for m in lengths]
    expected = [permutation_null(SECRET, p, 300) for p in phis]
    for words in (300, 3000, lcs.CACHE_WORDS):  # one text a group, ten, all
        monkeypatch.setattr(lcs, "CACHE_WORDS", words)
        got = lcs.permutation_nulls(SECRET, phis, 300)
        assert all(np.array_equal(g, e) for g, e in zip(got, expected, strict=True))


def test_blocked_null_keeps_the_letters():
    """A text of one repeated letter has a single ordering: every shuffle gives the same LCS."""
    codes = letter_codes("E" * 1000)
    assert set(permutation_null(SECRET, codes, 50).tolist()) == {1}
    two = letter_codes("AB" * 400)  # 400 A and 400 B: each shuffle holds both letters, so LCS("...AB...") = 2
    assert set(permutation_null(SECRET, two, 50).tolist()) == {2}


def test_long_sa_text_is_deterministic_and_scored():
    key = ICWKey.create("sa", seed=4)
    text = " ".join(f"{w} went home." for w in ["Alpha", "Bravo", "Charlie", "Delta", "Echo"] * 120)
    a, b = verify(text, key), verify(text, key)
    assert a.num_tokens_scored == 600 and a.to_dict() == b.to_dict()


def _human_texts() -> list[str]:
    """gensim's news documents and Wikipedia paragraphs (``benchmarks/_common.py``), with >= 2 sentences."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from _common import human_passages

    return [t for _, t in human_passages() if t.count(". ") >= 1]


def _acrostic(secret: str, keep: int, rng: random.Random, human: list[str]) -> str:
    """Sentences whose initials spell ``keep`` letters of the secret (in order), among human sentences:
    from clearly watermarked (all kept) to around the threshold."""
    letters = sorted(rng.sample(range(len(secret)), keep))
    filler = [s for s in re.split(r"(?<=\.) ", rng.choice(human)) if s[:1].isupper()][:6]
    out = [f"{secret[i]}{'ow' if secret[i] != 'N' else 'ever'} it goes on." for i in letters]
    for s in filler:
        out.insert(rng.randrange(len(out) + 1), s)
    return " ".join(out)


@pytest.mark.parametrize("alpha", [0.01, 0.05])
def test_sequential_decision_is_the_full_monte_carlo_decision(alpha):
    """On every text, watermarked or human, the sequential p-value decides as drawing all M secrets does."""
    rng = random.Random(int(alpha * 1000))
    human = _human_texts()
    keys = [ICWKey.create("sa", seed=1000 + i) for i in range(240)]
    texts = [human[i % len(human)] for i in range(120)]
    texts += [_acrostic(k.secret_string, rng.randint(6, 18), rng, human) for k in keys[120:]]
    seq = verify(texts, keys, alpha=alpha)
    full = verify(texts, keys, alpha=alpha, sequential=False)
    h = sequential_stop(alpha, 9999)
    stopped = 0
    for s, f in zip(seq, full, strict=True):
        assert s.is_watermarked == f.is_watermarked, (s.p_value, f.p_value, s.p_value_method)
        assert (s.z_score, s.permutation_p_value, s.num_aligned) == (f.z_score, f.permutation_p_value, f.num_aligned)
        found = re.search(r"after l = ([\d,]+) of", s.p_value_method)
        if found:  # stopped early: the stated rule and p = h / l, above alpha
            stopped += 1
            assert f"h = {h}th" in s.p_value_method and "Besag & Clifford" in s.p_value_method
            assert s.p_value == h / int(found.group(1).replace(",", "")) > alpha
        else:  # every secret drawn: exactly the full Monte Carlo p-value
            assert s.p_value == f.p_value
    watermarked = sum(f.is_watermarked for f in full)
    assert stopped >= 100 and 20 <= watermarked < len(texts)  # both branches and both decisions exercised


def test_sequential_p_value_is_valid_on_human_text():
    """FPR on gensim's human text with fresh random keys: P(p <= u) stays within the binomial bound of u."""
    human = _human_texts()
    keys = [ICWKey.create("sa", seed=2_000_000 + i) for i in range(len(human))]
    p = np.array([r.p_value for r in verify(human, keys)])
    for u in (0.01, 0.05, 0.2, 0.5):
        assert (p <= u).sum() <= binom.ppf(0.999, len(p), u), (u, (p <= u).mean())
    assert len(p) >= 300
