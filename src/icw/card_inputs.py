"""What a model card is made from, read and checked before anything is rendered: the ``results.json`` of
``icw bench report`` and the ``stages.json`` of ``icw bench compare``. A malformed field is one clear error naming
the file and the field, never a traceback from inside the template."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .detection import upgrade_summary
from .jsonl import read_json_object
from .keys import check_family


def load_results(results: dict | str | Path) -> dict[str, Any]:
    """ICWBench results (or the path of their ``results.json``), checked, old field names read as current ones.

    Args:
        results (`dict`, `str` or `Path`): the object ``icw bench report`` writes, or its ``results.json``.

    Raises:
        ValueError: the results lack a field the card reads, or a field has the wrong type.
    """
    where = "results"
    if isinstance(results, (str, Path)):
        where = str(results)
        results = read_json_object(results, "pass the results.json of icw bench report")
    if not isinstance(results, dict) or not isinstance(results.get("families"), dict) or not results["families"]:
        raise ValueError(f"{where}: expected an object with a non-empty 'families' mapping (icw bench report output)")
    for family, stats in results["families"].items():
        check_family(family)
        check_stats(stats, f"{where}: families.{family}")
    results = {**results, "families": {f: _upgrade(s) for f, s in results["families"].items()}}
    if not results.get("model") or not isinstance(results["model"], str):
        raise ValueError(f"{where}: needs a string 'model' field naming the evaluated model")
    return results


def check_stats(stats: Any, where: str) -> None:
    """The fields the card reads, with their types: numbers (or null), intervals, judge scores, attacks.

    Args:
        stats (`Any`): one family's statistics.
        where (`str`): where they sit, named in the error.

    Raises:
        ValueError: a field has the wrong type.
    """
    def number(value: Any, name: str) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"{where}.{name} must be a number or null, got {value!r:.60}")

    if not isinstance(stats, dict):
        raise ValueError(f"{where} must be an object of statistics, got {type(stats).__name__}")
    for name in ("roc_auc", "auc", "tpr_at_fpr", "tpr_at_1fpr", "fpr", "ppl", "num_positive", "num_negative"):
        number(stats.get(name), name)
    for name in ("roc_auc_ci", "auc_ci", "tpr_at_fpr_ci", "tpr_ci"):
        ci = stats.get(name)
        if ci is not None and not (isinstance(ci, list) and len(ci) == 2):
            raise ValueError(f"{where}.{name} must be a [low, high] pair, got {ci!r:.60}")
        for value in ci or ():
            number(value, name)
    for name in ("judge", "attacks", "ppl_median_by_model", "looping_by_model"):
        if stats.get(name) is not None and not isinstance(stats[name], dict):
            raise ValueError(f"{where}.{name} must be an object, got {stats[name]!r:.60}")
    for name in ("judge", "ppl_median_by_model", "looping_by_model"):
        for field, value in (stats.get(name) or {}).items():
            number(value, f"{name}.{field}")
    for attack, got in (stats.get("attacks") or {}).items():
        if not isinstance(got, dict):
            raise ValueError(f"{where}.attacks.{attack} must be an object, got {got!r:.60}")
        for name in ("roc_auc", "auc"):
            number(got.get(name), f"attacks.{attack}.{name}")


def _upgrade(stats: Any) -> Any:
    """Old ``results.json`` field names (``auc``, ``tpr_at_1fpr``, ...) read as the current ones."""
    if not isinstance(stats, dict):
        return stats
    stats = upgrade_summary(stats, "results.json families")
    if isinstance(stats.get("attacks"), dict):
        stats["attacks"] = {k: upgrade_summary(a, "results.json attacks") if isinstance(a, dict) else a
                            for k, a in stats["attacks"].items()}
    return stats


#: What ``icw bench compare`` records for a stage against the one before, per family (the card prints them).
_PAIRED_TESTS = ("mean_z_change", "wilcoxon_p", "flagged_only_after", "flagged_only_before", "mcnemar_p")


def load_stages(stages: dict | str | Path) -> dict[str, Any]:
    """``icw bench compare``'s ``stages.json`` (or the object itself), checked: each stage's statistics as
    :func:`check_stats` wants them and its paired tests against the stage before.

    Args:
        stages (`dict`, `str` or `Path`): the object ``icw bench compare`` writes, or its ``stages.json``.

    Raises:
        ValueError: a stage lacks its label, statistics or paired tests.
    """
    where = "stages"
    if isinstance(stages, (str, Path)):
        where = str(stages)
        stages = read_json_object(stages, "pass the stages.json of icw bench compare")
    runs = stages.get("stages") if isinstance(stages, dict) else None
    if not isinstance(runs, list) or not runs or not all(
            isinstance(r, dict) and "label" in r and isinstance(r.get("families"), dict)
            and isinstance(r.get("median_ppl"), dict) for r in runs):
        raise ValueError(f"{where}: expected the output of icw bench compare: an object with a non-empty 'stages' "
                         "list, each stage with its label, families and median_ppl")
    for run in runs:
        for family, stats in run["families"].items():
            check_family(family)
            check_stats(stats, f"{where}: stage {run['label']!r} families.{family}")
        for family, tests in (run.get("paired") or {}).items():
            if not isinstance(tests, dict) or not all(isinstance(tests.get(k), (int, float)) for k in _PAIRED_TESTS):
                raise ValueError(f"{where}: stage {run['label']!r} paired.{family} needs the numbers "
                                 f"{', '.join(_PAIRED_TESTS)} (icw bench compare writes them)")
    return {"alpha": 0.01, **stages}
