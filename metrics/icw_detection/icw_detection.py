"""evaluate metric icw_detection: detection quality (ROC-AUC, TPR at a fixed FPR) from detector scores.

The implementation is ``icw.evaluate_metrics.DetectionMetric`` (scikit-learn's ROC, percentile bootstrap).
"""

# A module import, not `from ... import`: evaluate takes the first metric class it finds in this file.
import icw.evaluate_metrics


class IcwDetection(icw.evaluate_metrics.DetectionMetric):
    """The ``icw_detection`` metric: ROC-AUC and TPR at a fixed FPR, with bootstrap intervals."""
