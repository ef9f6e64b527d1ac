"""evaluate metric icw_sa: verify texts against Sentence Acrostic (ICW) keys.

A thin wrapper over ``icw.verify.verify``: the numbers are those of ``icw detect``.
"""

import datasets
import evaluate

from icw.hub import verification_scores

_DESCRIPTION = """\
Sentence Acrostic (SA) in-context watermark verification. X = longest common subsequence of the key's secret and the sentence-initial letters. z uses 1,000 random permutations of those letters; the p-value is a Monte Carlo estimate over 9,999 random secrets (resolution 1e-4).
Returns per-text z-scores (the paper's statistic) and p-values, and summary figures.
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions (list of str): the texts to verify.
    keys (str or list of str): one serialized sa key (``icw:sa:...``) for all texts, or one per text.
    tokenizer (str or tokenizer, optional): the tokenizer the keys were built for; default: the one
        named in each key (``qwen3``, ``gpt2`` and ``smollm2`` work offline). Not needed for SA.
    alpha (float, optional): significance level for ``is_watermarked`` (default 0.01).
Returns:
    z_scores, p_values, is_watermarked, num_tokens_scored (one per text), and num_texts, mean_z,
    median_z, watermarked_fraction, alpha.
Example:
    >>> metric = evaluate.load("metrics/icw_sa")
    >>> metric.compute(predictions=["Some text."], keys="icw:sa:...")  # doctest: +SKIP
"""

_CITATION = """\
@article{liu2026icwsd,
  title={Learning to Follow In-Context Watermark Instructions via Self-Distillation},
  author={Liu, Yepeng and Chen, Tianyi and Zhao, Xuandong and Song, Dawn and Bu, Yuheng},
  year={2026}
}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class IcwSa(evaluate.Metric):
    """Sentence Acrostic verification as an evaluate metric."""

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
        return verification_scores("sa", predictions, keys, tokenizer=tokenizer, alpha=alpha)
