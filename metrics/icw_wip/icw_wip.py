"""evaluate metric icw_wip: verify texts against Word-Initial Preference (ICW) keys.

A thin wrapper over ``icw.verify.verify``: the numbers are those of ``icw detect``.
"""

import datasets
import evaluate

from icw.hub import verification_scores

_DESCRIPTION = """\
Word-Initial Preference (WIP) in-context watermark verification. X = number of distinct word-initial tokens whose first letter is one of the key's green letters L; n = distinct word-initial tokens; p0 = vocabulary share of L. The exact p-value is computed over all random |L|-letter keys.
Returns per-text z-scores (the paper's statistic) and p-values, and summary figures.
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions (list of str): the texts to verify.
    keys (str or list of str): one serialized wip key (``icw:wip:...``) for all texts, or one per text.
    tokenizer (str or tokenizer, optional): the tokenizer the keys were built for; default: the one
        named in each key (``qwen3``, ``gpt2`` and ``smollm2`` work offline).
    alpha (float, optional): significance level for ``is_watermarked`` (default 0.01).
Returns:
    z_scores, p_values, is_watermarked, num_tokens_scored (one per text), and num_texts, mean_z,
    median_z, watermarked_fraction, alpha.
Example:
    >>> metric = evaluate.load("metrics/icw_wip")
    >>> metric.compute(predictions=["Some text."], keys="icw:wip:...")  # doctest: +SKIP
"""

_CITATION = """\
@article{liu2026icwsd,
  title={Learning to Follow In-Context Watermark Instructions via Self-Distillation},
  author={Liu, Yepeng and Chen, Tianyi and Zhao, Xuandong and Song, Dawn and Bu, Yuheng},
  year={2026}
}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class IcwWip(evaluate.Metric):
    """Word-Initial Preference verification as an evaluate metric."""

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
        return verification_scores("wip", predictions, keys, tokenizer=tokenizer, alpha=alpha)
