"""Many keys per text: :func:`verify_keys` scores every text against ``K`` keys of one family at once
and reports which keys fire, with Holm's family-wise error control (e.g. a platform that hands each
user their own key). Each p-value is the one :func:`icw.verify` gives for that key alone."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .keys import SA_POOL, ICWKey, as_keys, scored_mask
from .lcs import lcs_lengths, letter_codes, mask_dtype, null_secret_masks, permutations, secret_masks
from .text import sentence_initial_spans
from .verification import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_CHARS,
    DEFAULT_NULL_KEYS,
    DEFAULT_PERMUTATIONS,
    STATISTICS,
    _check_texts,
    _resolve_view,
    hypergeom_tails,
    verify,
)
from .vocab import ALPHABET, VocabularyView
from .wip import _subset_sums, wip_letter_scores

__all__ = ["MultiKeyResult", "holm_adjust", "verify", "verify_keys"]

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

    Args:
        family (`str`): the family shared by all keys.
        keys (`list[str]`): the ``K`` key strings, in input order.
        z_scores (`np.ndarray`): ``(K,)`` the paper's z for each key.
        p_values (`np.ndarray`): ``(K,)`` each key's unadjusted p-value.
        adjusted_p_values (`np.ndarray`): ``(K,)`` Holm-adjusted p-values.
        fired (`list[int]`): indices of the keys whose adjusted p-value is at most ``alpha``.
        alpha (`float`): the family-wise error rate.
        num_tokens_scored (`int`): units scored in the text (shared by all keys of a TSP/WIP tokenizer).
        p_value_method (`str`): how each key's p-value was computed.
        statistic (`str`): what each key's ``X`` counts, in words.
        null_hypothesis (`str`, *optional*): the family-wise null, in words.
        correction (`str`, *optional*): the multiple-testing correction, in words.
        note (`str`, *optional*): a caveat about this result, if any.
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

    Args:
        p_values (`np.ndarray`): ``(K,)`` unadjusted p-values, in any order.

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
    raw = _raw("tsp", key.seed, len(pool), key.draw)
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
    phis = [letter_codes("".join(letter for _, letter in sentence_initial_spans(text))) for text in texts]
    lengths = np.array([len(s) for s in secrets])
    for length in map(int, np.unique(lengths)):  # the null depends on the secret's length: one per length
        cols = np.flatnonzero(lengths == length)
        masks = secret_masks(np.stack([letter_codes(secrets[k]) for k in cols])).astype(mask_dtype(length))
        null_masks = null_secret_masks(length, pool, num_null_keys).T
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
            perms = codes[permutations(m, num_permutations)]
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
