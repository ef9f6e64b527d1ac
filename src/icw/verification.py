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
  ``P(LCS(S', Phi(y)) >= X)`` over up to ``M`` random secrets ``S'`` drawn like keys, reported as
  ``(k + 1) / (M + 1)`` with its resolution ``1 / (M + 1)``, or, drawn sequentially (the default),
  Besag & Clifford's ``h / l`` when the ``h``-th secret scoring ``>= X`` came at draw ``l``: ``h``
  is the fewest exceedances that settle ``p > alpha``, so the decision is the full Monte Carlo's
  (:func:`sequential_stop`); the permutation p-value is reported too. LCS is bit-parallel over the
  secret and vectorized over all draws and texts at once.

Example:
    >>> from icw import ICWKey, verify
    >>> key = ICWKey.create("sa", seed=3, secret="HELLO")
    >>> r = verify("Here we go. Every day is new. Lots to do. Let us start. Over and out.", key)
    >>> r.num_aligned, r.p_value < 0.05
    (5, True)
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .keys import SA_POOL, ICWKey, as_keys, green_mask, scored_mask
from .lcs import lcs_alignment, lcs_length, letter_codes, permutation_nulls, sequential_exceedances
from .text import sentence_initial_spans, sentence_initials
from .tsp import hypergeom_tails
from .vocab import ALPHABET, VocabularyView, vocabulary
from .wip import (  # noqa: F401  (re-exported: the WIP statistics are part of the verifier's API)
    WIP_SCORE_STEP,
    english_initial_frequencies,
    wip_excess_test,
    wip_key_null_sf,
    wip_letter_counts,
    wip_letter_scores,
)

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
#: Appended for a screened key (icw.screening): the p-value is over all keys, the key uniform over those passing.
SCREENED_NULL = ("; this key passed screen {}, so it is uniform over the fraction r of keys that pass it: the p-value "
                 "is over all keys, and P(p <= u) <= u / r under the screened-key null (docs/statistics.md)")
_NOT_ASCII_LETTER = bytes(b for b in range(128) if not chr(b).isalpha())
_ASCII_RUNS = re.compile(r"[\x00-\x7f]+")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_EMPTY_NOTE = "empty text: nothing to score"
_NON_ENGLISH_NOTE = "mostly non-English text: only its English (ASCII) part is scored, so the test has little power"
_LABELS = {"tsp": ("green token", "other token"), "wip": ("green initial", "red initial"),
           "sa": ("matched initial", "unmatched initial")}


class TextTooLongError(ValueError):
    """A text exceeds the verifier's character limit; ``index``, ``length`` and ``max_chars`` say which
    text of the batch, how long it is and what the limit was.

    Args:
        message (`str`): the one-line error shown to the user.
        index (`int`, defaults to 0): position of the offending text in the batch.
        length (`int`, defaults to 0): its length in characters.
        max_chars (`int`, defaults to 0): the verifier's character limit it exceeds.
    """

    def __init__(self, message: str, index: int = 0, length: int = 0, max_chars: int = 0) -> None:
        super().__init__(message)
        self.index, self.length, self.max_chars = index, length, max_chars


@dataclass
class Highlight:
    """A counted unit of the text: a token (TSP), a word-initial token (WIP) or a
    sentence-initial letter (SA), with character offsets into the text.

    Args:
        start, end (`int`): character offsets of the unit in the text (``text[start:end]``).
        text (`str`): the unit's surface, as it appears in the text.
        aligned (`bool`): whether the unit counts towards ``X`` (green token, key letter, or part of the
            LCS).
        label (`str`): a short human-readable reason, e.g. the letter it matched.
    """

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

    Args:
        family (`str`): ``"tsp"``, ``"wip"`` or ``"sa"``.
        z_score (`float`): the paper's z statistic.
        p_value (`float`): the p-value under ``null_hypothesis``, computed as ``p_value_method`` says.
        is_watermarked (`bool`): ``p_value <= alpha``.
        alpha (`float`): the significance level used for ``is_watermarked``.
        num_tokens_scored (`int`): ``n``: unique ``V_en`` tokens (TSP), unique word-initial tokens (WIP) or
            sentence starts (SA).
        num_aligned (`int`): ``X``: green tokens (TSP), key-letter word starts (WIP) or the LCS length (SA).
        null_mean, null_sd (`float`): mean and standard deviation of ``X`` under the null (binomial for
            TSP/WIP, permutation sample for SA).
        p0 (`float`, *optional*): the per-unit success probability under the null (TSP, WIP); ``None`` for
            SA.
        p_value_method (`str`): how ``p_value`` was computed (exact hypergeometric, exact key null, Monte
            Carlo, ...).
        statistic (`str`): what ``X`` counts, in words.
        null_hypothesis (`str`): the null the p-value is computed under, in words.
        key (`str`): the key string the text was verified against.
        permutation_p_value (`float`, *optional*): SA only: the paper's permutation p-value over shuffles of
            the text's initials.
        p_value_resolution (`float`, *optional*): the smallest p-value a Monte Carlo method can report (``1
            / (N + 1)``).
        note (`str`, *optional*): a caveat, e.g. too few units for the normal approximation behind z.
        highlights (`list[Highlight]`, *optional*): the counted units with character offsets, when
            requested.
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
        # a shallow copy: every field but the highlights is a number or a string (dataclasses.asdict deep-copies
        # each one, which cost more than verifying an SA text)
        out = dict(self.__dict__)
        if self.highlights is None:
            out.pop("highlights")
        else:
            out["highlights"] = [dict(h.__dict__) for h in self.highlights]
        return out


# ------------------------------------------------------------------------- statistics
def z_statistic(x: int, n: int, p0: float) -> float:
    """The paper's binomial z: ``(X - n p0) / sqrt(n p0 (1 - p0))``; 0 when nothing was scored.

    Args:
        x (`int`): the observed count ``X``.
        n (`int`): the number of scored units.
        p0 (`float`): the per-unit success probability under the null.
    """
    return 0.0 if n == 0 else (x - n * p0) / math.sqrt(n * p0 * (1.0 - p0))


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
    return [t if t.isascii() or not _has_surrogate(t) else _SURROGATE.sub("\ufffd", t) for t in texts]


def _has_surrogate(text: str) -> bool:
    if len(text) > 1 << 20:  # a long text: scan it, rather than hold an encoded copy
        return _SURROGATE.search(text) is not None
    try:
        text.encode("utf-8")  # UTF-8 refuses exactly the surrogates, 4x faster than the regex scan
    except UnicodeEncodeError:
        return True
    return False


def _text_note(text: str) -> str | None:
    if not text.strip():
        return _EMPTY_NOTE
    if text.isascii():
        return None
    # Counted without a list of matches: findall held one pointer per letter (~8 bytes a character).
    ascii_part = text.encode("ascii", "ignore")
    others = len(text) - len(ascii_part)  # at most this many non-ASCII letters: enough ASCII ones settle it
    if len(ascii_part[:4 * others + 64].translate(None, _NOT_ASCII_LETTER)) >= others:
        return None
    ascii_letters = len(ascii_part.translate(None, _NOT_ASCII_LETTER))
    other_letters = sum(map(str.isalpha, _ASCII_RUNS.sub("", text)))
    if other_letters > ascii_letters:
        return _NON_ENGLISH_NOTE
    return None


def _resolve_view(key: ICWKey, tokenizer: Any) -> tuple[Any, VocabularyView]:
    from .models import resolve_tokenizer

    tokenizer = resolve_tokenizer(key.tokenizer if tokenizer is None else tokenizer)
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
        p_value_method=method, statistic=STATISTICS[key.family],
        null_hypothesis=NULL_HYPOTHESES[key.family] + (SCREENED_NULL.format(key.screen) if key.screen else ""),
        key=key.to_string(), note=note, **extra,
    )


# ------------------------------------------------------------------- per-family scoring
def _key_constants(key: ICWKey, view: VocabularyView) -> tuple[float, str, Any]:
    """``(p0, p-value method, what the tail needs)`` of a TSP/WIP key: ``(|P|, |T|)`` or its 26 key letters."""
    if key.family == "tsp":
        pool = int(scored_mask(key, view).sum())
        size_t = math.floor(key.gamma * pool)
        return key.gamma, f"exact hypergeometric (|P| = {pool}, |T| = {size_t})", (pool, size_t)
    letters = [ord(c) - 65 for c in key.green_letters]
    green_letters = np.zeros(26, dtype=bool)
    green_letters[letters] = True
    return (float(view.letter_fractions[letters].sum()), f"exact, over all {math.comb(26, key.num_letters):,} "
            f"{key.num_letters}-letter keys (knapsack over the 26 letters)", green_letters)


def _score_token_texts(keys: list[ICWKey], view: VocabularyView, ids: list[list[int]], offsets: list | None,
                       texts: list[str], alpha: float) -> tuple[list[VerificationResult], list[tuple]]:
    """Score TSP/WIP texts of one tokenizer in a few array calls (per-text calls dominated batches of short
    texts); the exact p-values are left to the caller, who computes a whole batch's tails at once: per text
    ``(x, |P|, |T|, n)`` (TSP) or ``(26 letter counts, 26 key letters)`` (WIP)."""
    by_key: dict[ICWKey, list[int]] = {}
    for b, key in enumerate(keys):
        by_key.setdefault(key, []).append(b)
    rank = np.empty(len(keys), dtype=np.int64)  # texts numbered key by key: each key's texts are one slice
    rank[[b for group in by_key.values() for b in group]] = np.arange(len(keys))
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
    rows = np.repeat(rank, lengths)
    inside = (flat >= 0) & (flat < view.size)
    pairs = np.sort(rows[inside] * view.size + flat[inside])  # distinct (text, token): a sort beats np.unique here
    rows, tokens = np.divmod(pairs[np.diff(pairs, prepend=-1) != 0], view.size)
    starts = np.searchsorted(rows, np.arange(len(keys) + 1))
    scored, green = np.zeros(len(tokens), dtype=bool), np.zeros(len(tokens), dtype=bool)
    for key, group in by_key.items():
        part = slice(starts[rank[group[0]]], starts[rank[group[-1]] + 1])
        scored[part], green[part] = scored_mask(key, view)[tokens[part]], green_mask(key, view)[tokens[part]]
    rows, tokens, green = rows[scored], tokens[scored], green[scored]
    n = np.bincount(rows, minlength=len(keys))[rank]
    x = np.bincount(rows, weights=green, minlength=len(keys)).astype(np.int64)[rank]
    letter = view.word_letter[tokens].astype(np.int64)  # -1 off V_en^word, which only TSP keys score
    word = letter >= 0
    letter_counts = np.bincount(rows[word] * 26 + letter[word], minlength=26 * len(keys)).reshape(-1, 26)[rank]
    per_key = {key: _key_constants(key, view) for key in by_key}
    results, tails = [], []
    for b, (key, text) in enumerate(zip(keys, texts, strict=True)):
        nb, xb = int(n[b]), int(x[b])
        p0, method, constant = per_key[key]
        tails.append((xb, *constant, nb) if key.family == "tsp" else (letter_counts[b], constant))
        highlights = None
        if offsets is not None:
            in_p, in_t = scored_mask(key, view), green_mask(key, view)
            labels = _LABELS[key.family]
            highlights = [Highlight(s, e, text[s:e], bool(in_t[t]), labels[0] if in_t[t] else labels[1])
                          for t, (s, e) in zip(ids[b], offsets[b], strict=False)
                          if 0 <= t < view.size and in_p[t] and e > s]
        mean, sd = nb * p0, math.sqrt(nb * p0 * (1 - p0))
        results.append(_result(key, alpha, z_statistic(xb, nb, p0), float("nan"), nb, xb, mean, sd, p0, method,
                               _text_note(text), highlights=highlights))
    return results, tails


def sequential_stop(alpha: float, num_null_keys: int) -> int:
    """``h`` of the sequential SA p-value: the fewest exceedances with ``h / M > alpha``.

    Drawing null secrets stops at the ``h``-th that scores ``>= X``; with ``h > alpha M`` the
    p-value ``h / l`` (``l <= M`` draws) is then above ``alpha``, and so is the full Monte Carlo's
    ``(K + 1) / (M + 1)`` (``K >= h``): stopping never changes the decision at ``alpha``.

    Args:
        alpha (`float`): the significance level of the decision.
        num_null_keys (`int`): the Monte Carlo size ``M``.

    Example:
        >>> sequential_stop(0.01, 9999)
        100
    """
    h = math.floor(alpha * num_null_keys) + 1
    while h / num_null_keys <= alpha:  # float rounding of alpha * M
        h += 1
    return h


def _score_sa(items: list[tuple[int, ICWKey, str]], alpha: float, want_highlights: bool, num_permutations: int,
              num_null_keys: int, sequential: bool) -> dict[int, VerificationResult]:
    """Score SA texts (``(index, key, text)``), the texts that share a secret in one batch."""
    out: dict[int, VerificationResult] = {}
    groups: dict[str, list[tuple[int, ICWKey, str, str, list | None]]] = {}
    for i, key, text in items:
        spans = sentence_initial_spans(text) if want_highlights else None  # else keep the letters only
        phi = "".join(letter for _, letter in spans) if want_highlights else sentence_initials(text)
        if phi:
            groups.setdefault(key.secret_string, []).append((i, key, text, phi, spans))
        else:
            out[i] = _result(key, alpha, 0.0, 1.0, 0, 0, 0.0, 0.0, None, "no sentence to score", _text_note(text),
                             highlights=[] if want_highlights else None)
    stop_after = sequential_stop(alpha, num_null_keys) if sequential else num_null_keys + 1  # never reached
    for secret, group in groups.items():
        k, codes = len(secret), [letter_codes(phi) for _, _, _, phi, _ in group]
        xs = np.array([lcs_length(secret, c) for c in codes], dtype=np.int64)
        null = np.stack(permutation_nulls(secret, codes, num_permutations))  # (texts, N)
        means, sds = null.mean(axis=1), null.std(axis=1, ddof=1)  # sample sd, as the reference
        perm_p = ((null >= xs[:, None]).sum(axis=1) + 1) / (num_permutations + 1)
        pool = SA_POOL if set(secret) <= set(SA_POOL) else ALPHABET
        exceed, drawn = sequential_exceedances(k, pool, codes, xs, num_null_keys, stop_after)
        draws = f"random {k}-letter secrets from the {len(pool)}-letter pool"
        for j, (i, key, text, phi, spans) in enumerate(group):
            x, mean, sd = int(xs[j]), float(means[j]), float(sds[j])
            if exceed[j] == stop_after:  # stopped early: Besag & Clifford's p = h / l
                p = stop_after / int(drawn[j])
                method = (f"sequential Monte Carlo (Besag & Clifford 1991) over {draws}: stopped at the "
                          f"h = {stop_after}th scoring >= X, after l = {int(drawn[j]):,} of at most {num_null_keys:,}; "
                          f"p = h / l (relative precision about 1/sqrt(h)); the decision at alpha = {alpha:g} is the "
                          "full Monte Carlo's")
            else:
                p = (int(exceed[j]) + 1) / (num_null_keys + 1)
                method = (f"Monte Carlo over {num_null_keys:,} {draws} (resolution {1 / (num_null_keys + 1):.1e})"
                          + (f"; sequential (Besag & Clifford 1991), stopping at h = {stop_after} scoring >= X: not "
                             f"reached, all drawn, p = (k + 1) / (M + 1)" if sequential else ""))
            highlights = None
            if want_highlights:
                used = lcs_alignment(secret, phi)
                labels = _LABELS["sa"]
                highlights = [Highlight(pos, pos + 1, text[pos], n in used, labels[0] if n in used else labels[1])
                              for n, (pos, _) in enumerate(spans)]
            z = (x - mean) / sd if sd > 0 else 0.0
            out[i] = _result(key, alpha, z, p, len(phi), x, mean, sd, None, method, _text_note(text),
                             permutation_p_value=float(perm_p[j]), p_value_resolution=1 / (num_null_keys + 1),
                             highlights=highlights)
    return out


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
    sequential: bool = True,
) -> VerificationResult | list[VerificationResult]:
    """Verify texts against keys.

    Args:
        texts: one text or a list of texts.
        keys: one key shared by all texts, or one key per text (families may be mixed).
        tokenizer: the tokenizer TSP/WIP keys were built for, or its name (``"qwen3"``, a folder);
            when omitted, the key's own tokenizer name is loaded (embedded aliases work offline).
            SA needs none.
        alpha: significance level for ``is_watermarked``.
        highlights: also return the counted spans with character offsets.
        max_chars: texts longer than this raise :class:`TextTooLongError`.
        num_permutations: SA permutation-null size ``N`` for the paper's z.
        num_null_keys: SA Monte Carlo size ``M`` for the p-value (the most null secrets drawn).
        sequential: SA: stop drawing null secrets at the ``h``-th that scores ``>= X``, with ``h`` the
            fewest exceedances that put the p-value above ``alpha`` (Besag & Clifford's sequential p-value
            ``h / l``; :func:`sequential_stop`): the decision at ``alpha`` is the full Monte Carlo's, on
            every text. ``False`` draws all ``M``.

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
    sa_items = [(i, key, texts[i]) for i, key in enumerate(keys) if key.family == "sa"]
    for i, result in _score_sa(sa_items, alpha, highlights, num_permutations, num_null_keys, sequential).items():
        results[i] = result
    for i, key in enumerate(keys):
        if key.family == "sa":
            continue
        tok, view = _resolve_view(key, tokenizer)
        groups.setdefault(id(tok), (tok, view, []))[2].append(i)
    for tok, view, idx in groups.values():
        enc = tok([texts[i] for i in idx], add_special_tokens=False, return_offsets_mapping=highlights)
        tails: dict[str, dict[int, tuple]] = {"tsp": {}, "wip": {}}
        scored, tail = _score_token_texts([keys[i] for i in idx], view, enc["input_ids"],
                                          enc["offset_mapping"] if highlights else None, [texts[i] for i in idx], alpha)
        for i, result, t in zip(idx, scored, tail, strict=True):
            results[i], tails[keys[i].family][i] = result, t
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
    """``|V_en|``, ``|V_en^word|`` and the vocabulary fingerprint of a tokenizer.

    Args:
        tokenizer: a tokenizer object, alias (``qwen3``, ``gpt2``, ``smollm2``) or folder.
    """
    return vocabulary(tokenizer).summary()
