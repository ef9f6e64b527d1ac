"""``icw bench ...``: each bench module that exists adds its own sub-commands.

The sub-command parsers are :class:`BenchArgumentParser` s (``transformers.HfArgumentParser``), so
a sub-command whose options are a dataclass (``icw bench run``) is built from it, shows every
default in ``--help``, and reads ``--config FILE.yaml`` as trl's ``TrlParser`` does: the file's
values replace the defaults and flags on the command line override the file.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from collections.abc import Sequence
from typing import Any

from transformers import HfArgumentParser

from ..argtypes import DefaultsHelpFormatter, one_line_error

#: Modules exposing ``register(bench_subparsers)``: dataset build/push, run, report, compare, lm-eval-path.
_BENCH_MODULES = ("icw.bench.dataset", "icw.bench.runner", "icw.bench.report", "icw.bench.compare", "icw.lmeval")


class BenchArgumentParser(HfArgumentParser):
    """An ``HfArgumentParser`` whose dataclass options also come from ``--config FILE.yaml``.

    ``--config`` takes a YAML mapping of field names to values, or the name of a task packaged in
    ``icw/bench/tasks`` (``icwbench``). Unknown keys are an error, as in ``trl.TrlParser``.

    Args:
        dataclass_types (*optional*): the dataclasses whose fields become options, as in
            ``HfArgumentParser``.
        **kwargs: passed to ``argparse.ArgumentParser`` (e.g. ``prog=``).

    Example:
        >>> from icw.bench.runner import RUN_PARTS
        >>> parser = BenchArgumentParser(RUN_PARTS, prog="icw bench run")
        >>> args = parser.parse_args(["--config", "icwbench", "--out", "runs/x", "--families", "sa"])
        >>> args.task, args.version, args.families, args.max_new_tokens
        ('icwbench', 1, ['sa'], 600)
    """

    def __init__(self, dataclass_types: Any = None, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(dataclass_types, **kwargs)
        if self.dataclass_types:
            # read (and removed) before parsing, so it never reaches the dataclasses' namespace
            self.add_argument("--config", metavar="YAML", default=argparse.SUPPRESS,
                              help="YAML file (or packaged task name, e.g. icwbench) of option values; "
                                   "command-line flags override it")

    def parse_known_args(self, args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        args = list(args) if args is not None else None
        if self.dataclass_types and args:
            spec = None
            for i, arg in enumerate(args):
                if arg == "--config":
                    if i + 1 >= len(args):
                        self.error("--config needs a YAML file or a packaged task name")
                    spec = args[i + 1]
                    del args[i : i + 2]
                    break
                if arg.startswith("--config="):
                    spec = arg.partition("=")[2]
                    del args[i]
                    break
            if spec is not None:
                self._apply_config(spec)
        parsed, extras = super().parse_known_args(args, namespace)
        for dtype in self.dataclass_types or ():
            # build the options' dataclasses now: their checks (a zero batch size, say) end the command here,
            # in one line, before any work starts
            values = {f.name: getattr(parsed, f.name) for f in dataclasses.fields(dtype) if hasattr(parsed, f.name)}
            try:
                dtype(**values)
            except ValueError as err:
                self.error(str(err))
        return parsed, extras

    def error(self, message: str) -> None:  # type: ignore[override]
        one_line_error(self, message)

    def _apply_config(self, spec: str) -> None:
        from .runner import read_config_file

        try:
            values = read_config_file(spec)
        except ValueError as err:
            self.error(str(err))
        actions = {a.dest: a for a in self._actions if a.dest not in ("help", "config")}
        unknown = sorted(set(values) - set(actions))
        if unknown:
            self.error(f"--config {spec}: unknown key(s) {', '.join(unknown)}; the keys are the option names "
                       f"without '--' ({', '.join(sorted(actions))})")
        for name, value in values.items():
            action = actions[name]
            if action.nargs == "+" and not isinstance(value, list):
                value = [value]
            action.default, action.required = value, False


def register(sub: argparse._SubParsersAction) -> None:
    """Add this command group to the ``icw`` CLI's subparsers."""
    bench = sub.add_parser("bench", help="ICWBench: build the dataset, run a model, report")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True, parser_class=BenchArgumentParser)
    for name in _BENCH_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise
            continue
        module.register(bench_sub)
