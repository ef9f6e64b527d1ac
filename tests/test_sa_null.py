"""The SA permutation null for long texts, drawn block by block (issue 12.6): the same null as
shuffling the whole letter string, without holding ``N`` shuffles of the text in memory."""

import numpy as np
import pytest

from icw import ICWKey, verify
from icw.lcs import (
    PERMUTATION_BLOCK,
    lcs_lengths,
    letter_codes,
    permutation_null,
    permutations,
    secret_table,
)

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
