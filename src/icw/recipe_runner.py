"""What ``recipes/*.py`` run: the recipe's ``TrlParser`` and ``main``, with errors a user can fix as one line.

Each recipe script keeps trl's shape, inside :func:`recipe_errors`::

    parser = make_parser()
    with recipe_errors(parser, "sdlp"):
        main(*parser.parse_args_and_config())

so a script reports errors as ``icw`` does (one ``icw: error: ...`` line, exit status 2), including the
one a new user meets first: a configuration that names Hub models or datasets, run offline
(``HF_HUB_OFFLINE=1``) or without network. That line names the local alternative
(``--model_name_or_path smollm2``, a local folder, a queries file) instead of a ``ConnectionError``
traceback. ``--help`` lists ``--config`` (the YAML run file), which ``TrlParser`` reads itself.
Warnings that third-party code raises on every run and that a user cannot act on (:data:`THIRD_PARTY_NOISE`,
each with the reason) are silenced inside the block, and only those.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

#: The offline configurations that run every recipe on the embedded SmolLM2 (``recipes/configs/<this>/``).
OFFLINE_CONFIGS = Path("recipes") / "configs" / "smollm2-135m"
#: The recipes with a configuration there (``icw train adaptive-attack`` has none).
OFFLINE_RECIPES = frozenset({"synthesize", "sdlp", "grpo", "sft"})
#: Config fields that may name a Hub repository -> what replaces it offline (``{recipe}``-specific for data).
LOCAL_ALTERNATIVES = {
    "model_name_or_path": "--model_name_or_path smollm2 (the embedded SmolLM2-135M-Instruct) or a local model folder",
    "dataset_name": "--dataset_name FOLDER (a D_cs folder written by recipes/synthesize.py)",
}
#: For synthesis, ``dataset_name`` is a Hub dataset of queries: a local file (or the bundled questions) replaces it.
SYNTHESIS_QUERIES = "--queries_file FILE (one query per line; without it and dataset_name: the bundled questions)"
#: Warnings raised by third-party code on every run of a recipe that a user cannot act on: (category, message
#: regex, why). Silenced while a recipe runs (:func:`recipe_errors`); tests/test_speedrun.py runs the shipped
#: commands with every other warning an error.
THIRD_PARTY_NOISE = (
    (FutureWarning, r"`is_gradient_checkpointing` is deprecated",
     "trl 1.x reads transformers' deprecated alias each time GRPO generates (trl.models.utils), whatever the config"),
)
#: Exception class names (anywhere in an error's chain or its classes' bases) that mean "the Hub is unreachable".
HUB_UNREACHABLE = frozenset({"ConnectionError", "OfflineModeIsEnabled", "LocalEntryNotFoundError", "ConnectError",
                             "ConnectTimeout", "ConnectTimeoutError", "NewConnectionError"})


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and the exceptions it was raised from or during (``__cause__``, ``__context__``)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def hub_unreachable(err: BaseException) -> bool:
    """Whether ``err`` comes from a Hugging Face Hub download that failed offline or without network.

    Args:
        err: the exception a recipe raised.
    """
    return any(cls.__name__ in HUB_UNREACHABLE for e in _chain(err) if not isinstance(e, BrokenPipeError)
               for cls in type(e).__mro__)


def _hub_fields(parsed: Sequence[Any]) -> dict[str, str]:
    """The parsed config fields that name a Hub repository: set, not an existing path, not ``smollm2``."""
    found: dict[str, str] = {}
    for args in parsed:
        for name in LOCAL_ALTERNATIVES:
            value = getattr(args, name, None)
            if isinstance(value, str) and value and value != "smollm2" and not Path(value).expanduser().exists():
                found.setdefault(name, value)
    return found


def hub_error_message(err: BaseException, parsed: Sequence[Any], recipe: str) -> str:
    """One line for a recipe that needed the Hub and could not reach it, naming the local alternatives.

    Args:
        err: the exception (see :func:`hub_unreachable`).
        parsed: the recipe's parsed dataclasses (its ``model_name_or_path`` and ``dataset_name`` are read).
        recipe (`str`): the recipe's name (``"synthesize"``, ``"sdlp"``, ...), for the offline config's path.
    """
    from huggingface_hub import constants

    fields = _hub_fields(parsed) or {"model_name_or_path": "?"}
    text = " ".join(str(e) for e in _chain(err))
    failed = next((f"{name} {value!r}" for name, value in fields.items() if value in text),
                  " and ".join(f"{name} {value!r}" for name, value in fields.items() if value != "?") or "a download")
    why = "HF_HUB_OFFLINE=1 is set" if constants.HF_HUB_OFFLINE else "no network"
    order = sorted(fields, key=lambda name: not failed.startswith(name))  # the field that failed first
    local = [SYNTHESIS_QUERIES if name == "dataset_name" and recipe == "synthesize" else LOCAL_ALTERNATIVES[name]
             for name in order]
    offline = OFFLINE_CONFIGS / f"{recipe}.yaml"
    example = f", as --config {offline.as_posix()} does" if recipe in OFFLINE_RECIPES else ""
    return f"cannot reach the Hugging Face Hub for {failed} ({why}); use local files instead: {' and '.join(local)}{example}"


def _help_lists_config(parser: argparse.ArgumentParser, recipe: str) -> None:
    """Show ``--config`` in ``--help``; ``TrlParser.parse_args_and_config`` consumes it before argparse runs."""
    parser.add_argument("--config", metavar="YAML", default=argparse.SUPPRESS,
                        help=f"a YAML run file whose fields set the defaults (e.g. {OFFLINE_CONFIGS.as_posix()}/"
                             f"{recipe}.yaml, offline); --field value on the command line overrides them")


class _Recorded:
    """What the recipe parsed, once it has (empty before: an error while parsing names no config field)."""

    parsed: tuple[Any, ...] = ()


@contextlib.contextmanager
def recipe_errors(parser: Any, recipe: str, exit_on_error: bool = True) -> Iterator[Any]:
    """Run a recipe's ``main(*parser.parse_args_and_config())`` with errors a user can fix as one line.

    The recipe keeps trl's script shape; inside this block an error a user can fix (those ``icw`` prints
    as one line, and a Hub that cannot be reached) prints one ``icw: error: ...`` line and exits with
    status 2. Other errors keep their traceback.

    Args:
        parser (`trl.TrlParser`): the recipe's parser (``make_parser()``); ``--help`` then lists ``--config``.
        recipe (`str`): the recipe's name (``"synthesize"``, ``"sdlp"``, ``"grpo"``, ``"sft"``), for the
            offline configuration the message names.
        exit_on_error (`bool`, defaults to `True`): print the line and exit (a recipe script); `False` raises
            it as a `ValueError` instead, for a caller that reports user errors itself (``icw train``, whose
            ``icw.cli.main`` prints it and returns 2).

    Example:
        >>> from icw.recipe_runner import recipe_errors
        >>> from icw.train.synthesis import make_parser
        >>> with recipe_errors(make_parser(), "synthesize") as parser:  # doctest: +SKIP
        ...     main(*parser.parse_args_and_config())
    """
    from .cli import _USER_ERRORS

    _help_lists_config(parser, recipe)
    recorded = _Recorded()
    parse = parser.parse_args_and_config

    def parse_and_record(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
        recorded.parsed = parse(*args, **kwargs)
        return recorded.parsed

    parser.parse_args_and_config = parse_and_record
    try:
        with warnings.catch_warnings():
            for category, message, _ in THIRD_PARTY_NOISE:
                warnings.filterwarnings("ignore", message=message, category=category)
            yield parser
    except Exception as err:
        if hub_unreachable(err):
            message = hub_error_message(err, recorded.parsed, recipe)
        elif isinstance(err, _USER_ERRORS):
            message = str(err) or type(err).__name__  # as the icw command prints them
        else:
            raise
        if not exit_on_error:
            raise ValueError(message) from None
        print(f"icw: error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
