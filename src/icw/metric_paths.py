"""Names and folders of the bundled ``evaluate`` metrics, without importing ``evaluate``.

The metric folders are the repository's ``metrics/<name>/`` (``<name>.py``, the metric card
``README.md``, a Space's ``app.py`` and ``requirements.txt``); a wheel carries them as package data
(:mod:`icw.bundled`). The metric classes live in :mod:`icw.evaluate_metrics` (which imports
``evaluate`` and ``datasets``); the CLI only needs the names and folders, so they live here and
:mod:`icw.evaluate_metrics` re-exports them.

Example:
    >>> from icw.metric_paths import METRICS, metric_path
    >>> METRICS
    ('icw_tsp', 'icw_wip', 'icw_sa', 'icw_detection')
    >>> metric_path("icw_sa").endswith("icw_sa")
    True
"""

from __future__ import annotations

from .bundled import METRICS_PACKAGE, bundled_folder

METRICS = ("icw_tsp", "icw_wip", "icw_sa", "icw_detection")


def metric_path(name: str) -> str:
    """Folder of a bundled evaluate metric (``icw_tsp``, ``icw_wip``, ``icw_sa``, ``icw_detection``).

    In a checkout (editable install) it is the repository's ``metrics/<name>``; in an installed
    wheel, the copy the wheel carries.

    Args:
        name (`str`): ``icw_tsp``, ``icw_wip``, ``icw_sa`` or ``icw_detection``.

    Example:
        >>> import evaluate
        >>> tsp = evaluate.load(metric_path("icw_tsp"))  # doctest: +SKIP
    """
    if name not in METRICS:
        raise ValueError(f"unknown icw metric {name!r}; choose one of {', '.join(METRICS)}")
    root = bundled_folder(METRICS_PACKAGE)
    folder = root / name
    if (folder / f"{name}.py").is_file():
        return str(folder)
    raise FileNotFoundError(f"the bundled metric folder {name} is missing from {root}; reinstall icw")
