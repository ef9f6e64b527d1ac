"""The ``evaluate`` metric classes behind ``metrics/icw_*``.

The names and folders (``METRICS``, ``metric_path``) live in :mod:`icw.metric_paths`.
Each metric folder holds a two-line script that subclasses one of these, so the four metrics
share one implementation, and a Space published from a folder still runs once ``icw`` is
installed. The numbers are those of :func:`icw.verification.verify` and
:func:`icw.detection.detection_report`.

Example:
    >>> import evaluate
    >>> from icw.evaluate_metrics import metric_path
    >>> metric = evaluate.load(metric_path("icw_sa"))  # doctest: +SKIP
    >>> metric.compute(predictions=["Some text."], keys="icw:sa:seed=1,length=18")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import datasets
import evaluate
import numpy as np

from .citation import BIBTEX
from .keys import FAMILY_NAMES, as_keys, check_family
from .metric_paths import METRICS, metric_path  # re-exported; their home is light (no evaluate)
from .verification import DEFAULT_ALPHA, DEFAULT_NULL_KEYS, DEFAULT_PERMUTATIONS, NULL_HYPOTHESES, STATISTICS


def verification_scores(family: str, predictions: Sequence[str], keys: Any, tokenizer: Any = None,
                        alpha: float = DEFAULT_ALPHA) -> dict[str, Any]:
    """Verify ``predictions`` against ``keys`` of one family: per-text z and p plus a summary.

    ``keys`` is one key (``ICWKey`` or its string) shared by all texts, or one per text.
    ``tokenizer`` is a tokenizer object or name; by default the one named in each key.
    Returns per-text ``z_scores``, ``p_values``, ``is_watermarked``, ``num_tokens_scored`` and the
    summary ``num_texts``, ``mean_z``, ``median_z``, ``watermarked_fraction`` (share with
    ``p_value <= alpha``).

    Args:
        family (`str`): ``"tsp"``, ``"wip"`` or ``"sa"``; every key must be of it.
        predictions (`Sequence[str]`): the texts to verify.
        keys: one key (``ICWKey`` or its string) for all texts, or one per text.
        tokenizer (*optional*): a tokenizer object or name (``None``: the one named in each key).
        alpha (`float`, defaults to 0.01): significance level of ``is_watermarked`` (``p_value <= alpha``).
    """
    from .verification import verify

    family = check_family(family)
    if keys is None:
        raise ValueError(f"icw_{family} needs keys=...: one key string for all texts, or one per text")
    if isinstance(predictions, str):
        raise TypeError("predictions must be a list of strings, not one string")
    predictions = list(predictions)
    if not predictions:
        raise ValueError("predictions is empty: pass at least one text")
    for i, text in enumerate(predictions):
        if not isinstance(text, str):
            raise TypeError(f"prediction {i} is a {type(text).__name__}, not a str")
    key_list = as_keys(keys, len(predictions))
    for i, key in enumerate(key_list):
        if key.family != family:
            raise ValueError(f"key {i} is a {key.family} key but this is the icw_{family} metric: "
                             f"use the icw_{key.family} metric for it")
    results = verify(predictions, key_list, tokenizer, alpha=alpha)
    z = np.array([r.z_score for r in results], dtype=np.float64)
    flagged = [r.is_watermarked for r in results]
    return {
        "z_scores": z.tolist(),
        "p_values": [r.p_value for r in results],
        "is_watermarked": flagged,
        "num_tokens_scored": [r.num_tokens_scored for r in results],
        "num_texts": len(results),
        "mean_z": float(z.mean()),
        "median_z": float(np.median(z)),
        "watermarked_fraction": float(np.mean(flagged)),
        "alpha": alpha,
    }


def detection_scores(predictions: Sequence[float], references: Sequence[int], fpr: float = 0.01,
                     confidence: float = 0.95, num_bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """ROC-AUC and TPR at ``fpr`` from detector scores (``predictions``) and labels
    (``references``: 1 watermarked, 0 plain), with bootstrap intervals
    (:func:`icw.detection.detection_report`).

    Args:
        predictions (`Sequence[float]`): detector scores, higher meaning more likely watermarked.
        references (`Sequence[int]`): labels: 1 watermarked, 0 plain.
        fpr (`float`, defaults to 0.01): the false-positive rate TPR is read at.
        confidence (`float`, defaults to 0.95): the bootstrap intervals' confidence level.
        num_bootstrap (`int`, defaults to 1000): bootstrap replicates.
        seed (`int`, defaults to 0): seed of the bootstrap.
    """
    from .detection import detection_report

    scores = np.asarray(list(predictions), dtype=np.float64)
    labels = np.asarray(list(references))
    if scores.shape != labels.shape or scores.ndim != 1:
        raise ValueError(f"predictions and references must be two flat lists of equal length, "
                         f"got {scores.shape} and {labels.shape}")
    if not np.isin(labels, (0, 1)).all():
        raise ValueError("references must be 0 (plain text) or 1 (watermarked text)")
    report = detection_report(scores[labels == 1], scores[labels == 0], fpr=fpr, confidence=confidence,
                              num_bootstrap=num_bootstrap, seed=seed)
    return {
        "roc_auc": report.roc_auc,
        "roc_auc_ci": list(report.roc_auc_ci),
        "tpr_at_fpr": report.tpr_at_fpr,
        "tpr_at_fpr_ci": list(report.tpr_at_fpr_ci),
        "fpr": report.fpr,
        "confidence": report.confidence,
        "num_positive": report.num_positive,
        "num_negative": report.num_negative,
    }


# evaluate casts inputs to the metric's Features in add_batch/add, before _compute sees them: a bare
# string becomes a list of characters and 1.9 becomes the int32 label 1. Check the raw inputs first.
def check_texts(predictions: Any) -> None:
    """Refuse what ``evaluate`` would silently reshape into texts (a bare string, non-strings).

    Args:
        predictions: what the caller passed as texts.
    """
    if isinstance(predictions, (str, bytes)):
        raise TypeError(f"predictions must be a list of texts, got one {type(predictions).__name__} "
                        f"({len(predictions)} characters), which evaluate would verify character by character: "
                        "pass predictions=[text]")
    for i, text in enumerate(_as_list(predictions, "predictions")):
        if not isinstance(text, str):
            raise TypeError(f"prediction {i} is a {type(text).__name__}, not a str")


def check_scores_and_labels(predictions: Any, references: Any) -> None:
    """Refuse detector scores that are not finite numbers and labels other than exactly 0 or 1
    (``evaluate`` would truncate a label of 1.9 to 1 and a score string would be parsed).

    Args:
        predictions: what the caller passed as scores.
        references: what the caller passed as labels.
    """
    scores, labels = _as_list(predictions, "predictions"), _as_list(references, "references")
    if len(scores) != len(labels):
        raise ValueError(f"got {len(scores)} predictions but {len(labels)} references: pass one label per score")
    for i, score in enumerate(scores):
        if isinstance(score, (bool, np.bool_)) or not isinstance(score, (int, float, np.number)) \
                or not np.isfinite(score):
            raise ValueError(f"prediction {i} must be a finite number (a detector score such as z), got {score!r:.40}")
    for i, label in enumerate(labels):
        if isinstance(label, (str, bytes)) or not isinstance(label, (int, float, np.number)) or label not in (0, 1):
            raise ValueError(f"reference {i} must be 0 (plain text) or 1 (watermarked text), got {label!r:.40}")


def _as_list(values: Any, name: str) -> list[Any]:
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a list, got {type(values).__name__}")
    return list(values.tolist() if hasattr(values, "tolist") else values)


CITATION = BIBTEX + "\n"

_P_VALUES = {
    "tsp": "exact, hypergeometric",
    "wip": "exact, over all random keys with the same number of letters",
    "sa": f"Monte Carlo over {DEFAULT_NULL_KEYS:,} random secrets (resolution {1 / (DEFAULT_NULL_KEYS + 1):.0e}); "
          f"z uses {DEFAULT_PERMUTATIONS:,} random permutations of the sentence-initial letters",
}

_VERIFICATION_KWARGS = """\
Args:
    predictions (list of str): the texts to verify.
    keys (str or list of str): one serialized {family} key (``icw:{family}:...``) for all texts, or one per text.
    tokenizer (str or tokenizer, optional): the tokenizer the keys were built for; default: the one
        named in each key (``qwen3``, ``gpt2`` and ``smollm2`` work offline). SA needs none.
    alpha (float, optional): significance level for ``is_watermarked`` (default 0.01).
Returns:
    z_scores, p_values, is_watermarked, num_tokens_scored (one per text), and num_texts, mean_z,
    median_z, watermarked_fraction, alpha.
"""

_DETECTION_DESCRIPTION = """\
Detection quality of a watermark detector: ROC-AUC and the true-positive rate at a fixed
false-positive rate (default 1%, the paper's TPR@1%FPR), each with a percentile bootstrap
confidence interval (watermarked and plain scores resampled separately).
"""

_DETECTION_KWARGS = """\
Args:
    predictions (list of float): detector scores, larger = more likely watermarked (e.g. z-scores).
    references (list of int): 1 for watermarked texts, 0 for plain texts.
    fpr (float, optional): false-positive rate at which TPR is read (default 0.01).
    confidence (float, optional): confidence level of the intervals (default 0.95).
    num_bootstrap (int, optional): bootstrap replicates (default 1000).
    seed (int, optional): bootstrap seed (default 0).
Returns:
    roc_auc, roc_auc_ci, tpr_at_fpr, tpr_at_fpr_ci, fpr, confidence, num_positive, num_negative.
"""


def _verification_description(family: str) -> str:
    return (f"{FAMILY_NAMES[family]} ({family.upper()}) in-context watermark verification. "
            f"Statistic: {STATISTICS[family]}. Null hypothesis: {NULL_HYPOTHESES[family]}. "
            f"p-value: {_P_VALUES[family]}. Returns per-text z-scores (the paper's statistic) and "
            "p-values, and summary figures.\n")


class VerificationMetric(evaluate.Metric):
    """Verify texts against ICW keys of one family (set ``family`` in the subclass)."""

    family: ClassVar[str]

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            module_type="metric",
            description=_verification_description(self.family),
            citation=CITATION,
            inputs_description=_VERIFICATION_KWARGS.format(family=self.family),
            features=datasets.Features({"predictions": datasets.Value("string")}),
            reference_urls=["https://huggingface.co/datasets/vblagoje/lfqa"],
        )

    def add_batch(self, *, predictions: Any = None, references: Any = None, **kwargs: Any) -> None:
        """Add texts (checked before evaluate casts them). evaluate appends the inputs description here."""
        check_texts(predictions)
        super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction: Any = None, reference: Any = None, **kwargs: Any) -> None:
        """Add one text (checked before evaluate casts it)."""
        check_texts([prediction])
        super().add(prediction=prediction, reference=reference, **kwargs)

    def _compute(self, predictions: list[str], keys: Any = None, tokenizer: Any = None,
                 alpha: float = DEFAULT_ALPHA) -> dict[str, Any]:
        return verification_scores(self.family, predictions, keys, tokenizer=tokenizer, alpha=alpha)


class DetectionMetric(evaluate.Metric):
    """ROC-AUC and TPR@FPR with bootstrap confidence intervals."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DETECTION_DESCRIPTION,
            citation=CITATION,
            inputs_description=_DETECTION_KWARGS,
            features=datasets.Features({"predictions": datasets.Value("float64"),
                                        "references": datasets.Value("int32")}),
            reference_urls=["https://scikit-learn.org/stable/modules/generated/sklearn.metrics.roc_auc_score.html"],
        )

    def add_batch(self, *, predictions: Any = None, references: Any = None, **kwargs: Any) -> None:
        """Add scores and 0/1 labels (checked before evaluate casts them). evaluate appends the inputs description here."""
        check_scores_and_labels(predictions, references)
        super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction: Any = None, reference: Any = None, **kwargs: Any) -> None:
        """Add one score and its 0/1 label (checked before evaluate casts them)."""
        check_scores_and_labels([prediction], [reference])
        super().add(prediction=prediction, reference=reference, **kwargs)

    def _compute(self, predictions: list[float], references: list[int], fpr: float = 0.01,
                 confidence: float = 0.95, num_bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
        return detection_scores(predictions, references, fpr=fpr, confidence=confidence,
                                num_bootstrap=num_bootstrap, seed=seed)


def install_metrics(modules_cache: str | Path | None = None) -> dict[str, str]:
    """Register the bundled metrics so ``evaluate.load("icw_tsp")`` works by the bare name, offline.

    ``evaluate.load(name)`` with no ``/`` looks for ``evaluate-metric/<name>`` on the Hub and, when
    that fails (offline, or no such Hub repo), for a cached copy under
    ``$HF_MODULES_CACHE/evaluate_modules/metrics/evaluate-metric--<name>/<hash>/``. This writes that
    copy with ``evaluate``'s own module writer, so the layout is exactly what it reads back; stale
    copies of earlier versions are removed. Run once after installing (``icw install-metrics``, which
    ``scripts/setup.sh`` calls); ``import icw`` never writes here.

    Args:
        modules_cache: the ``HF_MODULES_CACHE`` folder (default: evaluate's, ``~/.cache/huggingface/modules``).

    Returns:
        ``{metric name: folder of the registered script}``.

    Example:
        >>> from icw.evaluate_metrics import install_metrics
        >>> paths = install_metrics()  # doctest: +SKIP
        >>> evaluate.load("icw_tsp").compute(predictions=["..."], keys="icw:tsp:...")  # doctest: +SKIP
    """
    import shutil

    from datasets import DownloadMode
    from evaluate.loading import _create_importable_file, init_dynamic_modules

    dynamic_modules = init_dynamic_modules(hf_modules_cache=modules_cache)
    installed: dict[str, str] = {}
    for name in METRICS:
        script = Path(metric_path(name)) / f"{name}.py"
        # named as the Hub factory names a canonical module: folder evaluate-metric--NAME, file NAME.py
        _, digest = _create_importable_file(
            local_path=str(script), local_imports=[], additional_files=[], dynamic_modules_path=dynamic_modules,
            module_namespace="metrics", name=f"evaluate-metric/{name}", download_mode=DownloadMode.FORCE_REDOWNLOAD,
        )
        folder = Path(dynamic_modules) / "metrics" / f"evaluate-metric--{name}"
        for old in folder.iterdir():
            if old.is_dir() and len(old.name) == 64 and old.name != digest:
                shutil.rmtree(old, ignore_errors=True)  # evaluate would pick the newest anyway; keep one
        installed[name] = str(folder / digest)
    return installed
