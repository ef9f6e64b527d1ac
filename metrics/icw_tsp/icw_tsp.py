"""evaluate metric icw_tsp: verify texts against Token-Set Preference (ICW) keys.

A thin wrapper over ``icw.verify.verify``: the numbers are those of ``icw detect``.
"""

import datasets
import evaluate

from icw.hub import verification_scores

_DESCRIPTION = """\
Token-Set Preference (TSP) in-context watermark verification. X = number of distinct tokens of the text (within the candidate pool P) that are in the key's green set T; n = distinct pool tokens; p0 = gamma. The exact p-value is hypergeometric: T is a uniform random subset of P.
Returns per-text z-scores (the paper's statistic) and p-values, and summary figures.
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions (list of str): the texts to verify.
    keys (str or list of str): one serialized tsp key (``icw:tsp:...``) for all texts, or one per text.
    tokenizer (str or tokenizer, optional): the tokenizer the keys were built for; default: the one
        named in each key (``qwen3``, ``gpt2`` and ``smollm2`` work offline).
    alpha (float, optional): significance level for ``is_watermarked`` (default 0.01).
Returns:
    z_scores, p_values, is_watermarked, num_tokens_scored (one per text), and num_texts, mean_z,
    median_z, watermarked_fraction, alpha.
Example:
    >>> metric = evaluate.load("metrics/icw_tsp")
    >>> metric.compute(predictions=["Some text."], keys="icw:tsp:...")  # doctest: +SKIP
"""

_CITATION = """\
@article{liu2026icwsd,
  title={Learning to Follow In-Context Watermark Instructions via Self-Distillation},
  author={Liu, Yepeng and Chen, Tianyi and Zhao, Xuandong and Song, Dawn and Bu, Yuheng},
  year={2026}
}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class IcwTsp(evaluate.Metric):
    """Token-Set Preference verification as an evaluate metric."""

    def _info(self):
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("string")}),
            reference_urls=["https://huggingface.co/datasets/vblagoje/lfqa"],
        )

    def _compute(self, predictions, keys=None, tokenizer=None, alpha=0.01):
        return verification_scores("tsp", predictions, keys, tokenizer=tokenizer, alpha=alpha)
