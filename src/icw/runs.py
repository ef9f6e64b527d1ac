"""Run outputs: the base directory outside the work tree where long runs keep what they make, and what it holds.

``scripts/speedrun.sh`` writes each run to ``runs_dir() / "speedrun[-PRESET]"`` (``$ICW_RUNS``, else
``$ICW_CACHE/runs``, default ``~/.cache/icw/runs``): a fresh checkout of the repository, or a work tree laid
anew, loses none of it, and the same command resumes every stage from there. The demo Space finds the newest
finished model in it without a flag.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .models import cache_dir

#: The facts of a training run, written beside the model and its card by every recipe (``icw.train.card``);
#: ``progress.final`` once training ended.
TRAINING_FACTS = "icw_training.json"
#: A run's stage log: one JSON line per run of a stage (``stage``, wall ``seconds``, exit ``status``, ``ended``,
#: ``machine`` as :func:`icw.precision.machine` says it), appended by ``scripts/speedrun.sh``, interrupted runs too.
TIMINGS = "timings.jsonl"


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


@dataclass
class RunCost:
    """What a run cost: each stage's wall time summed over every run of it, and the machines it ran on.

    Args:
        seconds (`dict[str, int]`): wall seconds per stage, in the order the stages first ran.
        runs (`dict[str, int]`): how many times each stage ran (an interrupted and resumed stage runs twice).
        machines (`list[dict]`): the distinct machines (CPU, cores, precision, torch), in order of first use.
    """

    seconds: dict[str, int] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    machines: list[dict[str, Any]] = field(default_factory=list)

    @property
    def total_seconds(self) -> int:
        return sum(self.seconds.values())

    def markdown(self) -> str:
        """The table of stages (wall time, runs), the total, and the machines, as Markdown."""
        lines = ["| stage | wall time | runs |", "|---|---:|---:|"]
        lines += [f"| {stage} | {s / 3600:.2f} h ({s} s) | {self.runs[stage]} |" for stage, s in self.seconds.items()]
        lines += [f"| **total** | **{self.total_seconds / 3600:.2f} h** | |", "", "Machines:", ""]
        lines += [f"- {m['cpu']}, {m['cores']} cores, {m['precision']}, torch {m['torch']}" for m in self.machines]
        return "\n".join(lines)


def run_cost(timings: str | Path) -> RunCost:
    """Sum a run's stage log (:data:`TIMINGS`) per stage.

    Args:
        timings (`str` or `Path`): a ``timings.jsonl``, or the run folder that holds it.

    Example:
        >>> import json, tempfile
        >>> path = Path(tempfile.mkdtemp()) / TIMINGS
        >>> machine = {"cpu": "x86", "cores": 2, "precision": "fp32", "torch": "2"}
        >>> _ = path.write_text("\\n".join(json.dumps({"stage": "sdlp", "seconds": s, "machine": machine}) for s in (60, 30)))
        >>> cost = run_cost(path)
        >>> cost.seconds, cost.runs
        ({'sdlp': 90}, {'sdlp': 2})
    """
    path = Path(timings)
    path = path / TIMINGS if path.is_dir() else path
    cost = RunCost()
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        cost.seconds[row["stage"]] = cost.seconds.get(row["stage"], 0) + int(row["seconds"])
        cost.runs[row["stage"]] = cost.runs.get(row["stage"], 0) + 1
        if row["machine"] not in cost.machines:
            cost.machines.append(row["machine"])
    return cost


def write_report_card(run: str | Path) -> Path:
    """Write ``<run>/report.md``, the run's report card, from its :data:`TIMINGS`; returns its path.

    Args:
        run (`str` or `Path`): a run folder (``scripts/speedrun.sh``'s output).
    """
    run = Path(run)
    text = f"# Speedrun report card\n\nOutput: `{run}`\n\n{run_cost(run).markdown()}\n"
    (run / "report.md").write_text(text, encoding="utf-8")
    return run / "report.md"
