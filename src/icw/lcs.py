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


def _lcs_advance(v: np.ndarray, columns: Any, full: np.unsignedinteger) -> None:
    """Run the bit-parallel LCS recurrence over ``columns`` (match masks, one per text position),
    updating the state vector ``v`` in place: a text can be fed in blocks."""
    u, w = np.empty_like(v), np.empty_like(v)
    for match in columns:  # v <- ((v + u) | (v - u)) & full with u = v & match, in place
        np.bitwise_and(v, match, out=u)
        np.add(v, u, out=w)
        np.subtract(v, u, out=v)
        np.bitwise_or(v, w, out=v)
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
