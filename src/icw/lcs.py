"""The Sentence-Acrostic statistic's machinery: bit-parallel LCS and the nulls' random draws.

:func:`icw.verify` scores an SA text by ``X = LCS(S, Phi(y))`` against two nulls: ``N`` random
permutations of ``Phi(y)`` (the paper's z) and ``M`` random secrets drawn like keys (the p-value).
Both need thousands of LCS lengths per text, so LCS is bit-parallel over the secret (one machine
word per row) and vectorized over all draws at once; the draws are seeded by their content
(:func:`content_rng`) and cached, so the same text and key always give the same result.

Example:
    >>> int(lcs_lengths(secret_table("HELLO"), letter_codes("HXELLO")[None, :], 5)[0])
    5
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any

import numpy as np


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
    dtype = mask_dtype(width)
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
    v = np.full(rows, full, dtype=dtype)
    _lcs_advance(v, columns, full)
    return width - np.bitwise_count(v).astype(np.int64)


def lcs_length(secret: str, phi_codes: np.ndarray) -> int:
    """LCS length of ``secret`` and one letter string, with Python integers as the bit vector:
    for a single pair this beats one numpy call per letter.

    Args:
        secret (`str`): the SA secret ``S`` (upper-case letters).
        phi_codes (`np.ndarray`): the letter string as codes 0-25.

    Example:
        >>> lcs_length("HELLO", letter_codes("HXELLO"))
        5
    """
    table, full = _int_table(secret), (1 << len(secret)) - 1
    v = full
    for c in phi_codes.tolist():
        u = v & table[c]
        v = (v + u) | (v - u)
    return len(secret) - (v & full).bit_count()


@lru_cache(maxsize=256)
def _int_table(secret: str) -> tuple[int, ...]:
    return tuple(int(m) for m in secret_table(secret)[0])


#: Words per array of one step of the batched nulls (1 MB): texts run in groups this small, so the arrays
#: stay in cache and memory stays bounded for any batch (a 2-core machine: 26 us a text at 1 MB, 37 us at 16 MB).
CACHE_WORDS = 1 << 18


def _advance_ragged(v: np.ndarray, table: np.ndarray, codes: np.ndarray, active: np.ndarray) -> None:
    """Bit-parallel LCS over ragged strings: ``v`` is ``(strings, draws)``, ``table[c]`` the masks of letter
    ``c`` in every draw, ``codes[:, j]`` the letters at position ``j`` and ``active[j]`` how many strings
    reach it (longest first, so those are a prefix). Each position's masks are gathered as it is read,
    which keeps the arrays cache-sized."""
    u, w = np.empty_like(v), np.empty_like(v)
    for j, rows in enumerate(active.tolist()):
        vv, uu, ww = v[:rows], u[:rows], w[:rows]
        np.take(table, codes[:rows, j], axis=0, out=uu, mode="wrap")  # "wrap": in range, no buffered output
        np.bitwise_and(vv, uu, out=uu)
        np.add(vv, uu, out=ww)
        np.subtract(vv, uu, out=vv)
        np.bitwise_or(vv, ww, out=vv)


def permutation_nulls(secret: str, phis: list[np.ndarray], count: int) -> list[np.ndarray]:
    """:func:`permutation_null` of many texts at once: the same orderings, so the same numbers.

    Short texts (up to :data:`PERMUTATION_BLOCK` letters) of one length share their ``count`` orderings,
    so they run together: at each position one gather of every text's match masks through the shared
    ordering, then one bit-parallel LCS step over all of them. The arrays stay cache-sized; gathering
    each text's masks for all positions up front streamed hundreds of megabytes per batch.

    Args:
        secret (`str`): the SA secret ``S``.
        phis (`list[np.ndarray]`): each text's sentence initials as codes 0-25 (non-empty).
        count (`int`): the number of random orderings ``N`` per text.
    """
    out: list[np.ndarray | None] = [None] * len(phis)
    by_length: dict[int, list[int]] = {}
    for i, phi in enumerate(phis):
        if len(phi) <= PERMUTATION_BLOCK:
            by_length.setdefault(len(phi), []).append(i)
        else:
            out[i] = permutation_null(secret, phi, count)
    width, table = len(secret), secret_table(secret)[0]
    full = table.dtype.type((1 << width) - 1)
    size = max(1, CACHE_WORDS // count)
    for length, texts in by_length.items():
        positions = _positions(length, count)
        for group in (texts[k:k + size] for k in range(0, len(texts), size)):
            masks = table[np.stack([phis[i] for i in group])]  # (texts, length)
            v = np.full((len(group), count), full, dtype=table.dtype)
            match = np.empty_like(v)  # "wrap": the indices are in range, and the default mode buffers the output
            _lcs_advance(v, (np.take(masks, row, axis=1, out=match, mode="wrap") for row in positions), full)
            for i, null in zip(group, width - np.bitwise_count(v).astype(np.int64), strict=True):
                out[i] = null
    return out


#: Null secrets scored per text in the first step of :func:`sequential_exceedances`; each further step
#: doubles, so a text needs at most about twice the draws its stopping rule asks for.
FIRST_STEP = 256


def sequential_exceedances(length: int, pool: str, phis: list[np.ndarray], observed: np.ndarray, total: int,
                           stop_after: int) -> tuple[np.ndarray, np.ndarray]:
    """Score texts against the shared null secrets in order, each until ``stop_after`` of them
    reached its observed LCS or all ``total`` were drawn (Besag & Clifford's sequential rule).

    The draws are :func:`null_secret_masks` ``(length, pool, total)``, in their fixed order, so the
    counts are exactly those of scoring the first ``drawn`` secrets one by one. Texts are run
    together, longest first (one ragged bit-parallel LCS per step), in steps of
    :data:`FIRST_STEP`, doubling.

    Args:
        length (`int`): the secrets' length.
        pool (`str`): the letters secrets are drawn from.
        phis (`list[np.ndarray]`): each text's sentence initials as codes 0-25 (non-empty).
        observed (`np.ndarray`): each text's ``X``.
        total (`int`): the Monte Carlo size ``M`` (most draws per text).
        stop_after (`int`): ``h``, the exceedances (null LCS ``>= X``) after which a text stops.

    Returns:
        ``(exceed, drawn)``: per text, the exceedances among its first ``drawn`` secrets; ``exceed ==
        stop_after`` exactly when it stopped early, at the ``drawn``-th secret.
    """
    padded = _padded_null_masks(length, pool, total)  # (27, total): code 26 matches nothing
    masks = padded[:26]
    full = masks.dtype.type((1 << length) - 1)
    exceed, drawn = np.zeros(len(phis), dtype=np.int64), np.zeros(len(phis), dtype=np.int64)
    pending = sorted(range(len(phis)), key=lambda i: -len(phis[i]))
    start, step = 0, FIRST_STEP
    while pending and start < total:
        stop = min(total, start + step)
        width = stop - start
        table = np.ascontiguousarray(padded[:, start:stop])
        still: list[int] = []
        while pending:
            longest = len(phis[pending[0]])
            size = max(1, CACHE_WORDS // width)
            group, pending = pending[:size], pending[size:]
            lengths = np.array([len(phis[i]) for i in group])
            codes = np.full((len(group), longest), 26, dtype=np.intp)
            for slot, i in enumerate(group):
                codes[slot, :lengths[slot]] = phis[i]
            active = (lengths[None, :] > np.arange(longest)[:, None]).sum(axis=1)
            v = np.full((len(group), width), full, dtype=masks.dtype)
            _advance_ragged(v, table, codes, active)
            np.bitwise_and(v, full, out=v)
            null = length - np.bitwise_count(v).astype(np.int64)
            idx = np.array(group)
            hits = np.cumsum(null >= observed[idx][:, None], axis=1) + exceed[idx][:, None]
            done = hits[:, -1] >= stop_after
            exceed[idx] = np.minimum(hits[:, -1], stop_after)
            drawn[idx] = np.where(done, start + 1 + np.argmax(hits >= stop_after, axis=1), stop)
            still.extend(i for i, d in zip(group, done.tolist(), strict=True) if not d)
        pending = sorted(still, key=lambda i: -len(phis[i]))
        start, step = stop, step * 2
    return exceed, drawn


def _lcs_advance(v: np.ndarray, columns: Any, full: np.unsignedinteger) -> None:
    """Run the bit-parallel LCS recurrence over ``columns`` (match masks, one per text position),
    updating the state vector ``v`` in place: a text can be fed in blocks."""
    u, w = np.empty_like(v), np.empty_like(v)
    for match in columns:  # v <- (v + u) | (v - u) with u = v & match, in place
        np.bitwise_and(v, match, out=u)
        np.add(v, u, out=w)
        np.subtract(v, u, out=v)
        np.bitwise_or(v, w, out=v)
    # Bits above ``width`` (the carry of v + u, wrapped words) never flow down into the low bits, so they
    # are cleared once here rather than at every step.
    np.bitwise_and(v, full, out=v)


#: Texts with up to this many sentences index cached permutation tables; longer ones draw their
#: shuffles in blocks of this many positions, so the SA null takes O(N * block) memory at any length.
PERMUTATION_BLOCK = 256


def permutation_null(secret: str, phi_codes: np.ndarray, count: int) -> np.ndarray:
    """LCS of ``secret`` with ``count`` uniformly random orderings of the letters ``phi_codes``.

    Short texts index cached :func:`permutations` of ``range(m)``. Longer ones are shuffled block
    by block without materialising the ``(count, m)`` orderings: the letter counts of the next
    block are drawn from each ordering's remaining letters (a multivariate hypergeometric draw,
    one hypergeometric per letter), then shuffled within the block. Block by block this is the
    same uniform ordering of the multiset, and the LCS only depends on the letters.

    Args:
        secret (`str`): the SA secret ``S`` (upper-case letters).
        phi_codes (`np.ndarray`): the text's sentence initials ``Phi(y)`` as codes 0-25 (see
            :func:`letter_codes`).
        count (`int`): the number of random orderings ``N``.

    Example:
        >>> null = permutation_null("HELLO", letter_codes("OLLEH" * 100), 200)
        >>> null.shape, int(null.min()) >= 1, int(null.max()) <= 5
        ((200,), True, True)
    """
    width, m = len(secret), len(phi_codes)
    table = secret_table(secret)
    if m <= PERMUTATION_BLOCK:
        return lcs_lengths(table, phi_codes[permutations(m, count)], width)
    counts = np.bincount(phi_codes, minlength=26)
    rng = content_rng("permutation-null", m, count, counts.tobytes())
    remaining = np.tile(counts, (count, 1))
    letters_row = np.tile(np.arange(26, dtype=np.uint8), count)
    dtype = mask_dtype(width)
    full = dtype((1 << width) - 1)
    v = np.full(count, full, dtype=dtype)
    for start in range(0, m, PERMUTATION_BLOCK):
        size = min(PERMUTATION_BLOCK, m - start)
        take, left, rest = np.empty_like(remaining), np.full(count, size), remaining.sum(axis=1)
        for c in range(26):
            rest -= remaining[:, c]
            take[:, c] = rng.hypergeometric(remaining[:, c], rest, left) if c < 25 else left
            left -= take[:, c]
        remaining -= take
        block = rng.permuted(np.repeat(letters_row, take.ravel()).reshape(count, size), axis=1)
        _lcs_advance(v, np.ascontiguousarray(table[0][block].T), full)
    return width - np.bitwise_count(v).astype(np.int64)


def mask_dtype(width: int) -> type[np.unsignedinteger]:
    """The narrowest word that holds ``width`` bits plus the carry of ``v + u``: 32-bit words
    halve the memory traffic for the paper's 18-letter secrets.

    Args:
        width (`int`): the number of bits a mask must hold (the secret's length).
    """
    if not 0 < width <= 63:
        raise ValueError(f"secrets of 1 to 63 letters are supported, got {width}")
    return np.uint32 if width <= 31 else np.uint64


def secret_masks(codes: np.ndarray) -> np.ndarray:
    """``(R, k)`` letter codes -> ``(R, 26)`` position bitmasks.

    Args:
        codes (`np.ndarray`): ``(R, k)`` letter codes of ``R`` secrets of length ``k``.
    """
    masks = np.zeros((codes.shape[0], 26), dtype=np.uint64)
    rows = np.arange(codes.shape[0])
    for i in range(codes.shape[1]):
        masks[rows, codes[:, i]] |= np.uint64(1 << i)
    return masks


@lru_cache(maxsize=256)
def secret_table(secret: str) -> np.ndarray:
    """``(1, 26)`` position bitmasks of one secret, cached: a detector reuses its key."""
    return secret_masks(letter_codes(secret)[None, :]).astype(mask_dtype(len(secret)))


@lru_cache(maxsize=128)
def permutations(length: int, count: int) -> np.ndarray:
    """``count`` random orderings of ``range(length)``, drawn once per (length, count) and
    reused for every text: a permutation null only needs orderings independent of the text.
    :func:`permutation_null` uses them for short texts only, so the cache stays small."""
    rng = content_rng("permutations", length, count)
    return rng.permuted(np.tile(np.arange(length, dtype=np.int32), (count, 1)), axis=1)


@lru_cache(maxsize=64)
def null_secret_masks(length: int, pool: str, count: int) -> np.ndarray:
    """Masks of ``count`` random secrets, drawn once per (length, pool, count) and reused:
    the draws are independent of every text and key, which is all a Monte Carlo test needs."""
    draws = content_rng("null-secrets", length, pool, count).integers(0, len(pool), size=(count, length))
    masks = secret_masks(letter_codes(pool)[draws]).astype(mask_dtype(length))
    return np.ascontiguousarray(masks.T)  # (26, count): one row per letter


@lru_cache(maxsize=64)
def _padded_null_masks(length: int, pool: str, count: int) -> np.ndarray:
    """:func:`null_secret_masks` with a 27th all-zero row, the mask of padding past a text's end."""
    masks = null_secret_masks(length, pool, count)
    return np.vstack([masks, np.zeros((1, count), dtype=masks.dtype)])


@lru_cache(maxsize=128)
def _positions(length: int, count: int) -> np.ndarray:
    """:func:`permutations` transposed, ``(length, count)``: position ``j`` of every ordering is one row (as
    ``intp``, which ``np.take`` indexes with without a conversion per text)."""
    return np.ascontiguousarray(permutations(length, count).T, dtype=np.intp)


def letter_codes(letters: str) -> np.ndarray:
    """Upper-case ASCII letters -> codes 0-25 (``int64``).

    Args:
        letters (`str`): upper-case ASCII letters.
    """
    return np.frombuffer(letters.encode("ascii"), dtype=np.uint8).astype(np.int64) - 65


def lcs_alignment(secret: str, phi: str) -> set[int]:
    """Positions of ``phi`` used by one longest common subsequence with ``secret``.

    Args:
        secret (`str`): the SA secret ``S``.
        phi (`str`): the text's sentence initials ``Phi(y)``.
    """
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


def content_rng(*parts: Any) -> np.random.Generator:
    """A generator seeded by the content, so the same text and key always give the same result.

    Args:
        *parts: the values (texts, keys, sizes) whose ``repr`` seeds the generator.
    """
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))
