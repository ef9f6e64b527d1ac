"""Run outputs: the base directory outside the work tree where long runs keep what they make, and what it holds.

``scripts/speedrun.sh`` writes each run to ``runs_dir() / "speedrun[-PRESET]"`` (``$ICW_RUNS``, else
``$ICW_CACHE/runs``, default ``~/.cache/icw/runs``): a fresh checkout of the repository, or a work tree laid
anew, loses none of it, and the same command resumes every stage from there. The demo Space finds the newest
finished model in it without a flag.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .models import cache_dir

#: The facts of a training run, written beside the model and its card by every recipe (``icw.train.card``);
#: ``progress.final`` once training ended.
TRAINING_FACTS = "icw_training.json"


def runs_dir() -> Path:
    """Where long runs keep their outputs: ``$ICW_RUNS``, else ``$ICW_CACHE/runs`` (default ``~/.cache/icw/runs``)."""
    return Path(os.environ.get("ICW_RUNS") or cache_dir() / "runs")


def finished_training(folder: str | Path) -> bool:
    """Whether ``folder`` holds a model a recipe finished training (its ``icw_training.json`` says final).

    Args:
        folder (`str` or `Path`): a training output folder.
    """
    facts = Path(folder) / TRAINING_FACTS
    try:
        return bool(json.loads(facts.read_text(encoding="utf-8"))["progress"]["final"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


def latest_trained_model(base: str | Path | None = None) -> Path | None:
    """The newest finished model of the runs under ``base``: ``<run>/grpo`` or ``<run>/sdlp`` (the speedrun's
    stages), by the time training ended; ``None`` while there is none.

    Args:
        base (`str` or `Path`, *optional*): the runs folder (default: :func:`runs_dir`).

    Example:
        >>> import tempfile
        >>> latest_trained_model(tempfile.mkdtemp()) is None
        True
    """
    base = Path(base) if base is not None else runs_dir()
    found = [folder for pattern in ("*/grpo", "*/sdlp") for folder in base.glob(pattern) if finished_training(folder)]
    return max(found, key=lambda folder: (folder / TRAINING_FACTS).stat().st_mtime, default=None)
