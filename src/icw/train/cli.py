"""``icw train ...``: the training recipes from the command line.

Each sub-command is the recipe's own parser (``make_parser`` of :mod:`icw.train.synthesis`,
:mod:`~icw.train.sdlp`, :mod:`~icw.train.grpo` and :mod:`~icw.train.sft`, the ``TrlParser`` that ``recipes/*.py`` use) and
calls the recipe's ``main(*parsed)``, so it takes the same ``--config recipe.yaml`` and
``--field value`` overrides as the scripts, e.g.::

    icw train synthesize --config recipes/configs/smollm2-135m/synthesize.yaml --num_h1 20
    icw train sdlp --config recipes/configs/smollm2-135m/sdlp.yaml

For multi-GPU runs launch the scripts with ``accelerate launch`` instead.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

#: Sub-command -> module with the recipe's ``make_parser(subparsers=None, prog=None)`` and ``main(*parsed)``.
RECIPES = {
    "synthesize": ("icw.train.synthesis", "generate the cold-start dataset D_cs with the logit perturbation"),
    "sdlp": ("icw.train.sdlp", "self-distillation with logit perturbation on D_cs"),
    "grpo": ("icw.train.grpo", "GRPO with the verifier z as reward"),
    "sft": ("icw.train.sft", "the SFT ablation baseline on the D_H1 responses"),
    "adaptive-attack": ("icw.train.adaptive_attack", "an RL-trained paraphraser that removes ICWs (adaptive attack)"),
}


def _run(args: argparse.Namespace) -> None:
    from ..recipe_runner import recipe_errors

    module = importlib.import_module(RECIPES[args.train_command][0])
    parser = module.make_parser(prog=f"icw train {args.train_command}")
    # as the recipe scripts: a Hub that cannot be reached (offline, no network) and the errors a user can
    # fix (TrlParser's ValueError for unknown keys and bad values) end in one line naming what to do, status 2,
    # printed by icw.cli.main
    with recipe_errors(parser, args.train_command, exit_on_error=False):
        module.main(*parser.parse_args_and_config(args.options))


def _probe(args: argparse.Namespace) -> None:
    from .probe import main

    main(args.options)


class _PassThroughParser(argparse.ArgumentParser):
    """Keeps every argument after the sub-command for the recipe's ``TrlParser`` (``--config``,
    ``--field value``, ``--help``), built only when the sub-command runs: building the three trl
    parsers would import trl on every ``icw`` command."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        namespace = namespace if namespace is not None else argparse.Namespace()
        for name, value in self._defaults.items():
            setattr(namespace, name, value)
        namespace.options = list(args or [])
        return namespace, []


def register(sub: argparse._SubParsersAction) -> None:
    """Add this command group to the ``icw`` CLI's subparsers."""
    train = sub.add_parser("train", help="cold-start synthesis, SDLP, GRPO and SFT training")
    train_sub = train.add_subparsers(dest="train_command", required=True, parser_class=_PassThroughParser)
    for name, (_, text) in RECIPES.items():
        train_sub.add_parser(name, help=text, add_help=False).set_defaults(func=_run)
    train_sub.add_parser("probe", add_help=False, help="key-swap probe: does a model read the key from the "
                         "instruction or from the response prefix?").set_defaults(func=_probe)
