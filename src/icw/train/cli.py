"""``icw train ...``: the training recipes from the command line.

Each sub-command takes the same ``--config recipe.yaml`` and ``--field value`` overrides as the
scripts in ``recipes/`` (parsed by ``trl.TrlParser``), e.g.::

    icw train synthesize --config recipes/configs/smollm2-135m/synthesize.yaml --num_h1 20
    icw train sdlp --config recipes/configs/smollm2-135m/sdlp.yaml

For multi-GPU runs launch the scripts with ``accelerate launch`` instead.
"""

from __future__ import annotations

import argparse
from typing import Any


def _synthesize(args: argparse.Namespace) -> None:
    from .synthesis import make_parser, synthesize

    (config,) = make_parser().parse_args_and_config(args.options)
    synthesize(config)


def _sdlp(args: argparse.Namespace) -> None:
    from .sdlp import main

    main(args.options)


def _grpo(args: argparse.Namespace) -> None:
    from .grpo import main

    main(args.options)


def _probe(args: argparse.Namespace) -> None:
    from .probe import main

    main(args.options)


class _PassThroughParser(argparse.ArgumentParser):
    """Hands every argument after the sub-command to the recipe's ``TrlParser`` (``--config``,
    ``--field value``, ``--help``), which knows the dataclass fields and rejects unknown ones."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        namespace = namespace if namespace is not None else argparse.Namespace()
        for name, value in self._defaults.items():
            setattr(namespace, name, value)
        namespace.options = list(args or [])
        return namespace, []


def register(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train", help="cold-start synthesis, SDLP and GRPO training")
    train_sub = train.add_subparsers(dest="train_command", required=True, parser_class=_PassThroughParser)
    for name, func, text in (
        ("synthesize", _synthesize, "generate the cold-start dataset D_cs with the logit perturbation"),
        ("sdlp", _sdlp, "self-distillation with logit perturbation on D_cs"),
        ("grpo", _grpo, "GRPO with the verifier z as reward"),
        ("probe", _probe, "key-swap probe: does a model read the key from the instruction or from the prefix?"),
    ):
        parser = train_sub.add_parser(name, help=text, add_help=False)
        parser.set_defaults(func=func)
