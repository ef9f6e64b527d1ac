"""The reference corpus of human English, and the verifier's decision on each of its passages for any key.

``icw/data/reference_corpus.jsonl.gz`` (built by ``scripts/make_reference_corpus.py``) holds passages of
several domains, each with its provenance and licence, split into a screening and an audit half.
:func:`reference_fires` says on which passages :func:`icw.verify` calls a key's watermark present at
``alpha``, without running the verifier per passage: a passage's p-value is a non-increasing function of
the key's statistic on it (WIP's ``D``, TSP's ``X``, SA's LCS), so each passage gets a *threshold*, the
smallest statistic whose p-value is at most ``alpha``, computed once per tokenizer from the null the
verifier uses (WIP: the knapsack over all letter keys; TSP: the hypergeometric tail; SA: the same fixed
Monte Carlo secrets, whose full-draw decision the sequential p-value reproduces) and cached on disk
(``$ICW_CACHE/screen``). A key then fires on a passage iff its statistic reaches the threshold: one
matrix product (WIP), one gather (TSP) or one bit-parallel LCS pass (SA) over all passages.
``tests/test_screening.py`` checks these decisions against :func:`icw.verify`'s.

Example:
    >>> from icw import ICWKey
    >>> fires = reference_fires(ICWKey.create("sa", seed=7))
    >>> len(fires) == len(reference_corpus()), fires.dtype.name
    (True, 'bool')
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .keys import SA_POOL, ICWKey

REFERENCE_CORPUS = Path(__file__).parent / "data" / "reference_corpus.jsonl.gz"
#: Bump when a table's derivation changes: older cache files are then ignored.
CACHE_FORMAT = 1
_NEVER = np.iinfo(np.int64).max  # the threshold of a passage no key can fire on


# ---------------------------------------------------------------------------- corpus
@dataclass(frozen=True)
class ReferencePassage:
    """One passage of the reference corpus, with its provenance and licence.

    Args:
        id (`str`): ``domain/group/number``.
        domain (`str`): e.g. ``"fiction"``.
        split (`str`): ``"screen"`` or ``"audit"``.
        group (`str`): the document group the split was drawn by (an article, a chapter, a licence file).
        text (`str`): the passage (100-400 words).
        source (`str`): where it comes from (work, file, package and version).
        licence (`str`): the terms it is redistributed under.
    """

    id: str
    domain: str
    split: str
    group: str
    text: str
    source: str
    licence: str


@lru_cache(maxsize=1)
def reference_corpus() -> tuple[ReferencePassage, ...]:
    """Every passage of the bundled reference corpus (both halves, every domain)."""
    with gzip.open(REFERENCE_CORPUS, "rt", encoding="utf-8") as handle:
        return tuple(ReferencePassage(**{k: row[k] for k in ReferencePassage.__dataclass_fields__})
                     for row in map(json.loads, handle) if row)


@lru_cache(maxsize=1)
def reference_domains() -> tuple[str, ...]:
    """The corpus' domains, in file order."""
    return tuple(dict.fromkeys(p.domain for p in reference_corpus()))


@lru_cache(maxsize=1)
def _corpus_sha() -> str:
    return hashlib.sha256(REFERENCE_CORPUS.read_bytes()).hexdigest()


def _cache_folder() -> Path:
    from .models import cache_dir

    return cache_dir() / "screen"


def _cached(name: str, build: Any) -> dict[str, np.ndarray]:
    """``build()``'s arrays, stored as ``$ICW_CACHE/screen/<name>.npz`` (computed once per machine)."""
    path = _cache_folder() / f"{name}.npz"
    use_disk = os.environ.get("ICW_SCREEN_CACHE", "1") != "0"  # ICW_SCREEN_CACHE=0: compute, never read or write
    if use_disk:
        with contextlib.suppress(Exception), np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    arrays = build()
    if not use_disk:
        return arrays
    with contextlib.suppress(OSError, ValueError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{name[:16]}-", suffix=".npz")
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)
        os.replace(tmp, path)
    return arrays


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps([CACHE_FORMAT, _corpus_sha(), *parts]).encode()).hexdigest()[:24]


# -------------------------------------------------------------------- per-passage data
def _token_ids(tokenizer: Any) -> tuple[np.ndarray, np.ndarray]:
    """The unique token ids of every reference passage, as CSR ``(indptr, ids)``."""
    from .vocab import _content_key, vocabulary

    view = vocabulary(tokenizer)
    content = _content_key(tokenizer) or view.fingerprint

    def build() -> dict[str, np.ndarray]:
        texts = [p.text for p in reference_corpus()]
        rows = []
        for start in range(0, len(texts), 256):
            for ids in tokenizer(texts[start:start + 256], add_special_tokens=False)["input_ids"]:
                arr = np.unique(np.asarray(ids, dtype=np.int64))
                rows.append(arr[(arr >= 0) & (arr < view.size)])
        return {"indptr": np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64),
                "ids": np.concatenate(rows).astype(np.int32)}

    data = _cached("ids-" + _digest("ids", content), build)
    return data["indptr"], data["ids"].astype(np.int64)


@lru_cache(maxsize=8)
def _wip_table(tokenizer: Any, num_letters: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """``(shifted scores (N, 26), thresholds (N,))``: a WIP key fires on passage ``b`` iff the sum of
    its letters' shifted scores reaches ``thresholds[b]`` (see :func:`_wip_thresholds`)."""
    from .vocab import vocabulary
    from .wip import wip_letter_scores

    view = vocabulary(tokenizer)
    indptr, ids = _token_ids(tokenizer)
    word = view.is_word[ids]
    letters = view.word_letter[ids].astype(np.int64)
    row = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    counts = np.zeros((len(indptr) - 1, 26), dtype=np.int64)
    np.add.at(counts, (row[word], letters[word]), 1)
    scores = wip_letter_scores(counts)
    shifted = scores - scores.min(1, keepdims=True)

    def build() -> dict[str, np.ndarray]:
        return {"thresholds": _wip_thresholds(shifted, counts.sum(1), num_letters, alpha)}

    thresholds = _cached("wip-" + _digest("wip", view.fingerprint, num_letters, alpha), build)["thresholds"]
    return shifted, thresholds


def _wip_thresholds(shifted: np.ndarray, n: np.ndarray, num_letters: int, alpha: float) -> np.ndarray:
    """Per text, the smallest shifted sum ``s`` with ``P(D' >= s) <= alpha`` over all ``num_letters``-letter
    keys, by the verifier's knapsack (:func:`icw.wip._subset_sums`), with the same arithmetic
    (``(total - #below) / total``) so that the decisions agree to the last bit."""
    from .wip import _subset_sums

    total = math.comb(26, num_letters)
    out = np.full(len(shifted), _NEVER, dtype=np.int64)
    widths = np.sort(shifted, 1)[:, -num_letters:].sum(1) + 1  # every sum of a key is below this
    order = np.argsort(widths)
    start = 0
    while start < len(order):
        stop = start + 1
        while stop < len(order) and (stop + 1 - start) * (num_letters + 1) * 2 * int(widths[order[stop]]) <= 1 << 22:
            stop += 1
        rows = order[start:stop]
        width = int(widths[rows].max())
        # float32 counts are exact: every count is at most C(26, 13) = 10,400,600 < 2**24
        ways = _subset_sums(shifted[rows], np.full(len(rows), num_letters), width, np.float32)
        below = np.concatenate([np.zeros((len(rows), 1)), np.cumsum(ways, 1, dtype=np.float64)], 1)  # sums < s
        sf = (total - below) / total
        ok = sf <= alpha
        first = np.where(ok.any(1), ok.argmax(1), _NEVER)
        out[rows] = first
        start = stop
    out[n == 0] = _NEVER  # nothing scored: the verifier reports p = 1
    return out


@lru_cache(maxsize=8)
def _tsp_passages(tokenizer: Any, pool_size: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, ranks, n)``: every passage's unique tokens of the candidate pool as (passage, rank in ``V_en``)
    pairs, and ``n``, the number of them per passage."""
    from .vocab import vocabulary

    view = vocabulary(tokenizer)
    indptr, ids = _token_ids(tokenizer)
    rank = np.full(view.size, -1, dtype=np.int64)
    rank[view.v_en] = np.arange(len(view.v_en))
    ranks = rank[ids]
    keep = (ranks >= 0) & (ranks < (len(view.v_en) if pool_size is None else pool_size))
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))[keep]
    return rows, ranks[keep], np.bincount(rows, minlength=len(indptr) - 1)


@lru_cache(maxsize=16)
def _tsp_thresholds(tokenizer: Any, pool_size: int | None, gamma: float, alpha: float) -> np.ndarray:
    """Per passage, the smallest ``x`` with ``P(X >= x) <= alpha`` under Hypergeometric(``|P|``, ``|T|``, ``n``),
    by :func:`icw.verification.hypergeom_tails`, the verifier's own tail."""
    from .verification import hypergeom_tails
    from .vocab import vocabulary

    n = _tsp_passages(tokenizer, pool_size)[2]
    pool = len(vocabulary(tokenizer).v_en) if pool_size is None else pool_size
    size = math.floor(gamma * pool)
    sizes = np.unique(n[n > 0])  # the threshold depends on n alone: one tail per distinct n
    xs = np.concatenate([np.arange(m + 2) for m in sizes]) if len(sizes) else np.zeros(0, dtype=np.int64)
    ns = np.repeat(sizes, sizes + 2)
    ok = hypergeom_tails(xs, np.full(len(xs), pool), np.full(len(xs), size), ns) <= alpha
    by_n = {}
    for m, start in zip(sizes, np.concatenate([[0], np.cumsum(sizes + 2)[:-1]]), strict=True):
        hit = np.flatnonzero(ok[start:start + m + 2])
        by_n[int(m)] = int(hit[0]) if len(hit) else _NEVER
    return np.array([by_n.get(int(m), _NEVER) for m in n], dtype=np.int64)


@lru_cache(maxsize=1)
def _sa_codes() -> np.ndarray:
    """``(N, m)`` sentence-initial letter codes of every passage, padded with 26 (matches nothing)."""
    from .lcs import letter_codes
    from .text import sentence_initials

    def build() -> dict[str, np.ndarray]:
        codes = [letter_codes(sentence_initials(p.text)) for p in reference_corpus()]
        out = np.full((len(codes), max(1, max(len(c) for c in codes))), 26, dtype=np.int64)
        for row, c in zip(out, codes, strict=True):
            row[:len(c)] = c
        return {"codes": out}

    return _cached("phi-" + _digest("phi"), build)["codes"]


@lru_cache(maxsize=8)
def _sa_thresholds(length: int, pool: str, alpha: float, num_null_keys: int) -> np.ndarray:
    """Per passage, the smallest LCS ``x`` whose Monte Carlo p-value ``(#{null >= x} + 1) / (M + 1)`` is at
    most ``alpha``, over the verifier's fixed null secrets (:func:`icw.lcs.null_secret_masks`)."""
    from .lcs import lcs_lengths, null_secret_masks

    def build() -> dict[str, np.ndarray]:
        codes = _sa_codes()
        null = null_secret_masks(length, pool, num_null_keys).T
        out = np.full(len(codes), _NEVER, dtype=np.int64)
        for b, row in enumerate(codes):
            real = row[row < 26]
            if not len(real):
                continue
            lcs = np.sort(lcs_lengths(null, real[None, :], length))
            for x in range(1, min(length, len(real)) + 1):
                if (num_null_keys - np.searchsorted(lcs, x, side="left") + 1) / (num_null_keys + 1) <= alpha:
                    out[b] = x
                    break
        return {"thresholds": out}

    return _cached("sa-" + _digest("sa", length, pool, alpha, num_null_keys), build)["thresholds"]


# --------------------------------------------------------------------------- decisions
def reference_fires(key: ICWKey, tokenizer: Any = None, alpha: float = 0.01) -> np.ndarray:
    """``(N,)`` booleans: whether :func:`icw.verify` calls each reference passage watermarked under ``key``
    at ``alpha`` (default SA Monte Carlo size), without running the verifier per passage.

    Args:
        key (`ICWKey`): the key (any family; TSP/WIP keys need ``tokenizer``).
        tokenizer: the tokenizer the key was built for (object or name); defaults to the key's own.
        alpha (`float`): the significance level.
    """
    from .verification import DEFAULT_NULL_KEYS

    if key.family == "sa":
        from .lcs import _lcs_advance, mask_dtype, secret_masks

        secret = key.secret_string
        pool = SA_POOL if set(secret) <= set(SA_POOL) else "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        length = len(secret)
        thresholds = _sa_thresholds(length, pool, alpha, DEFAULT_NULL_KEYS)
        from .lcs import letter_codes

        dtype = mask_dtype(length)
        table = np.append(secret_masks(letter_codes(secret)[None, :])[0].astype(dtype), dtype(0))
        codes = _sa_codes()
        full = dtype((1 << length) - 1)
        v = np.full(len(codes), full, dtype=dtype)
        _lcs_advance(v, (table[c] for c in np.ascontiguousarray(codes.T)), full)
        lcs = length - np.bitwise_count(v).astype(np.int64)
        return lcs >= thresholds
    from .models import resolve_tokenizer

    tokenizer = resolve_tokenizer(key.tokenizer if tokenizer is None else tokenizer)
    key.check_tokenizer(tokenizer)
    if key.family == "wip":
        shifted, thresholds = _wip_table(tokenizer, key.num_letters, alpha)
        green = np.zeros(26, dtype=np.int64)
        green[[ord(c) - 65 for c in key.green_letters]] = 1
        return shifted @ green >= thresholds
    from .keys import _raw

    rows, ranks, n = _tsp_passages(tokenizer, key.pool_size)
    thresholds = _tsp_thresholds(tokenizer, key.pool_size, key.gamma, alpha)
    pool = len(key.candidate_pool(tokenizer))
    size = math.floor(key.gamma * pool)
    raw = _raw("tsp", key.seed, pool, key.draw)  # T is the |T| smallest draws: those at or below the |T|-th
    green = raw <= np.partition(raw, size - 1)[size - 1]
    if int(green.sum()) != size:  # a tie at the cut (odds ~1e-10): the stable sort decides, as token_set does
        green = np.zeros(pool, dtype=bool)
        green[np.argsort(raw, kind="stable")[:size]] = True
    x = np.bincount(rows, weights=green[ranks], minlength=len(n))  # X: green pool tokens per passage
    return x >= thresholds


@lru_cache(maxsize=1)
def _labels() -> tuple[np.ndarray, np.ndarray]:
    """``(domain index, is-screening-half)`` of every reference passage."""
    names = {d: i for i, d in enumerate(reference_domains())}
    corpus = reference_corpus()
    return (np.array([names[p.domain] for p in corpus]), np.array([p.split == "screen" for p in corpus]))
