"""Batched verifiers for the three ICW families, with exact p-values.

Every result states its statistic, its null hypothesis, the paper's z-statistic and a
p-value that is valid under that null:

* **TSP**: ``X = |U ∩ T|`` over the unique tokens ``U`` of the text in the candidate pool
  ``P`` (``V_en`` by default), ``n = |U|``, ``p0 = gamma``; ``z = (X - n p0) / sqrt(n p0 (1 - p0))``.
  ``T`` is a uniform random ``|T|``-subset of ``P``, so under H0 (text independent of the
  key) ``X ~ Hypergeometric(|P|, |T|, n)`` exactly.
* **WIP**: ``X`` = unique word-initial tokens whose first letter is in ``L``, ``n`` = unique
  word-initial tokens, ``p0 = sum_{a in L} f_a`` (vocabulary letter fractions) for the paper's z.
  The decision statistic is the excess over English, ``D = sum_{a in L} (c_a - n e_a)`` with
  ``c_a`` the text's unique word-initial tokens starting with ``a`` and ``e_a`` the first-letter
  distribution of English words (:func:`english_initial_frequencies`); its exact p-value is
  ``P(D' >= D)`` over all ``C(26, |L|)`` keys on the same text (a dynamic program over the 26
  letters): valid whatever the text's letter frequencies, and more powerful than ranking keys
  by ``X`` (``benchmarks/wip_power.py``), because a key of letters that are frequent in English
  no longer scores as high as the answer's key.
* **SA**: ``X = LCS(S, Phi(y))``; the paper's z uses the mean and sample sd of the LCS over
  ``N = 1000`` random permutations of ``Phi(y)``. The p-value is a Monte Carlo estimate of
  ``P(LCS(S', Phi(y)) >= X)`` over random secrets ``S'`` drawn like keys, reported as
  ``(k + 1) / (M + 1)`` with its resolution ``1 / (M + 1)``; the permutation p-value is
  reported too. LCS is bit-parallel over the secret and vectorized over all draws at once.

Example:
    >>> from icw import ICWKey, verify
    >>> key = ICWKey.create("sa", seed=3, secret="HELLO")
    >>> r = verify("Here we go. Every day is new. Lots to do. Let us start. Over and out.", key)
    >>> r.num_aligned, r.p_value < 0.05
    (5, True)
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import gammaln

from .keys import SA_POOL, ICWKey, as_keys, green_mask, scored_mask
from .text import sentence_initial_spans
from .vocab import ALPHABET, VocabularyView, vocabulary

DEFAULT_ALPHA = 0.01
DEFAULT_MAX_CHARS = 100_000
DEFAULT_PERMUTATIONS = 1000
DEFAULT_NULL_KEYS = 9999
#: Below this many scored units the normal approximation behind z is rough.
SMALL_SAMPLE = 20

STATISTICS = {
    "tsp": "X = number of distinct tokens of the text (within the candidate pool P) that are in the green set T",
    "wip": "D = sum over the green letters a of (c_a - n e_a), in steps of 0.05: c_a distinct word-initial tokens "
           "starting with a, n all of them, e_a the English word-initial letter distribution; z_score is the "
           "paper's z of X = sum of c_a over the green letters",
    "sa": "X = length of the longest common subsequence of the secret and the sentence-initial letters",
}
NULL_HYPOTHESES = {
    "tsp": "the text is independent of the key: T is a uniform random subset of P, so X ~ Hypergeometric(|P|, |T|, n)",
    "wip": "the text is independent of the key: the green letters are a uniform random |L|-subset of the alphabet",
    "sa": "the text is independent of the key: the secret is a random string from the key's letter pool",
}
_ASCII_LETTER = re.compile(r"[A-Za-z]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_EMPTY_NOTE = "empty text: nothing to score"
_NON_ENGLISH_NOTE = "mostly non-English text: only its English (ASCII) part is scored, so the test has little power"
_LABELS = {"tsp": ("green token", "other token"), "wip": ("green initial", "red initial"),
           "sa": ("matched initial", "unmatched initial")}


class TextTooLongError(ValueError):
    """A text exceeds the verifier's character limit; ``index``, ``length`` and ``max_chars`` say which
    text of the batch, how long it is and what the limit was."""

    def __init__(self, message: str, index: int = 0, length: int = 0, max_chars: int = 0) -> None:
        super().__init__(message)
        self.index, self.length, self.max_chars = index, length, max_chars


@dataclass
class Highlight:
    """A counted unit of the text: a token (TSP), a word-initial token (WIP) or a
    sentence-initial letter (SA), with character offsets into the text."""

    start: int
    end: int
    text: str
    aligned: bool
    label: str


@dataclass
class VerificationResult:
    """The outcome of one verification.

    ``z_score`` is the paper's statistic; ``p_value`` is the exact (TSP, WIP) or Monte Carlo
    (SA) p-value named in ``p_value_method``; ``is_watermarked`` is ``p_value <= alpha``.
    ``null_mean``/``null_sd`` are ``n p0``/``sqrt(n p0 (1 - p0))`` for TSP and WIP and the
    permutation mean/sd for SA.
    """

    family: str
    z_score: float
    p_value: float
    is_watermarked: bool
    alpha: float
    num_tokens_scored: int
    num_aligned: int
    null_mean: float
    null_sd: float
    p0: float | None
    p_value_method: str
    statistic: str
    null_hypothesis: str
    key: str
    permutation_p_value: float | None = None
    p_value_resolution: float | None = None
    note: str | None = None
    highlights: list[Highlight] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.highlights is None:
            out.pop("highlights")
        return out


# ------------------------------------------------------------------------- statistics
def z_statistic(x: int, n: int, p0: float) -> float:
    """The paper's binomial z: ``(X - n p0) / sqrt(n p0 (1 - p0))``; 0 when nothing was scored."""
    return 0.0 if n == 0 else (x - n * p0) / math.sqrt(n * p0 * (1.0 - p0))


def wip_key_null_sf(counts: np.ndarray, num_letters: int | np.ndarray, x: int | np.ndarray) -> float | np.ndarray:
    """``P(X' >= x)`` where ``X'`` sums the letter counts of a uniformly random
    ``num_letters``-subset of the 26 letters (exact, by dynamic programming).

    ``counts`` is ``(26,)`` for one text (returns a float) or ``(B, 26)`` for a batch, with
    ``num_letters`` and ``x`` scalars or ``(B,)``: texts of similar length share one 26-step
    knapsack, in chunks whose tables stay under ``_DP_BUDGET`` floats.
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


def hypergeom_tails(x: np.ndarray, population: np.ndarray, successes: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """``P(X >= x)`` for ``X ~ Hypergeometric(population, successes, draws)``, element-wise.

    Sums the pmf over the upper tail in log space for all texts in one vectorized pass
    (scipy.stats.hypergeom.sf loops in Python per element, which dominated batch verification;
    tests check agreement with it).
    """
    x, big, k, n = (np.asarray(a, dtype=np.int64) for a in (x, population, successes, draws))
    lo = np.maximum(x, 0)
    hi = np.minimum(n, k)
    counts = np.maximum(hi - lo + 1, 0)
    out = np.where(x <= np.maximum(0, n - (big - k)), 1.0, 0.0)  # x at or below the support: certain
    todo = (counts > 0) & (out == 0.0)
    if todo.any():
        reps = counts[todo]
        row = np.repeat(np.arange(len(reps)), reps)
        j = lo[todo][row] + np.arange(reps.sum()) - np.repeat(np.cumsum(reps) - reps, reps)
        kk, bb, nn = k[todo][row], big[todo][row], n[todo][row]
        logpmf = (_log_comb(kk, j) + _log_comb(bb - kk, nn - j) - _log_comb(bb, nn))
        out[todo] = np.minimum(np.add.reduceat(np.exp(logpmf), np.cumsum(reps) - reps), 1.0)
    return out


def _log_comb(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return gammaln(a + 1.0) - gammaln(b + 1.0) - gammaln(a - b + 1.0)


def lcs_lengths(secret_masks: np.ndarray, text_codes: np.ndarray, width: int) -> np.ndarray:
    """Bit-parallel LCS (Allison-Dix / Hyyro) of many secrets against many letter strings.

    Args:
        secret_masks: ``(R, 26)`` unsigned ints; bit ``i`` of ``[r, c]`` is set when secret ``r``
            has letter ``c`` at position ``i`` (secrets up to 63 letters).
        text_codes: ``(R, m)`` letter codes 0-25 (the rows are aligned with the secrets;
            broadcasting a single row of either is allowed).
        width: the secrets' length.

    Returns:
        ``(R,)`` LCS lengths.
    """
    dtype = _mask_dtype(width)
    secret_masks = secret_masks.astype(dtype, copy=False)
    rows = max(secret_masks.shape[0], text_codes.shape[0])
    full = dtype((1 << width) - 1)
    if secret_masks.shape[0] == 1:  # one secret, many texts: gather from a 26-entry table
        table = secret_masks[0]
        columns = (table[c] for c in np.ascontiguousarray(text_codes.T))
    elif text_codes.shape[0] == 1:  # many secrets, one text: one contiguous row per letter
        by_letter = np.ascontiguousarray(secret_masks.T)
        columns = (by_letter[c] for c in text_codes[0])
    else:
        columns = (secret_masks[np.arange(rows), text_codes[:, j]] for j in range(text_codes.shape[1]))
    v, u, w = np.full(rows, full, dtype=dtype), np.empty(rows, dtype), np.empty(rows, dtype)
    for match in columns:  # v <- ((v + u) | (v - u)) & full with u = v & match, in place
        np.bitwise_and(v, match, out=u)
        np.add(v, u, out=w)
        np.subtract(v, u, out=v)
        np.bitwise_or(v, w, out=v)
        np.bitwise_and(v, full, out=v)
    return width - np.bitwise_count(v).astype(np.int64)


def _mask_dtype(width: int) -> type[np.unsignedinteger]:
    """The narrowest word that holds ``width`` bits plus the carry of ``v + u``: 32-bit words
    halve the memory traffic for the paper's 18-letter secrets."""
    if not 0 < width <= 63:
        raise ValueError(f"secrets of 1 to 63 letters are supported, got {width}")
    return np.uint32 if width <= 31 else np.uint64


def _secret_masks(codes: np.ndarray) -> np.ndarray:
    """``(R, k)`` letter codes -> ``(R, 26)`` position bitmasks."""
    masks = np.zeros((codes.shape[0], 26), dtype=np.uint64)
    rows = np.arange(codes.shape[0])
    for i in range(codes.shape[1]):
        masks[rows, codes[:, i]] |= np.uint64(1 << i)
    return masks


@lru_cache(maxsize=256)
def _secret_table(secret: str) -> np.ndarray:
    """``(1, 26)`` position bitmasks of one secret, cached: a detector reuses its key."""
    return _secret_masks(_codes(secret)[None, :]).astype(_mask_dtype(len(secret)))


def _permutations(length: int, count: int) -> np.ndarray:
    """``count`` random orderings of ``range(length)``, drawn once per (length, count) and
    reused for every text: a permutation null only needs orderings independent of the text.
    Cached for the usual lengths only, so a few very long texts cannot pin much memory."""
    return _cached_permutations(length, count) if length <= 256 else _draw_permutations(length, count)


def _draw_permutations(length: int, count: int) -> np.ndarray:
    rng = _rng("permutations", length, count)
    return rng.permuted(np.tile(np.arange(length, dtype=np.int32), (count, 1)), axis=1)


_cached_permutations = lru_cache(maxsize=128)(_draw_permutations)


@lru_cache(maxsize=64)
def _null_secret_masks(length: int, pool: str, count: int) -> np.ndarray:
    """Masks of ``count`` random secrets, drawn once per (length, pool, count) and reused:
    the draws are independent of every text and key, which is all a Monte Carlo test needs."""
    draws = _rng("null-secrets", length, pool, count).integers(0, len(pool), size=(count, length))
    masks = _secret_masks(_codes(pool)[draws]).astype(_mask_dtype(length))
    return np.ascontiguousarray(masks.T)  # (26, count): one row per letter


def _codes(letters: str) -> np.ndarray:
    return np.frombuffer(letters.encode("ascii"), dtype=np.uint8).astype(np.int64) - 65


def _lcs_alignment(secret: str, phi: str) -> set[int]:
    """Positions of ``phi`` used by one longest common subsequence with ``secret``."""
    k, m = len(secret), len(phi)
    table = np.zeros((k + 1, m + 1), dtype=np.int32)
    for i in range(1, k + 1):
        for j in range(1, m + 1):
            table[i, j] = table[i - 1, j - 1] + 1 if secret[i - 1] == phi[j - 1] else max(table[i - 1, j], table[i, j - 1])
    used, i, j = set(), k, m
    while i and j:
        if secret[i - 1] == phi[j - 1]:
            used.add(j - 1)
            i, j = i - 1, j - 1
        elif table[i - 1, j] >= table[i, j - 1]:
            i -= 1
        else:
            j -= 1
    return used


def _rng(*parts: Any) -> np.random.Generator:
    """A generator seeded by the content, so the same text and key always give the same result."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


# -------------------------------------------------------------------------- helpers
def _check_texts(texts: Any, max_chars: int) -> list[str]:
    """Validate the texts and return them as a list, with lone surrogates (unencodable code points,
    e.g. from a JSON ``"\\ud800"`` escape) replaced by U+FFFD: they are never English, so the scores are
    unchanged, and every family then sees the same text (character offsets are kept)."""
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars must be a positive integer, got {max_chars!r}")
    if isinstance(texts, (str, bytes)):
        texts = [texts]
    try:
        texts = list(texts)
    except TypeError:
        raise TypeError(f"expected a string or a list of strings, got {type(texts).__name__}") from None
    if not texts:
        raise ValueError("no texts to verify: pass a string or a non-empty list of strings")
    for i, t in enumerate(texts):
        if isinstance(t, (bytes, bytearray)):
            raise TypeError(f"text {i} is bytes, not str: decode it first (e.g. data.decode('utf-8'))")
        if not isinstance(t, str):
            raise TypeError(f"text {i} is a {type(t).__name__}, not a str")
        if len(t) > max_chars:
            raise TextTooLongError(
                f"text {i} has {len(t):,} characters, more than max_chars={max_chars:,}. Verify it in passages "
                "(e.g. per answer or per page), or raise the limit (max_chars= in verify, --max-chars in icw detect).",
                index=i, length=len(t), max_chars=max_chars,
            )
    return [t if t.isascii() or not _SURROGATE.search(t) else _SURROGATE.sub("\ufffd", t) for t in texts]


def _text_note(text: str) -> str | None:
    if not text.strip():
        return _EMPTY_NOTE
    if text.isascii():
        return None
    ascii_letters = len(_ASCII_LETTER.findall(text))
    other_letters = sum(c.isalpha() for c in "".join(_NON_ASCII.findall(text)))
    if other_letters > ascii_letters:
        return _NON_ENGLISH_NOTE
    return None


def _resolve_view(key: ICWKey, tokenizer: Any) -> tuple[Any, VocabularyView]:
    if tokenizer is None:
        from .models import load_tokenizer

        tokenizer = load_tokenizer(key.tokenizer)
    return tokenizer, key.check_tokenizer(tokenizer)


def _result(key: ICWKey, alpha: float, z: float, p: float, n: int, x: int, mean: float, sd: float,
            p0: float | None, method: str, note: str | None, **extra: Any) -> VerificationResult:
    if n == 0 and note == _NON_ENGLISH_NOTE:
        note = {"tsp": "non-English text: nothing was scored, as the text has no English tokens",
                "wip": "non-English text: nothing was scored, as the text has no English words",
                "sa": "non-English text: nothing was scored, as no sentence starts with an English letter",
                }[key.family]
    elif note is None and n == 0:
        note = {"tsp": "no English tokens to score", "wip": "no word-initial English tokens to score",
                "sa": "no sentence start found"}[key.family]
    elif note is None and n < SMALL_SAMPLE:
        note = f"only {n} units scored: the z approximation is rough, rely on the p-value"
    return VerificationResult(
        family=key.family, z_score=float(z), p_value=float(p), is_watermarked=bool(p <= alpha), alpha=alpha,
        num_tokens_scored=int(n), num_aligned=int(x), null_mean=float(mean), null_sd=float(sd), p0=p0,
        p_value_method=method, statistic=STATISTICS[key.family], null_hypothesis=NULL_HYPOTHESES[key.family],
        key=key.to_string(), note=note, **extra,
    )


# ------------------------------------------------------------------- per-family scoring
def _score_token_family(key: ICWKey, view: VocabularyView, ids: list[int], offsets: list | None,
                        text: str, alpha: float) -> tuple[VerificationResult, tuple]:
    """Score one text; the exact p-value is left to the caller, who computes the tails of a whole
    batch in one call: returned as ``(x, |P|, |T|, n)`` (TSP) or ``(26 letter counts, 26 key letters)`` (WIP)."""
    scored, green = scored_mask(key, view), green_mask(key, view)
    arr = np.asarray(ids, dtype=np.int64)
    arr = arr[(arr >= 0) & (arr < view.size)]
    unique = np.unique(arr)
    unique = unique[scored[unique]]
    n, x = len(unique), int(green[unique].sum())
    if key.family == "tsp":
        p0 = key.gamma
        pool = int(scored.sum())
        size_t = math.floor(key.gamma * pool)
        p, tail = float("nan"), (x, pool, size_t, n)
        method = f"exact hypergeometric (|P| = {pool}, |T| = {size_t})"
    else:
        letters = [ord(c) - 65 for c in key.green_letters]
        p0 = float(view.letter_fractions[letters].sum())
        counts = np.bincount(view.word_letter[unique].astype(np.int64), minlength=26)
        green_letters = np.zeros(26, dtype=bool)
        green_letters[letters] = True
        p, tail = float("nan"), (counts, green_letters)
        method = (f"exact, over all {math.comb(26, key.num_letters):,} {key.num_letters}-letter keys "
                  f"(knapsack over the 26 letters)")
    highlights = None
    if offsets is not None:
        labels = _LABELS[key.family]
        highlights = [Highlight(s, e, text[s:e], bool(green[t]), labels[0] if green[t] else labels[1])
                      for t, (s, e) in zip(ids, offsets, strict=False) if 0 <= t < view.size and scored[t] and e > s]
    mean, sd = n * p0, math.sqrt(n * p0 * (1 - p0))
    return _result(key, alpha, z_statistic(x, n, p0), min(p, 1.0), n, x, mean, sd, p0, method, _text_note(text),
                   highlights=highlights), tail


def _score_sa(key: ICWKey, text: str, alpha: float, want_highlights: bool, num_permutations: int,
              num_null_keys: int) -> VerificationResult:
    secret = key.secret_string
    spans = sentence_initial_spans(text)
    phi = "".join(letter for _, letter in spans)
    m, k = len(phi), len(secret)
    note = _text_note(text)
    if m == 0:
        return _result(key, alpha, 0.0, 1.0, 0, 0, 0.0, 0.0, None, "no sentence to score", note,
                       highlights=[] if want_highlights else None)
    secret_masks = _secret_table(secret)
    phi_codes = _codes(phi)
    x = int(lcs_lengths(secret_masks, phi_codes[None, :], k)[0])
    null = lcs_lengths(secret_masks, phi_codes[_permutations(m, num_permutations)], k)
    mean, sd = float(null.mean()), float(null.std(ddof=1))  # sample sd, as the reference
    z = (x - mean) / sd if sd > 0 else 0.0
    perm_p = (int((null >= x).sum()) + 1) / (num_permutations + 1)
    pool = SA_POOL if set(secret) <= set(SA_POOL) else ALPHABET
    key_null = lcs_lengths(_null_secret_masks(k, pool, num_null_keys).T, phi_codes[None, :], k)
    p = (int((key_null >= x).sum()) + 1) / (num_null_keys + 1)
    method = (f"Monte Carlo over {num_null_keys:,} random {k}-letter secrets from the {len(pool)}-letter pool "
              f"(resolution {1 / (num_null_keys + 1):.1e})")
    highlights = None
    if want_highlights:
        used = _lcs_alignment(secret, phi)
        labels = _LABELS["sa"]
        highlights = [Highlight(pos, pos + 1, text[pos], j in used, labels[0] if j in used else labels[1])
                      for j, (pos, _) in enumerate(spans)]
    return _result(key, alpha, z, p, m, x, mean, sd, None, method, note, permutation_p_value=perm_p,
                   p_value_resolution=1 / (num_null_keys + 1), highlights=highlights)


# ------------------------------------------------------------------------------ API
def verify(
    texts: str | list[str],
    keys: ICWKey | str | list[ICWKey | str],
    tokenizer: Any = None,
    *,
    alpha: float = DEFAULT_ALPHA,
    highlights: bool = False,
    max_chars: int = DEFAULT_MAX_CHARS,
    num_permutations: int = DEFAULT_PERMUTATIONS,
    num_null_keys: int = DEFAULT_NULL_KEYS,
) -> VerificationResult | list[VerificationResult]:
    """Verify texts against keys.

    Args:
        texts: one text or a list of texts.
        keys: one key shared by all texts, or one key per text (families may be mixed).
        tokenizer: the tokenizer TSP/WIP keys were built for; when omitted, the key's own
            tokenizer name is loaded (embedded aliases work offline). SA needs none.
        alpha: significance level for ``is_watermarked``.
        highlights: also return the counted spans with character offsets.
        max_chars: texts longer than this raise :class:`TextTooLongError`.
        num_permutations: SA permutation-null size ``N`` for the paper's z.
        num_null_keys: SA Monte Carlo size ``M`` for the p-value.

    Returns:
        A :class:`VerificationResult` for a string input, else a list in input order.
    """
    single = isinstance(texts, str)
    texts = _check_texts(texts, max_chars)
    keys = as_keys(keys, len(texts))
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    if num_permutations < 2 or num_null_keys < 1:
        raise ValueError("num_permutations must be >= 2 and num_null_keys >= 1")
    results: list[VerificationResult | None] = [None] * len(texts)
    groups: dict[int, tuple[Any, VocabularyView, list[int]]] = {}
    for i, key in enumerate(keys):
        if key.family == "sa":
            results[i] = _score_sa(key, texts[i], alpha, highlights, num_permutations, num_null_keys)
            continue
        tok, view = _resolve_view(key, tokenizer)
        groups.setdefault(id(tok), (tok, view, []))[2].append(i)
    for tok, view, idx in groups.values():
        enc = tok([texts[i] for i in idx], add_special_tokens=False, return_offsets_mapping=highlights)
        tails: dict[str, dict[int, tuple]] = {"tsp": {}, "wip": {}}
        for j, i in enumerate(idx):
            offsets = enc["offset_mapping"][j] if highlights else None
            results[i], tails[keys[i].family][i] = _score_token_family(keys[i], view, enc["input_ids"][j], offsets,
                                                                       texts[i], alpha)
        # exact p-values in one vectorized call per family: per-text calls dominated batch verification
        p_values: dict[int, float] = {}
        if tails["tsp"]:
            x, pool, size, n = np.array(list(tails["tsp"].values())).T
            p_values.update(zip(tails["tsp"], np.where(n > 0, hypergeom_tails(x, pool, size, n), 1.0), strict=True))
        if tails["wip"]:
            counts, green = (np.array(v) for v in zip(*tails["wip"].values(), strict=True))
            p_values.update(zip(tails["wip"], wip_excess_test(counts, green)[1], strict=True))
        for i, p in p_values.items():
            results[i].p_value = min(float(p), 1.0)
            results[i].is_watermarked = results[i].p_value <= alpha
    return results[0] if single else results


def vocabulary_summary(tokenizer: Any) -> dict[str, Any]:
    """``|V_en|``, ``|V_en^word|`` and the vocabulary fingerprint of a tokenizer."""
    return vocabulary(tokenizer).summary()


# ------------------------------------------------------------------------ many keys
#: The largest default SA Monte Carlo size of :func:`verify_keys` (its null secrets take 26 x 4 bytes each).
MAX_MULTI_NULL_KEYS = 399_999
FAMILY_WISE_NULL = "no key's watermark is in the text: the text is independent of every key"


@dataclass
class MultiKeyResult:
    """One text verified against ``K`` keys of one family, with family-wise error control.

    ``p_values[k]`` is the same exact (TSP, WIP) or Monte Carlo (SA) p-value that :func:`verify`
    gives for key ``k`` alone; ``adjusted_p_values`` are Holm's step-down adjustment of them, and
    ``fired`` lists the keys whose adjusted p-value is at most ``alpha``. Holm controls the
    family-wise error rate (the chance that any key fires on a text independent of all of them) at
    ``alpha`` under any dependence between the keys' tests, and is uniformly more powerful than
    Bonferroni's ``K * p``.
    """

    family: str
    keys: list[str]
    z_scores: np.ndarray
    p_values: np.ndarray
    adjusted_p_values: np.ndarray
    fired: list[int]
    alpha: float
    num_tokens_scored: int
    p_value_method: str
    statistic: str
    null_hypothesis: str = FAMILY_WISE_NULL
    correction: str = "Holm step-down (family-wise error rate <= alpha, any dependence)"
    note: str | None = None

    @property
    def is_watermarked(self) -> bool:
        return bool(self.fired)

    def to_dict(self, all_keys: bool = False) -> dict[str, Any]:
        """The verdict and the keys that fire (every key's scores too with ``all_keys``)."""
        def row(k: int) -> dict[str, Any]:
            return {"index": int(k), "key": self.keys[k], "z_score": float(self.z_scores[k]),
                    "p_value": float(self.p_values[k]), "adjusted_p_value": float(self.adjusted_p_values[k])}

        best = int(np.argmin(self.p_values))
        out = {"family": self.family, "is_watermarked": self.is_watermarked, "num_keys": len(self.keys),
               "fired": [row(k) for k in self.fired], "best": row(best), "alpha": self.alpha,
               "num_tokens_scored": self.num_tokens_scored, "correction": self.correction,
               "statistic": self.statistic, "p_value_method": self.p_value_method,
               "null_hypothesis": self.null_hypothesis, "note": self.note}
        if all_keys:
            out["keys"] = [row(k) for k in range(len(self.keys))]
        return out


def holm_adjust(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values: ``max_{j <= i} min(1, (K - j + 1) p_(j))`` in sorted order.

    Example:
        >>> holm_adjust(np.array([0.01, 0.04, 0.03])).round(2).tolist()
        [0.03, 0.06, 0.06]
    """
    p = np.asarray(p_values, dtype=np.float64)
    order = np.argsort(p, kind="stable")
    steps = np.minimum(1.0, (len(p) - np.arange(len(p))) * p[order])
    out = np.empty_like(p)
    out[order] = np.maximum.accumulate(steps)
    return out


def verify_keys(
    texts: str | list[str],
    keys: list[ICWKey | str],
    tokenizer: Any = None,
    *,
    alpha: float = DEFAULT_ALPHA,
    max_chars: int = DEFAULT_MAX_CHARS,
    num_permutations: int = DEFAULT_PERMUTATIONS,
    num_null_keys: int | None = None,
) -> MultiKeyResult | list[MultiKeyResult]:
    """Verify every text against every one of ``K`` keys of one family (e.g. one key per user of a
    platform) and report which keys fire, with Holm's family-wise error control at ``alpha``.

    Each text is tokenized once and scored against all keys at once: WIP keys share the text's 26
    letter counts and one knapsack per text gives every key's exact p-value; TSP keys are matched
    against the text's unique tokens only; SA keys share one Monte Carlo null per text.

    Args:
        texts: one text or a list of texts.
        keys: the ``K`` keys (objects or strings), all of one family (and one tokenizer for TSP/WIP).
        tokenizer: as in :func:`verify`.
        alpha: family-wise error rate.
        max_chars, num_permutations: as in :func:`verify`.
        num_null_keys: SA Monte Carlo size ``M``. Holm's smallest threshold is ``alpha / K`` and a Monte
            Carlo p-value is at least ``1 / (M + 1)``, so the default grows with ``K``:
            ``max(9999, 10 K / alpha - 1)``, at most :data:`MAX_MULTI_NULL_KEYS` (a note says when that
            resolution cannot reach ``alpha / K``).

    Returns:
        A :class:`MultiKeyResult` for a string input, else one per text.

    Example:
        >>> from icw import ICWKey
        >>> keys = [ICWKey.create("sa", secret=s) for s in ("HELLO", "WORLD", "ABCDE")]
        >>> r = verify_keys("Here we go. Every day is new. Lots to do. Let us start. Over and out.", keys)
        >>> [r.keys[k] for k in r.fired], round(float(r.p_values[0]), 4) == round(verify(
        ...     "Here we go. Every day is new. Lots to do. Let us start. Over and out.", keys[0]).p_value, 4)
        (['icw:sa:secret=HELLO'], True)
    """
    single = isinstance(texts, str)
    texts = _check_texts(texts, max_chars)
    if isinstance(keys, (ICWKey, str, dict)):
        keys = [keys]
    keys = as_keys(keys, len(list(keys)))
    if not keys:
        raise ValueError("no keys to verify against: pass at least one key")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    if num_null_keys is None:
        num_null_keys = min(max(DEFAULT_NULL_KEYS, math.ceil(10 * len(keys) / alpha) - 1), MAX_MULTI_NULL_KEYS)
    if num_permutations < 2 or num_null_keys < 1:
        raise ValueError("num_permutations must be >= 2 and num_null_keys >= 1")
    families = {k.family for k in keys}
    if len(families) > 1:
        raise ValueError(f"keys of several families ({', '.join(sorted(families))}): verify each family's keys separately")
    family = keys[0].family
    z, p, n, method = _score_many(texts, keys, tokenizer, num_permutations, num_null_keys)
    strings = [k.to_string() for k in keys]
    note = None
    if family == "sa" and len(keys) / (num_null_keys + 1) > alpha:
        note = (f"the Monte Carlo resolution 1/{num_null_keys + 1:,} is above Holm's first threshold alpha/K = "
                f"{alpha / len(keys):.1e}: no key can fire; raise num_null_keys or verify fewer keys")
    results = []
    for b in range(len(texts)):
        adjusted = holm_adjust(p[b])
        results.append(MultiKeyResult(
            family=family, keys=strings, z_scores=z[b], p_values=p[b], adjusted_p_values=adjusted,
            fired=[int(k) for k in np.flatnonzero(adjusted <= alpha)], alpha=alpha, num_tokens_scored=int(n[b]),
            p_value_method=method, statistic=STATISTICS[family], note=note))
    return results[0] if single else results


def _score_many(texts: list[str], keys: list[ICWKey], tokenizer: Any, num_permutations: int, num_null_keys: int,
                with_z: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """``(z, p, n, method)`` of every (text, key) pair: ``(B, K)`` z and p, ``(B,)`` units scored.
    ``with_z=False`` skips SA's permutation z (``z`` is then NaN), which p-values do not need."""
    if keys[0].family == "sa":
        return _many_sa(texts, keys, num_permutations if with_z else 0, num_null_keys)
    tok, view = _resolve_view(keys[0], tokenizer)
    for key in keys[1:]:
        key.check_tokenizer(tok)
    ids = [np.asarray(row, dtype=np.int64) for row in tok(texts, add_special_tokens=False)["input_ids"]]
    ids = [np.unique(row[(row >= 0) & (row < view.size)]) for row in ids]
    return (_many_wip if keys[0].family == "wip" else _many_tsp)(ids, keys, view)


def _many_wip(ids: list[np.ndarray], keys: list[ICWKey], view: VocabularyView) -> tuple:
    counts = np.stack([np.bincount(view.word_letter[u[view.is_word[u]]].astype(np.int64), minlength=26)
                       for u in ids]).astype(np.int64)
    green = np.zeros((len(keys), 26), dtype=bool)
    for i, key in enumerate(keys):
        green[i, [ord(c) - 65 for c in key.green_letters]] = True
    n = counts.sum(1)
    x = counts @ green.T.astype(np.int64)  # (B, K)
    p0 = green.astype(np.float64) @ view.letter_fractions
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(n[:, None] > 0, (x - n[:, None] * p0) / np.sqrt(n[:, None] * p0 * (1 - p0)), 0.0)
    scores = wip_letter_scores(counts)
    shifted = scores - scores.min(1, keepdims=True)
    observed = shifted @ green.T.astype(np.int64)  # (B, K): every key's shifted D
    p = np.ones_like(z)
    sizes = green.sum(1)
    for size in np.unique(sizes):
        cols = np.flatnonzero(sizes == size)
        total = math.comb(26, int(size))
        for b in np.flatnonzero(n > 0):  # one knapsack per text serves every key of this size
            width = int(observed[b, cols].max()) + 1
            below = np.concatenate([[0.0], np.cumsum(_subset_sums(shifted[b:b + 1], np.array([size]), width)[0])])
            p[b, cols] = (total - below[observed[b, cols]]) / total
    method = (f"exact, over all {math.comb(26, int(sizes[0])):,} {int(sizes[0])}-letter keys (knapsack over the 26 "
              "letters, one per text for every key)")
    return z, np.minimum(p, 1.0), n, method


def _many_tsp(ids: list[np.ndarray], keys: list[ICWKey], view: VocabularyView) -> tuple:
    pools = {(k.pool_size, k.gamma) for k in keys}
    scored = scored_mask(keys[0], view)
    if len({k.pool_size for k in keys}) > 1:
        raise ValueError(f"TSP keys with different pool sizes ({sorted(str(p[0]) for p in pools)}): "
                         "verify each pool size's keys separately")
    pool = keys[0].candidate_pool(view)
    ids = [u[scored[u]] for u in ids]
    union = np.unique(np.concatenate(ids)) if ids else np.zeros(0, dtype=np.int64)
    where = np.searchsorted(pool, union)  # the union's ranks in the pool (every one of them is in it)
    member = np.zeros((len(keys), len(union)), dtype=bool)
    for i, key in enumerate(keys):
        member[i] = _tsp_membership(key, pool, where, union, view)
    index = np.zeros((len(union), len(ids)), dtype=np.int64)
    for b, u in enumerate(ids):
        index[np.searchsorted(union, u), b] = 1
    x = (member.astype(np.int64) @ index).T  # (B, K)
    n = index.sum(0)
    gamma = np.array([k.gamma for k in keys])
    size_t = np.array([math.floor(g * len(pool)) for g in gamma])
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(n[:, None] > 0, (x - n[:, None] * gamma) / np.sqrt(n[:, None] * gamma * (1 - gamma)), 0.0)
    batch, k = x.shape
    p = hypergeom_tails(x.ravel(), np.full(batch * k, len(pool)), np.tile(size_t, batch), np.repeat(n, k))
    p = np.where(np.repeat(n, k) > 0, p, 1.0).reshape(batch, k)
    method = f"exact hypergeometric (|P| = {len(pool)}, |T| = floor(gamma |P|))"
    return z, np.minimum(p, 1.0), n, method


def _tsp_membership(key: ICWKey, pool: np.ndarray, where: np.ndarray, union: np.ndarray,
                    view: VocabularyView) -> np.ndarray:
    """Which of ``union`` (pool tokens at ranks ``where``) are in the key's green set ``T``, without
    sorting the pool's draws: ``T`` is the ``|T|`` smallest draws, i.e. those at or below the
    ``|T|``-th smallest (a linear-time partition)."""
    from .keys import _raw

    if "T" in key._cache:  # already drawn for this key
        return np.isin(union, key._cache["T"])
    size = math.floor(key.gamma * len(pool))
    raw = _raw("tsp", key.seed, len(pool))
    threshold = np.partition(raw, size - 1)[size - 1]
    if np.count_nonzero(raw == threshold) > 1:  # a tie at the cut (odds ~1e-10): the stable sort decides
        return np.isin(union, key.token_set(view))
    return raw[where] <= threshold


def _many_sa(texts: list[str], keys: list[ICWKey], num_permutations: int, num_null_keys: int) -> tuple:
    secrets = [k.secret_string for k in keys]
    pool = SA_POOL if all(set(s) <= set(SA_POOL) for s in secrets) else ALPHABET
    z = np.zeros((len(texts), len(keys)))
    p = np.ones((len(texts), len(keys)))
    n = np.zeros(len(texts), dtype=np.int64)
    phis = [_codes("".join(letter for _, letter in sentence_initial_spans(text))) for text in texts]
    lengths = np.array([len(s) for s in secrets])
    for length in map(int, np.unique(lengths)):  # the null depends on the secret's length: one per length
        cols = np.flatnonzero(lengths == length)
        masks = _secret_masks(np.stack([_codes(secrets[k]) for k in cols])).astype(_mask_dtype(length))
        null_masks = _null_secret_masks(length, pool, num_null_keys).T
        for b, codes in enumerate(phis):
            n[b] = m = len(codes)
            if m == 0:
                continue
            x = lcs_lengths(masks, codes[None, :], length)
            null = np.sort(lcs_lengths(null_masks, codes[None, :], length))
            p[b, cols] = (num_null_keys - np.searchsorted(null, x, side="left") + 1) / (num_null_keys + 1)
            if not num_permutations:
                z[b, cols] = np.nan
                continue
            perms = codes[_permutations(m, num_permutations)]
            for start in range(0, len(cols), 64):  # the paper's permutation z: 64 keys x N orderings at a time
                chunk = masks[start:start + 64]
                lcs = lcs_lengths(np.repeat(chunk, num_permutations, axis=0), np.tile(perms, (len(chunk), 1)), length)
                lcs = lcs.reshape(len(chunk), num_permutations)
                mean, sd = lcs.mean(1), lcs.std(1, ddof=1)
                dev = x[start:start + len(chunk)] - mean
                z[b, cols[start:start + len(chunk)]] = np.divide(dev, sd, out=np.zeros_like(dev), where=sd > 0)
    method = (f"Monte Carlo over {num_null_keys:,} random secrets of each key's length from the {len(pool)}-letter pool "
              f"(resolution {1 / (num_null_keys + 1):.1e}), one null per text and length for every key")
    return z, p, n, method
