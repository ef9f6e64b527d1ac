"""evaluate metric icw_detection: detection quality (ROC-AUC, TPR at a fixed FPR) from detector scores.

A thin wrapper over ``icw.detection.detection_report`` (scikit-learn's ROC, percentile bootstrap).
"""

import datasets
import evaluate

from icw.hub import detection_scores

_DESCRIPTION = """\
Detection quality of a watermark detector: ROC-AUC and the true-positive rate at a fixed
false-positive rate (default 1%, the paper's TPR@1%FPR), each with a percentile bootstrap
confidence interval (watermarked and plain scores resampled separately).
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions (list of float): detector scores, larger = more likely watermarked (e.g. z-scores).
    references (list of int): 1 for watermarked texts, 0 for plain texts.
    fpr (float, optional): false-positive rate at which TPR is read (default 0.01).
    confidence (float, optional): confidence level of the intervals (default 0.95).
    num_bootstrap (int, optional): bootstrap replicates (default 1000).
    seed (int, optional): bootstrap seed (default 0).
Returns:
    roc_auc, roc_auc_ci, tpr_at_fpr, tpr_at_fpr_ci, fpr, confidence, num_positive, num_negative.
Example:
    >>> metric = evaluate.load("metrics/icw_detection")
    >>> metric.compute(predictions=[3.1, 2.5, 0.2, -0.4], references=[1, 1, 0, 0])["roc_auc"]  # doctest: +SKIP
    1.0
"""

_CITATION = """\
@article{liu2026icwsd,
  title={Learning to Follow In-Context Watermark Instructions via Self-Distillation},
  author={Liu, Yepeng and Chen, Tianyi and Zhao, Xuandong and Song, Dawn and Bu, Yuheng},
  year={2026}
}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class IcwDetection(evaluate.Metric):
    """ROC-AUC and TPR@FPR with bootstrap confidence intervals."""

    def _info(self):
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("float64"),
                                        "references": datasets.Value("int32")}),
            reference_urls=["https://scikit-learn.org/stable/modules/generated/sklearn.metrics.roc_auc_score.html"],
        )

    def _compute(self, predictions, references, fpr=0.01, confidence=0.95, num_bootstrap=1000, seed=0):
        return detection_scores(predictions, references, fpr=fpr, confidence=confidence,
                                num_bootstrap=num_bootstrap, seed=seed)
