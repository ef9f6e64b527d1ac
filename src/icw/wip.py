"""WIP statistics under the key-null: every ``|L|``-letter key on the same text.

A WIP text is summarized by its 26 counts ``c_a`` of unique word-initial tokens per first letter.
Under the key-null (the text is independent of the key, whose letters are a uniform random
``|L|``-subset), any statistic that sums per-letter integer scores over the key's letters has an
exact distribution over all ``C(26, |L|)`` keys, counted by a 26-step knapsack
(:func:`wip_key_null_sf`). The verifier's decision statistic is ``D = sum_{a in L} (c_a - n e_a)``,
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
    ``num_letters``-subset of the 26 letters (exact, by dynamic programming).

    ``counts`` is ``(26,)`` for one text (returns a float) or ``(B, 26)`` for a batch, with
    ``num_letters`` and ``x`` scalars or ``(B,)``: texts of similar length share one 26-step
    knapsack, in chunks whose tables stay under ``_DP_BUDGET`` floats.

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
    order = np.argsort(widths, kind="stable")  # similar widths together: little padding
    out = np.empty(batch)
    start = 0
    while start < batch:
        stop = start + 1
        while stop < batch and (stop + 1 - start) * 27 * (2 * int(widths[order[stop]]) + 1) <= _DP_BUDGET:
            stop += 1
        rows = order[start:stop]
        out[rows] = _key_null_tails(counts[rows], letters[rows], widths[rows])
        start = stop
    return float(out[0]) if single else out


_DP_BUDGET = 1 << 22


def _key_null_tails(counts: np.ndarray, letters: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``P(X' >= x)`` per text, for ``0 <= x <= n + 1``."""
    total = np.array([math.comb(26, int(k)) for k in letters], dtype=np.float64)
    width = int(x.max())
    if width == 0:
        return np.ones(len(counts))
    below = np.where(np.arange(width)[None, :] < x[:, None], _subset_sums(counts, letters, width), 0.0).sum(1)
    return (total - below) / total


def _subset_sums(counts: np.ndarray, letters: np.ndarray, width: int) -> np.ndarray:
    """``(B, width)``: the number of ``letters[b]``-subsets of the 26 letters whose counts sum to
    ``s``, for ``s < width`` (a 26-step knapsack, exact in float64 below 2**53)."""
    pad = max(min(int(counts.max()), width), 1)
    # ways[b, l, pad + s]: l-letter subsets of the letters seen so far whose counts sum to s < width;
    # the left padding of zeros lets every text shift by its own count through one window view
    ways = np.zeros((len(counts), int(letters.max()) + 1, pad + width))
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


