"""lm-evaluation-harness hooks of the ICWBench tasks (``!function hooks.*`` in the task YAML files).

This file is loaded by path by the harness, so it imports ``icw`` absolutely.

Documents. ``load_<family>`` reads one family of ICWBench (a folder written by ``icw bench build``,
or the Hub id when online; lm-eval's ``--metadata '{"dataset": ...}'`` picks it, the default is
:data:`icw.bench.dataset.ICWBENCH_ID`) and turns each row into two documents, in this order:

* ``positive``: the row's instruction + the query (``f"{instruction}\\n\\n{query}"``, as ``icw bench run``
  prompts in instruction mode);
* ``negative``: the query alone (a plain answer, the null the verifier is calibrated for).

So ``--limit 2k`` evaluates ``k`` whole rows. ``--metadata '{"negatives": false}'`` keeps only the
instructed prompts (half the generation; ``roc_auc``, ``tpr_at_fpr`` and the plain-answer
metrics are then NaN).

Scores. :func:`process_results` verifies each answer under the row's key with :func:`icw.verify`
(the family's statistic, its null and exact p-value method are those of :mod:`icw.verification`)
and the aggregations report, over the task's documents:

* ``mean_z`` / ``mean_z_plain``: mean z of instructed / plain answers;
* ``detection_rate`` / ``false_positive_rate``: fraction of instructed / plain answers whose
  exact p-value is below alpha = 0.01 (the verifier's verdict);
* ``roc_auc`` and ``tpr_at_fpr`` (TPR at 1% FPR): instructed vs plain answers ranked by z,
  through :func:`icw.detection.detection_report`. ``tpr_at_fpr`` is NaN (not estimable) with fewer
  plain answers than ``icw bench report`` requires
  (:data:`icw.bench.report.MIN_NEGATIVES_FOR_TPR_AT_1FPR`): below that, the 1% point of the plain
  answers is the largest of them, and the TPR read there says nothing about a 1% false-positive rate.
"""

from __future__ import annotations

import math
from typing import Any

from icw.verification import verify

#: Significance level of the per-answer verdict.
ALPHA = 0.01
#: The FPR at which ``tpr_at_fpr`` is read (as in ``icw bench report``).
FPR = 0.01


def load_icwbench(family: str, dataset: str | None = None, split: str = "test", negatives: bool = True,
                  **_: Any) -> dict[str, Any]:
    """One family of ICWBench as ``{"test": Dataset}`` of positive/negative prompt documents.

    Args:
        family: ``tsp``, ``wip`` or ``sa`` (the dataset's config name).
        dataset: a folder written by ``icw bench build`` or a Hub dataset id (default: ICWBench's id).
        split: the dataset split to evaluate (``test``).
        negatives: also prompt every query without the instruction (needed for AUC).
        **_: the rest of lm-eval's task metadata (model arguments, version), ignored.
    """
    import datasets

    from icw.bench.dataset import ICWBENCH_ID, load_config

    source = dataset or ICWBENCH_ID
    try:
        rows = load_config(source, family, split)  # a local folder is re-read, never taken from a stale cache
    except Exception as err:  # noqa: BLE001 - datasets raises many types; say what to pass instead
        raise ValueError(f"icwbench_{family}: cannot read config {family!r}, split {split!r} of {source!r} ({err}); "
                         "build the dataset offline with `icw bench build --out DIR` and pass "
                         "--metadata '{\"dataset\": \"DIR\"}'") from None
    missing = {"id", "key", "instruction", "query"} - set(rows.column_names)
    if missing:
        raise ValueError(f"icwbench_{family}: {source!r} lacks the ICWBench column(s) {sorted(missing)}")
    docs = []
    for row in rows:
        docs.append({"id": row["id"], "key": row["key"], "query": row["query"], "role": "positive",
                     "prompt": f"{row['instruction']}\n\n{row['query']}"})
        if negatives:
            docs.append({"id": row["id"], "key": row["key"], "query": row["query"], "role": "negative",
                         "prompt": row["query"]})
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)})


def load_tsp(**metadata: Any) -> dict[str, Any]:
    """``custom_dataset`` of ``icwbench_tsp``.

    Args:
        **metadata: the task's ``metadata`` from lm-eval (``dataset=``, ``split=``, ``negatives=``; see
            :func:`load_icwbench`).
    """
    return load_icwbench("tsp", **metadata)


def load_wip(**metadata: Any) -> dict[str, Any]:
    """``custom_dataset`` of ``icwbench_wip``.

    Args:
        **metadata: the task's ``metadata`` from lm-eval (``dataset=``, ``split=``, ``negatives=``; see
            :func:`load_icwbench`).
    """
    return load_icwbench("wip", **metadata)


def load_sa(**metadata: Any) -> dict[str, Any]:
    """``custom_dataset`` of ``icwbench_sa``.

    Args:
        **metadata: the task's ``metadata`` from lm-eval (``dataset=``, ``split=``, ``negatives=``; see
            :func:`load_icwbench`).
    """
    return load_icwbench("sa", **metadata)


def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, list[Any]]:
    """Verify one answer under its row's key; every metric gets ``[is_positive, z, p, verdict]``.

    Args:
        doc (`dict`): the task document (its ``key`` and ``role``).
        results (`list[str]`): the model's answer (one string).

    Example:
        >>> from icw import ICWKey
        >>> doc = {"key": ICWKey.create("sa", seed=1, secret="HELLO").to_string(), "role": "positive"}
        >>> item = process_results(doc, ["Here we go. Every day. Lots to do. Let us start. Over."])["mean_z"]
        >>> item[0], item[3]
        (True, True)
    """
    result = verify(results[0], doc["key"], alpha=ALPHA)
    item = [doc["role"] == "positive", float(result.z_score), float(result.p_value), bool(result.is_watermarked)]
    return {name: item for name in ("mean_z", "detection_rate", "mean_z_plain", "false_positive_rate",
                                    "roc_auc", "tpr_at_fpr")}


def _values(items: list[list[Any]], positive: bool, index: int) -> list[float]:
    return [float(item[index]) for item in items if bool(item[0]) is positive]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def mean_z(items: list[list[Any]]) -> float:
    """Mean z of the instructed answers.

    Args:
        items (`list[list]`): one ``[is_positive, z, p_value, verdict]`` per answer, as
            :func:`process_results` makes them.
    """
    return _mean(_values(items, True, 1))


def mean_z_plain(items: list[list[Any]]) -> float:
    """Mean z of the plain answers.

    Args:
        items (`list[list]`): one ``[is_positive, z, p_value, verdict]`` per answer, as
            :func:`process_results` makes them.
    """
    return _mean(_values(items, False, 1))


def detection_rate(items: list[list[Any]]) -> float:
    """Fraction of instructed answers detected at alpha = 0.01 (exact p-value).

    Args:
        items (`list[list]`): one ``[is_positive, z, p_value, verdict]`` per answer, as
            :func:`process_results` makes them.
    """
    return _mean(_values(items, True, 3))


def false_positive_rate(items: list[list[Any]]) -> float:
    """Fraction of plain answers flagged at alpha = 0.01 (expected at most 0.01 under the null).

    Args:
        items (`list[list]`): one ``[is_positive, z, p_value, verdict]`` per answer, as
            :func:`process_results` makes them.
    """
    return _mean(_values(items, False, 3))


def _detection(items: list[list[Any]]) -> Any:
    from icw.detection import detection_report

    pos, neg = _values(items, True, 1), _values(items, False, 1)
    if not pos or not neg:
        return None
    # point estimates only: an aggregation returns one number (icw bench report gives the intervals)
    return detection_report(pos, neg, fpr=FPR, num_bootstrap=1)


def roc_auc(items: list[list[Any]]) -> float:
    """ROC-AUC of instructed vs plain answers ranked by z.

    Args:
        items (`list[list]`): one ``[is_positive, z, p_value, verdict]`` per answer, as
            :func:`process_results` makes them.
    """
    report = _detection(items)
    return report.roc_auc if report else math.nan


def tpr_at_fpr(items: list[list[Any]]) -> float:
    """TPR of instructed answers at 1% FPR of plain answers (z threshold); NaN (not estimable) with fewer
    plain answers than ``icw bench report`` requires, so both tools say the same.

    Args:
        items (`list[list]`): one ``[is_positive, z, p_value, verdict]`` per answer, as
            :func:`process_results` makes them.
    """
    from icw.bench.report import MIN_NEGATIVES_FOR_TPR_AT_1FPR

    if len(_values(items, False, 1)) < MIN_NEGATIVES_FOR_TPR_AT_1FPR:
        return math.nan
    report = _detection(items)
    return report.tpr_at_fpr if report else math.nan
