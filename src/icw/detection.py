"""Detection quality from verifier scores: ROC-AUC and TPR at a fixed FPR, with bootstrap
confidence intervals. The one implementation behind ICWBench scoring and the
``icw_detection`` evaluate metric.

Scores are z-scores (or any statistic where larger means "watermarked"); labels are 1 for
watermarked (positive) and 0 for plain (negative) texts.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve


def tpr_at_fpr(labels: np.ndarray, scores: np.ndarray, fpr: float = 0.01) -> float:
    """Largest TPR whose empirical FPR (on the negatives) does not exceed ``fpr``.

    Args:
        labels (`np.ndarray`): 1 for positives (watermarked), 0 for negatives.
        scores (`np.ndarray`): detection scores, higher meaning more likely watermarked.
        fpr (`float`, defaults to 0.01): the largest empirical false-positive rate allowed.
    """
    # keep every threshold: with tied (e.g. discrete SA) scores, dropped collinear points would understate TPR
    fprs, tprs, _ = roc_curve(labels, scores, drop_intermediate=False)
    return float(tprs[fprs <= fpr + 1e-12].max())


#: Names used before the one vocabulary (``roc_auc``, ``roc_auc_ci``, ``tpr_at_fpr``, ``tpr_at_fpr_ci``):
#: accepted with a DeprecationWarning when reading old ``results.json`` files, for one release.
RENAMED_FIELDS = {"auc": "roc_auc", "auc_ci": "roc_auc_ci", "tpr_at_1fpr": "tpr_at_fpr", "tpr_ci": "tpr_at_fpr_ci"}


def upgrade_summary(summary: dict[str, Any], where: str = "results") -> dict[str, Any]:
    """A copy of a detection summary with old field names (``auc``, ``tpr_at_1fpr``, ...) renamed.

    Args:
        summary (`dict`): a detection summary, possibly with old field names.
        where (`str`, defaults to ``"results"``): names the source in the deprecation warning.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     upgrade_summary({"auc": 0.9, "tpr_at_1fpr": 0.5})
        {'roc_auc': 0.9, 'tpr_at_fpr': 0.5}
    """
    old = [k for k in summary if k in RENAMED_FIELDS and RENAMED_FIELDS[k] not in summary]
    if not old:
        return summary
    warnings.warn(f"{where} use the old field names {old}; read as "
                  f"{[RENAMED_FIELDS[k] for k in old]} (write them with the current icw bench report)",
                  DeprecationWarning, stacklevel=3)
    return {RENAMED_FIELDS.get(k, k) if k in old else k: v for k, v in summary.items()}


def _deprecated_alias(old: str, new: str) -> property:
    def get(self: Any) -> Any:
        warnings.warn(f"DetectionReport.{old} is deprecated: use .{new}", DeprecationWarning, stacklevel=2)
        return getattr(self, new)

    return property(get, doc=f"Deprecated alias of :attr:`{new}` (one release).")


@dataclass
class DetectionReport:
    """Detection quality of a score: ROC-AUC and TPR at a fixed FPR with bootstrap intervals.

    Args:
        roc_auc (`float`): area under the ROC curve (positives vs negatives).
        roc_auc_ci (`tuple[float, float]`): its percentile bootstrap interval.
        tpr_at_fpr (`float`): the largest TPR whose empirical FPR is at most ``fpr``.
        tpr_at_fpr_ci (`tuple[float, float]`): its percentile bootstrap interval.
        fpr (`float`): the false-positive rate ``tpr_at_fpr`` is read at.
        num_positive, num_negative (`int`): class sizes.
        confidence (`float`): the intervals' confidence level.
        num_bootstrap (`int`): bootstrap replicates.
    """

    roc_auc: float
    roc_auc_ci: tuple[float, float]
    tpr_at_fpr: float
    tpr_at_fpr_ci: tuple[float, float]
    fpr: float
    num_positive: int
    num_negative: int
    confidence: float
    num_bootstrap: int

    def to_dict(self) -> dict:
        return asdict(self)

    auc = _deprecated_alias("auc", "roc_auc")
    auc_ci = _deprecated_alias("auc_ci", "roc_auc_ci")
    tpr = _deprecated_alias("tpr", "tpr_at_fpr")
    tpr_ci = _deprecated_alias("tpr_ci", "tpr_at_fpr_ci")


def detection_report(positive_scores, negative_scores, fpr: float = 0.01, confidence: float = 0.95,
                     num_bootstrap: int = 1000, seed: int = 0) -> DetectionReport:
    """ROC-AUC and TPR@``fpr`` with percentile bootstrap intervals (positives and negatives
    resampled separately, so each replicate keeps both classes).

    Args:
        positive_scores: scores of watermarked texts.
        negative_scores: scores of unwatermarked texts.
        fpr (`float`, defaults to 0.01): the false-positive rate TPR is read at.
        confidence (`float`, defaults to 0.95): the bootstrap intervals' confidence level.
        num_bootstrap (`int`, defaults to 1000): bootstrap replicates (each class resampled separately).
        seed (`int`, defaults to 0): seed of the bootstrap.
    """
    pos = np.asarray(positive_scores, dtype=np.float64).ravel()
    neg = np.asarray(negative_scores, dtype=np.float64).ravel()
    if len(pos) == 0 or len(neg) == 0:
        raise ValueError(f"need at least one positive and one negative score, got {len(pos)} and {len(neg)}")
    if not (np.isfinite(pos).all() and np.isfinite(neg).all()):
        raise ValueError("scores must be finite numbers")
    if isinstance(num_bootstrap, bool) or not isinstance(num_bootstrap, (int, np.integer)) or num_bootstrap < 1:
        raise ValueError(f"num_bootstrap must be a whole number >= 1 (e.g. 1000), got {num_bootstrap!r}")
    if not 0.0 < fpr < 1.0 or not 0.0 < confidence < 1.0:
        raise ValueError("fpr and confidence must lie strictly between 0 and 1")

    def stats(p: np.ndarray, n: np.ndarray) -> tuple[float, float]:
        labels = np.r_[np.ones(len(p)), np.zeros(len(n))]
        scores = np.r_[p, n]
        return float(roc_auc_score(labels, scores)), tpr_at_fpr(labels, scores, fpr)

    auc, tpr = stats(pos, neg)
    rng = np.random.default_rng(seed)
    boot = np.array([stats(rng.choice(pos, len(pos)), rng.choice(neg, len(neg))) for _ in range(num_bootstrap)])
    lo, hi = (1 - confidence) / 2 * 100, (1 + confidence) / 2 * 100
    auc_ci = tuple(float(v) for v in np.percentile(boot[:, 0], [lo, hi]))
    tpr_ci = tuple(float(v) for v in np.percentile(boot[:, 1], [lo, hi]))
    return DetectionReport(auc, auc_ci, tpr, tpr_ci, fpr, len(pos), len(neg), confidence, num_bootstrap)
