"""``icw bench ...``: each bench module that exists adds its own sub-commands."""

from __future__ import annotations

import argparse
import importlib

#: Modules exposing ``register(bench_subparsers)``: dataset build/push, run, report.
_BENCH_MODULES = ("icw.bench.dataset", "icw.bench.runner", "icw.bench.report")


def register(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="ICWBench: build the dataset, run a model, report")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True)
    for name in _BENCH_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise
            continue
        module.register(bench_sub)
