"""Detectability scoring for ICWBench: the verifiers' z and exact p for every response, and
per-family ROC-AUC / TPR at a fixed FPR (1% by default) with bootstrap intervals through :mod:`icw.detection`.

Nothing here re-implements a statistic: texts go through :func:`icw.verification.verify`, paired
positive/negative scores through :func:`icw.detection.detection_report`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..detection import detection_report
from ..keys import ICWKey, as_key
from ..models import load_tokenizer
from ..verification import verify


def key_tokenizer(key: ICWKey, tokenizers: dict[str, Any] | None = None) -> Any:
    """The tokenizer a TSP/WIP key was built for (None for SA), loaded once per name.

    Args:
        key (`ICWKey`): the key.
        tokenizers (`dict`, *optional*): a cache of loaded tokenizers by name, filled as they load.
    """
    if key.family == "sa":
        return None
    tokenizers = {} if tokenizers is None else tokenizers
    if key.tokenizer not in tokenizers:
        tokenizers[key.tokenizer] = load_tokenizer(key.tokenizer)
    return tokenizers[key.tokenizer]


def score_texts(texts: Sequence[str], keys: Sequence[ICWKey | str], tokenizers: dict[str, Any] | None = None,
                **verify_kwargs: Any) -> list[dict[str, Any]]:
    """Verify each text under its own key: :func:`icw.verify` as JSON-ready rows.

    :func:`icw.verify` already loads each key's tokenizer once and batches the texts per tokenizer
    and family; this only flattens its results to ``{z_score, p_value, is_watermarked,
    num_tokens_scored, p_value_method}`` rows for the result store.

    Args:
        texts (`Sequence[str]`): the responses.
        keys (`Sequence[ICWKey | str]`): one key per text (families and tokenizers may be mixed).
        tokenizers (`dict`, *optional*): deprecated and ignored (tokenizers are cached by
            :func:`icw.models.load_tokenizer`).
        **verify_kwargs: passed to :func:`icw.verify` (``alpha``, ``num_permutations``, ...).

    Example:
        >>> from icw import ICWKey
        >>> score_texts(["Apples are good. Bananas too."], [ICWKey.create("sa", seed=1)])[0]["num_tokens_scored"]
        2
    """
    if tokenizers:
        warnings.warn("score_texts(tokenizers=...) is deprecated and ignored: verify loads each key's tokenizer once",
                      DeprecationWarning, stacklevel=2)
    keys = [as_key(k) for k in keys]
    if len(keys) != len(texts):
        raise ValueError(f"got {len(texts)} texts and {len(keys)} keys: pass one key per text")
    if not texts:
        return []
    return [{"z_score": float(r.z_score), "p_value": float(r.p_value), "is_watermarked": bool(r.is_watermarked),
             "num_tokens_scored": int(r.num_tokens_scored), "p_value_method": r.p_value_method}
            for r in verify(list(texts), keys, **verify_kwargs)]


def paired_scores(records: Iterable[dict[str, Any]], family: str, attack: str = "none"
                  ) -> tuple[list[float], list[float]]:
    """Positive z-scores (under ``attack``) and negative z-scores (always unattacked) of one family.

    Only queries with both a scored positive and a scored negative enter, so each family's
    AUC compares like with like.

    Args:
        records: the run's scored records.
        family (`str`): the family.
        attack (`str`, defaults to ``"none"``): the attack applied to the positives (``"none"``:
            unattacked).
    """
    pos: dict[str, float] = {}
    neg: dict[str, float] = {}
    for r in records:
        if r.get("family") != family or r.get("z_score") is None:
            continue
        if r["role"] == "positive" and r.get("attack", "none") == attack:
            pos[r["id"]] = r["z_score"]
        elif r["role"] == "negative" and r.get("attack", "none") == "none":
            neg[r["id"]] = r["z_score"]
    ids = sorted(set(pos) & set(neg))
    return [pos[i] for i in ids], [neg[i] for i in ids]


def detection_summary(pos: Sequence[float], neg: Sequence[float], fpr: float = 0.01,
                      num_bootstrap: int = 1000) -> dict[str, Any] | None:
    """ROC-AUC, TPR@``fpr`` and their bootstrap intervals, mean z of each class (None if a class is empty).

    The fields are :class:`icw.detection.DetectionReport`'s names: ``roc_auc``, ``roc_auc_ci``,
    ``tpr_at_fpr``, ``tpr_at_fpr_ci`` and ``fpr`` (the rate TPR is read at).

    Args:
        pos (`Sequence[float]`): z-scores of watermarked texts.
        neg (`Sequence[float]`): z-scores of unwatermarked texts.
        fpr (`float`, defaults to 0.01): the false-positive rate TPR is read at.
        num_bootstrap (`int`, defaults to 1000): bootstrap replicates.
    """
    if not pos or not neg:
        return None
    report = detection_report(pos, neg, fpr=fpr, num_bootstrap=num_bootstrap)
    return {"num_positive": len(pos), "num_negative": len(neg), "roc_auc": report.roc_auc,
            "roc_auc_ci": list(report.roc_auc_ci), "tpr_at_fpr": report.tpr_at_fpr,
            "tpr_at_fpr_ci": list(report.tpr_at_fpr_ci), "fpr": report.fpr,
            "mean_z_positive": float(np.mean(pos)), "mean_z_negative": float(np.mean(neg))}
