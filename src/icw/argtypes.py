"""The domains of the command line's numeric options, checked where each option is parsed.

Every numeric option of ``icw`` takes one of these as its ``type=`` (argparse options) or checks its
value with :meth:`NumberType.require` (options built from a dataclass, whose ``__post_init__`` runs
while the command line is parsed). A value outside the domain, a zero batch size or a negative
worker count, ends the command with one ``icw: error:`` line naming the option and what it accepts
(exit status 2) before any work starts. ``tests/test_cli_options.py`` walks every command's options
and requires each numeric one to have a domain here.

Example:
    >>> positive_int("8")
    8
    >>> positive_int("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a whole number >= 1, got '0'
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn


@dataclass(frozen=True)
class NumberType:
    """A numeric option's type: converts the string and refuses values outside the domain.

    Args:
        kind (`type`): ``int`` or ``float``.
        accepts (`str`): the domain in words, e.g. ``"a whole number >= 1"``.
        test (`Callable[[float], bool]`): whether a (finite) number is in the domain.
        name (`str`): the type's name, shown by ``--help`` tooling.
    """

    kind: type
    accepts: str
    test: Callable[[float], bool]
    name: str

    @property
    def __name__(self) -> str:  # argparse names a type by it
        return self.name

    def __call__(self, value: str) -> int | float:
        try:
            number = self.kind(value)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {self.accepts}, got {value!r}") from None
        if not (math.isfinite(number) and self.test(number)):
            raise argparse.ArgumentTypeError(f"expected {self.accepts}, got {value!r}")
        return number

    def require(self, value: int | float | list | tuple | None, option: str) -> None:
        """Raise ``ValueError`` naming ``option`` unless ``value`` is in the domain (``None``: unset, allowed).

        Args:
            value: the parsed value, or a list of them (each is checked).
            option (`str`): the option as the user spells it, e.g. ``"--batch-size"``.
        """
        if value is None:
            return
        if isinstance(value, (list, tuple)):  # a list option: every entry
            for item in value:
                self.require(item, option)
            return
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not (ok and (self.kind is float or float(value).is_integer()) and self.test(value)):
            raise ValueError(f"{option}: expected {self.accepts}, got {value!r}")


#: Counts, sizes, lengths and workers.
positive_int = NumberType(int, "a whole number >= 1", lambda n: n >= 1, "positive_int")
#: Seeds and offsets (numpy and the key derivation take no negative seeds).
non_negative_int = NumberType(int, "a whole number >= 0", lambda n: n >= 0, "non_negative_int")
#: Strengths, temperatures, learning rates.
positive_float = NumberType(float, "a number > 0", lambda x: x > 0, "positive_float")
#: Weights that may switch a term off.
non_negative_float = NumberType(float, "a number >= 0", lambda x: x >= 0, "non_negative_float")
#: Significance levels, confidence levels and fractions that exclude both ends.
open_unit = NumberType(float, "a number strictly between 0 and 1", lambda x: 0 < x < 1, "open_unit")
#: Fractions that may be 1 (all) but not 0 (nothing): nucleus sampling's top-p.
fraction = NumberType(float, "a number > 0 and <= 1", lambda x: 0 < x <= 1, "fraction")
#: Fractions that may be 0 or 1.
unit = NumberType(float, "a number from 0 to 1", lambda x: 0 <= x <= 1, "unit")
#: Rates that may be 0 (none allowed) but not 1 (anything goes).
rate = NumberType(float, "a number from 0 up to (not including) 1", lambda x: 0 <= x < 1, "rate")
#: TCP ports.
port = NumberType(int, "a port number from 1 to 65535", lambda n: 1 <= n <= 65535, "port")
#: Numbers any value of which means something (a reward floor, a penalty): still refuses nan and inf.
any_float = NumberType(float, "a finite number", lambda x: True, "any_float")


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Ends each option's help with ``(default: ...)``, except flags and options without a default
    (``False``, ``None``) and help texts that already say what the default is."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def one_line_error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    """How every ``icw`` parser reports a bad option: one ``icw: error:`` line and exit status 2 (argparse
    would print the whole usage first).

    Args:
        parser (`argparse.ArgumentParser`): the parser that refused the command line.
        message (`str`): what is wrong.
    """
    parser.exit(2, f"icw: error: {message} (see: {parser.prog} --help)\n")


NUMBER_TYPES = (positive_int, non_negative_int, positive_float, non_negative_float, open_unit, fraction, unit, rate,
                port, any_float)
