"""The folders at the top of the repository that the wheel carries: ``metrics/``, ``model_cards/templates/``
and the demo Space, ``spaces/icw-demo/``.

Each has one copy, in the repository. ``pyproject.toml`` maps it to a data package of ``icw``
(``package-dir``), so a wheel installs it inside the package and an editable install resolves the
same name to the repository folder: the code finds it by the package name, never by a path.

Example:
    >>> from icw.bundled import METRICS_PACKAGE, bundled_folder
    >>> (bundled_folder(METRICS_PACKAGE) / "icw_sa" / "icw_sa.py").is_file()
    True
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

#: ``metrics/`` (one folder per ``evaluate`` metric), as the wheel carries it.
METRICS_PACKAGE = "icw._bundled_metrics"
#: ``model_cards/templates/`` (the model card templates), as the wheel carries it.
CARD_TEMPLATES_PACKAGE = "icw._card_templates"
#: ``spaces/icw-demo/`` (the demo Space: ``app.py`` and its rooms), as the wheel carries it.
SPACE_PACKAGE = "icw._space"
#: Where each data package lives in the repository.
SOURCES = {METRICS_PACKAGE: "metrics", CARD_TEMPLATES_PACKAGE: "model_cards/templates", SPACE_PACKAGE: "spaces/icw-demo"}


def bundled_folder(package: str) -> Path:
    """The folder of a data package of ``icw`` (inside the wheel, or the repository's folder in a checkout).

    Args:
        package (`str`): :data:`METRICS_PACKAGE`, :data:`CARD_TEMPLATES_PACKAGE` or :data:`SPACE_PACKAGE`.

    Raises:
        FileNotFoundError: the installation lacks it (an ``icw`` installed from an older build, or a
            checkout put on ``sys.path`` by hand rather than installed).
    """
    if package not in SOURCES:
        raise ValueError(f"unknown icw data package {package!r}; choose one of {', '.join(SOURCES)}")
    try:
        spec = importlib.util.find_spec(package)
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"{package} (the repository's {SOURCES[package]}/ folder) is not installed: reinstall icw "
            "(`pip install .`, or `bash scripts/setup.sh` in a checkout)")
    return Path(next(iter(spec.submodule_search_locations)))
