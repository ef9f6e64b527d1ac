"""``icw detect --dataset``: the corpus options of the command line and its choice of executor.

Without ``--executor`` the texts go through :func:`icw.corpus.detect_dataset` (``datasets.map``); with
``--executor local`` through :func:`icw.integrations.datatrove.detect_files` (a datatrove pipeline, the
optional ``icw[datatrove]`` extra, imported only then). Both write the same parquet results. The choice
is made here, beside the command line, so that neither :mod:`icw.corpus` nor the datatrove steps import
each other's caller: the datatrove steps build on :mod:`icw.corpus`, and :mod:`icw.corpus` knows nothing
of them.
"""

from __future__ import annotations

import json
from typing import Any

from .argtypes import positive_int
from .corpus import detect_dataset
from .keys import ICWKey

#: The corpus options and their defaults; ``None`` on the command line means "not given", so that one given
#: without ``--dataset`` is refused rather than ignored (:func:`refuse_without_dataset`).
DEFAULTS = {"column": "text", "id_column": None, "num_proc": 1, "batch_size": 256, "split": "train", "output": None,
            "executor": None, "tasks": None, "logging_dir": None}


def add_arguments(parser: Any) -> None:
    """The ``icw detect`` options for a corpus (``--dataset`` switches to :func:`icw.corpus.detect_dataset`).

    Args:
        parser (`argparse.ArgumentParser`): the ``icw detect`` parser to extend.
    """
    group = parser.add_argument_group("corpus detection (a datasets dataset or parquet/JSON Lines files)")
    group.add_argument("--dataset", metavar="NAME_OR_PATH",
                       help="verify a column of parquet/JSON Lines file(s), a save_to_disk folder or a Hub dataset; "
                            "results go to parquet next to the input (see --output)")
    group.add_argument("--column", help="text column (default: text)")
    group.add_argument("--id-column", help="column identifying each row in the results (default: id when present, "
                                           "else the row number)")
    group.add_argument("--num-proc", type=positive_int, metavar="N", help="worker processes (default: 1)")
    group.add_argument("--batch-size", type=positive_int, metavar="N", help="texts per verify call (default: 256)")
    group.add_argument("--split", help="split of a Hub dataset (default: train)")
    group.add_argument("--output", metavar="PATH", help="results parquet (default: <input>.icw-detect.parquet); "
                                                         "with --executor, a folder (default: <input>.icw-detect/)")
    group.add_argument("--executor", choices=["local"],
                       help="run as a datatrove pipeline on a LocalPipelineExecutor (pip install 'icw[datatrove]'): "
                            "the input files are shared out among --tasks tasks, --num-proc at a time, and a rerun "
                            "resumes, skipping the tasks that finished")
    group.add_argument("--tasks", type=positive_int, metavar="N", help="datatrove tasks (default: --num-proc)")
    group.add_argument("--logging-dir", metavar="DIR", help="datatrove's logging folder, which records finished tasks "
                                                            "(default: <output>.logs)")


def refuse_without_dataset(args: Any) -> None:
    """Refuse corpus options given without ``--dataset`` (text files are verified in this process, in one
    call): an option that changes nothing should say so, not be ignored.

    Args:
        args (`argparse.Namespace`): the parsed ``icw detect`` options.
    """
    given = [name for name in DEFAULTS if getattr(args, name, None) is not None]
    if given and not getattr(args, "dataset", None):
        options = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ValueError(f"{options} only appl{'ies' if len(given) == 1 else 'y'} to corpus detection: add "
                         "--dataset NAME_OR_PATH, or drop it (text files are verified in one process, in one call)")


def run_from_args(args: Any) -> None:
    """``icw detect --dataset ...``: detect, write the parquet, print one JSON summary line."""
    if args.files:
        raise ValueError("pass either text files or --dataset, not both")
    for name, default in DEFAULTS.items():  # None: not given on the command line
        if getattr(args, name) is None:
            setattr(args, name, default)
    common = {"id_column": args.id_column, "tokenizer": args.tokenizer, "batch_size": args.batch_size,
              "alpha": args.alpha, "max_chars": args.max_chars, "output": args.output}
    if args.executor == "local":
        try:
            from .integrations.datatrove import detect_files
        except ImportError as err:  # the optional extra: its one-line message says what to install
            raise ValueError(str(err)) from None
        got = detect_files(args.dataset, ICWKey.from_string(args.key), args.column, tasks=args.tasks or args.num_proc,
                           workers=args.num_proc, logging_dir=args.logging_dir, **common)
    elif args.tasks is not None or args.logging_dir is not None:
        raise ValueError("--tasks and --logging-dir configure datatrove: add --executor local")
    else:
        got = detect_dataset(args.dataset, ICWKey.from_string(args.key), args.column, num_proc=args.num_proc,
                             split=args.split, **common)
    print(json.dumps({"output": got.path, "num_texts": got.num_texts, "num_watermarked": got.num_watermarked,
                      "alpha": args.alpha, "texts_per_second": round(got.texts_per_second, 1),
                      "statistic": got.statistic, "null_hypothesis": got.null_hypothesis,
                      "p_value_method": got.p_value_method}))
