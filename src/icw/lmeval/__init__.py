"""ICWBench as lm-evaluation-harness tasks: ``icwbench_tsp``, ``icwbench_wip``, ``icwbench_sa`` and
the group ``icwbench``.

The task YAML files live in this folder; point the harness at it with ``--include_path``::

    lm_eval --model hf --model_args pretrained=MODEL --apply_chat_template \\
        --tasks icwbench --include_path "$(icw bench lm-eval-path)" \\
        --metadata '{"dataset": "ICWBENCH_FOLDER_OR_HUB_ID"}'

Each ICWBench row becomes two prompts (the key's instruction + the query, and the query alone);
:mod:`icw.lmeval.hooks` scores every answer with :func:`icw.verify` under the row's key and
aggregates them (see ``docs/lm-eval.md``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

#: The harness's task names, one per family, and the group that runs all three.
TASKS = ("icwbench_tsp", "icwbench_wip", "icwbench_sa")
GROUP = "icwbench"


def include_path() -> Path:
    """The folder to pass as lm-eval's ``--include_path`` (it holds the task YAML files).

    Example:
        >>> sorted(p.name for p in include_path().glob("*.yaml"))
        ['_icwbench.yaml', 'icwbench_sa.yaml', 'icwbench_tsp.yaml', 'icwbench_wip.yaml']
    """
    return Path(__file__).resolve().parent


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``icw bench lm-eval-path`` to the CLI's subparsers."""
    p = sub.add_parser("lm-eval-path", help="print the --include_path of the lm-evaluation-harness ICWBench tasks",
                       description="Print the folder holding the icwbench lm-evaluation-harness tasks: "
                                   "lm_eval --tasks icwbench --include_path \"$(icw bench lm-eval-path)\" ...")
    p.set_defaults(func=lambda args: print(include_path()))
