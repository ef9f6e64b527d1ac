"""WIP statistics under the key-null: every ``|L|``-letter key on the same text.

A WIP text is summarized by its 26 counts ``c_a`` of unique word-initial tokens per first letter.
Under the key-null (the text is independent of the key, whose letters are a uniform random
``|L|``-subset), any statistic that sums per-letter integer scores over the key's letters has an
exact distribution over all ``C(26, |L|)`` keys, counted as a knapsack: one threshold per text by
meeting in the middle (:func:`wip_key_null_sf`), the whole distribution by a 26-step dynamic program
(:func:`_subset_sums`). The verifier's decision statistic is ``D = sum_{a in L} (c_a - n e_a)``,
the excess over the English word-initial distribution ``e_a`` (:func:`wip_excess_test`).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .vocab import ALPHABET, vocabulary


def wip_key_null_sf(counts: np.ndarray, num_letters: int | np.ndarray, x: int | np.ndarray) -> float | np.ndarray:
    """``P(X' >= x)`` where ``X'`` sums the letter counts of a uniformly random
    ``num_letters``-subset of the 26 letters (exact).

    ``counts`` is ``(26,)`` for one text (returns a float) or ``(B, 26)`` for a batch, with
    ``num_letters`` and ``x`` scalars or ``(B,)``. The tail is counted by meeting in the middle
    (:func:`_count_below`), a few texts at a time so the tables stay under ``_TAIL_BUDGET`` integers.

    Args:
        counts (`np.ndarray`): ``(26,)`` or ``(B, 26)`` counts of unique word-initial tokens by first
            letter.
        num_letters (`int` or `np.ndarray`): the key's number of letters (13 in the paper), scalar or
            ``(B,)``.
        x (`int` or `np.ndarray`): the observed ``X`` (word starts with a key letter), scalar or ``(B,)``.
    """
    counts = np.asarray(counts, dtype=np.int64)
    single = counts.ndim == 1
    counts = np.atleast_2d(counts)
    batch = len(counts)
    letters = np.broadcast_to(np.asarray(num_letters, dtype=np.int64), (batch,))
    x = np.broadcast_to(np.asarray(x, dtype=np.int64), (batch,))
    # Only sums below x matter: P(X' >= x) = 1 - #{subsets with sum < x} / C(26, |L|), and every
    # count is an integer below 2**53, so the subtraction is exact.
    widths = np.minimum(np.maximum(x, 0), counts.sum(1) + 1)
    total = np.array([math.comb(26, int(k)) for k in letters], dtype=np.float64)
    below = np.zeros(batch, dtype=np.int64)
    start = 0
    while start < batch:  # consecutive texts while their histograms fit the budget (one text at least)
        stop, size = start + 1, _tail_size(int(widths[start]))
        while stop < batch and size + _tail_size(int(widths[stop])) <= _TAIL_BUDGET:
            size += _tail_size(int(widths[stop]))
            stop += 1
        below[start:stop] = _count_below(counts[start:stop], letters[start:stop], widths[start:stop])
        start = stop
    out = (total - below) / total
    return float(out[0]) if single else out


#: The most integers one step of :func:`wip_key_null_sf` holds (texts are taken a few at a time under it).
_TAIL_BUDGET = 1 << 22
_HALF = 13  # the 26 letters as two halves of 13: 8,192 subsets each
_HALF_SIZES = np.array([bin(i).count("1") for i in range(1 << _HALF)], dtype=np.int64)  # letters in subset i
_HALF_COMBS = np.bincount(_HALF_SIZES)  # C(13, k): subsets of one half with k letters


def _tail_size(width: int) -> int:
    """Integers :func:`_count_below` holds for a text with threshold ``width`` (at most)."""
    return 6 * (1 << _HALF) + (_HALF + 1) * (width + 1)


def _half_sums(counts: np.ndarray) -> np.ndarray:
    """``(B, 8192)`` sums of every subset of 13 letters; bit ``j`` of the column says letter ``j`` is in it."""
    sums = np.zeros((len(counts), 1 << counts.shape[1]), dtype=np.int64)
    for j in range(counts.shape[1]):
        np.add(sums[:, :1 << j], counts[:, j:j + 1], out=sums[:, 1 << j:2 << j])
    return sums


def _count_below(counts: np.ndarray, letters: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``#{letters[b]-subsets of the 26 letters whose counts sum below x[b]}`` per text, for
    ``0 <= x <= n + 1``, exactly (integers).

    Meet in the middle: every key is a subset of one half of the letters (``k`` letters, sum ``a``) joined
    with a subset of the other (``|L| - k`` letters); a cumulative histogram of the second half's sums per
    size counts the partners below ``x - a`` of all 8,192 first-half subsets at once. That is
    ``O(2**13 + 14 x)`` a text, where the 26-step knapsack (:func:`_subset_sums`, still used for many
    thresholds at once) takes ``O(26 |L| x)``. Any split counts every key; the 13 smallest counts make the
    histogram, whose sums then stop soonest.
    """
    counts = np.sort(counts, axis=1)
    low, high = _half_sums(counts[:, _HALF:]), _half_sums(counts[:, :_HALF])
    width = np.minimum(x, counts[:, :_HALF].sum(1) + 1)  # thresholds t that matter: no sum reaches t >= width
    seg = width + 1  # one segment of bins 0..width per (text, subset size); sums >= width share the last
    base = np.concatenate([[0], np.cumsum((_HALF + 1) * seg)[:-1]]) + 1  # bin 0 stays empty
    np.minimum(high, width[:, None], out=high)
    high += (base[:, None] + np.arange(_HALF + 1) * seg[:, None])[:, _HALF_SIZES]
    cum = np.cumsum(np.bincount(high.ravel(), minlength=int(base[-1] + (_HALF + 1) * seg[-1])))
    # a k-letter subset of the first half pairs with (|L| - k)-letter ones: their segment's start, the empty
    # bin 0 standing in for sizes that cannot pair
    need = letters[:, None] - np.arange(_HALF + 1)
    valid = (need >= 0) & (need <= _HALF)
    start = np.where(valid, base[:, None] + np.clip(need, 0, _HALF) * seg[:, None], 1)
    # partners summing below t = clip(x - a, 0, width): cum[start + t - 1] - cum[start - 1]
    np.clip(low, (x - width)[:, None], x[:, None], out=low)
    reach = (start - 1 + x[:, None])[:, _HALF_SIZES] - low
    if not valid.all():
        reach[~valid[:, _HALF_SIZES]] = 0
    return cum[reach].sum(1) - (cum[start - 1] * _HALF_COMBS).sum(1)


def _subset_sums(counts: np.ndarray, letters: np.ndarray, width: int, dtype: type = np.float64) -> np.ndarray:
    """``(B, width)``: the number of ``letters[b]``-subsets of the 26 letters whose counts sum to
    ``s``, for ``s < width`` (a 26-step knapsack, exact in float64 below 2**53; ``dtype=np.float32`` is
    exact too, and twice as fast, as long as no count exceeds 2**24, e.g. ``C(26, 13)`` = 10,400,600)."""
    pad = max(min(int(counts.max()), width), 1)
    # ways[b, l, pad + s]: l-letter subsets of the letters seen so far whose counts sum to s < width;
    # the left padding of zeros lets every text shift by its own count through one window view
    ways = np.zeros((len(counts), int(letters.max()) + 1, pad + width), dtype=dtype)
    ways[:, 0, pad] = 1.0
    rows = np.arange(len(counts))
    for c in np.minimum(counts, pad).T:  # a count >= width moves every sum past the window
        windows = np.lib.stride_tricks.sliding_window_view(ways[:, :-1, :], width, axis=2)
        ways[:, 1:, pad:] += windows[rows, :, pad - c]
    return ways[rows, letters, pad:]


#: The WIP decision statistic's per-letter scores are rounded to this step (in words), so that
#: its exact key-null distribution is an integer knapsack (0.05 words: no measurable power lost).
WIP_SCORE_STEP = 0.05


@lru_cache(maxsize=1)
def english_initial_frequencies() -> np.ndarray:
    """``e_a``: the first-letter distribution of distinct English words (26 floats, A-Z, summing to 1).

    Estimated from gensim's human English (news and Wikipedia; each distinct word of a passage counted
    once, as the verifier counts word-initial tokens) by ``scripts/make_reference_data.py``, shipped as
    ``icw/data/english_initials.json``. It only sets the WIP statistic's power: its p-value is exact
    under the key-null whatever these numbers are.

    Example:
        >>> f = english_initial_frequencies()
        >>> round(float(f.sum()), 6), bool(f[0] > f[25])
        (1.0, True)
    """
    data = json.loads((Path(__file__).parent / "data" / "english_initials.json").read_text(encoding="utf-8"))
    freqs = np.array([data["frequencies"][c] for c in ALPHABET], dtype=np.float64)
    freqs /= freqs.sum()
    freqs.flags.writeable = False
    return freqs


def wip_letter_scores(counts: np.ndarray) -> np.ndarray:
    """Per-letter scores of the WIP decision statistic, ``round((c_a - n e_a) / WIP_SCORE_STEP)``.

    Args:
        counts: ``(B, 26)`` (or ``(26,)``) unique word-initial tokens per first letter of each text.

    Returns:
        Integer scores of the same shape; ``D`` of a key is the sum of its letters' scores (times the step).
    """
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.sum(-1, keepdims=True)
    return np.rint((counts - n * english_initial_frequencies()) / WIP_SCORE_STEP).astype(np.int64)


def wip_excess_test(counts: np.ndarray, green: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The WIP decision statistic ``D`` and its exact key-null p-value for a batch.

    ``D = sum_{a in L} (c_a - n e_a)`` (per-letter terms rounded to :data:`WIP_SCORE_STEP`); the
    p-value is ``P(D' >= D)`` over all ``C(26, |L|)`` keys ``L'`` on the same text, by the knapsack
    of :func:`wip_key_null_sf` on the scores shifted to be non-negative (every key has ``|L|``
    letters, so a shift moves all sums alike).

    Args:
        counts: ``(B, 26)`` letter counts of the texts (see :func:`wip_letter_counts`).
        green: ``(B, 26)`` booleans, the key's letters per text.

    Returns:
        ``(D, p)``: two ``(B,)`` float arrays.

    Example:
        >>> counts = np.zeros(26, int); counts[[0, 1, 2]] = 10  # a text of A, B and C words only
        >>> green = np.zeros(26, bool); green[[1, 2]] = True     # a 2-letter key: B and C
        >>> d, p = wip_excess_test(counts[None], green[None])
        >>> round(float(p[0]), 4) == round(1 / 325, 4)  # only BC scores as high: 1 of C(26, 2) keys
        True
    """
    scores = wip_letter_scores(np.atleast_2d(counts))
    green = np.atleast_2d(np.asarray(green, dtype=bool))
    letters = green.sum(1)
    observed = np.where(green, scores, 0).sum(1)
    shift = scores.min(1)
    p = wip_key_null_sf(scores - shift[:, None], letters, observed - letters * shift)
    p = np.where(np.atleast_2d(counts).sum(1) > 0, p, 1.0)  # nothing scored: no evidence
    return observed * WIP_SCORE_STEP, np.atleast_1d(p)


def wip_letter_counts(texts: str | list[str], tokenizer: Any) -> np.ndarray:
    """``(B, 26)`` counts of the unique word-initial tokens (``V_en^word``) of each text, by first
    letter: all a WIP verifier reads of a text, shared by every WIP key of that tokenizer.

    Args:
        texts (`str` or `list[str]`): one text or a batch.
        tokenizer: the tokenizer the WIP keys were built for.

    Example:
        >>> from icw.models import load_tokenizer
        >>> int(wip_letter_counts(["Apples and avocados, bananas."], load_tokenizer("gpt2"))[0, 0])
        2
    """
    texts = [texts] if isinstance(texts, str) else list(texts)
    view = vocabulary(tokenizer)
    out = np.zeros((len(texts), 26), dtype=np.int64)
    if not texts:
        return out
    for row, ids in zip(out, tokenizer(texts, add_special_tokens=False)["input_ids"], strict=True):
        arr = np.unique(np.asarray(ids, dtype=np.int64))
        arr = arr[(arr >= 0) & (arr < view.size)]
        row += np.bincount(view.word_letter[arr[view.is_word[arr]]].astype(np.int64), minlength=26)
    return out


