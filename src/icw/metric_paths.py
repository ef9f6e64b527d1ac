"""Names and folders of the bundled ``evaluate`` metrics, without importing ``evaluate``.

The metric classes live in :mod:`icw.evaluate_metrics` (which imports ``evaluate`` and
``datasets``); the CLI only needs the names and folders, so they live here and
:mod:`icw.evaluate_metrics` re-exports them.

Example:
    >>> from icw.metric_paths import METRICS, metric_path
    >>> METRICS
    ('icw_tsp', 'icw_wip', 'icw_sa', 'icw_detection')
    >>> metric_path("icw_sa").endswith("icw_sa")
    True
"""

from __future__ import annotations

from pathlib import Path

METRICS = ("icw_tsp", "icw_wip", "icw_sa", "icw_detection")
_PACKAGE_DIR = Path(__file__).resolve().parent


def metric_path(name: str) -> str:
    """Folder of a bundled evaluate metric (``icw_tsp``, ``icw_wip``, ``icw_sa``, ``icw_detection``).

    Args:
        name (`str`): ``icw_tsp``, ``icw_wip``, ``icw_sa`` or ``icw_detection``.

    Example:
        >>> import evaluate
        >>> tsp = evaluate.load(metric_path("icw_tsp"))  # doctest: +SKIP
    """
    if name not in METRICS:
        raise ValueError(f"unknown icw metric {name!r}; choose one of {', '.join(METRICS)}")
    folder = _PACKAGE_DIR / "metrics" / name  # package data: the same folders in a checkout and a wheel
    if (folder / f"{name}.py").is_file():
        return str(folder)
    raise FileNotFoundError(f"the bundled metric folder {name} is missing from {_PACKAGE_DIR / 'metrics'}; reinstall icw")
