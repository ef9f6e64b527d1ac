"""Parsing serialized keys: ``icw:<family>:name=value,...`` (:meth:`~icw.keys.ICWKey.to_string`) and their JSON
form (:meth:`~icw.keys.ICWKey.to_json`) into the fields :meth:`~icw.keys.ICWKey.from_dict` takes."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

__all__ = ["PREFIX", "KeyStringError", "parse_json_key", "parse_key_string"]

#: Every key string starts with ``icw:``.
PREFIX = "icw"


class KeyStringError(ValueError):
    """A serialized key that does not parse (:meth:`~icw.keys.ICWKey.from_string` raises it as an ``ICWKeyError``)."""


def _unique_fields(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` that refuses a repeated field (``json`` would keep the last silently)."""
    data: dict[str, Any] = {}
    for name, value in pairs:
        if name in data:
            raise KeyStringError(f"key field {name} is given twice")
        data[name] = value
    return data


def parse_json_key(text: str) -> Any:
    """The fields of a JSON key (:meth:`ICWKey.to_json`); a malformed document is an :class:`KeyStringError`.

    Args:
        text (`str`): the JSON object.
    """
    try:
        return json.loads(text, object_pairs_hook=_unique_fields)
    except json.JSONDecodeError as err:
        raise KeyStringError(f"malformed JSON key: {err.msg} at column {err.colno}") from None
    except RecursionError:
        raise KeyStringError("malformed JSON key: nested too deeply") from None


#: Key fields whose string form (:meth:`ICWKey.to_string`) holds a number.
_INT_FIELDS = frozenset(("seed", "pool_size", "num_letters", "length", "draw"))
_FLOAT_FIELDS = frozenset(("gamma",))


def parse_key_string(text: str) -> dict[str, Any]:
    """The fields of ``icw:<family>:name=value,...`` (:meth:`ICWKey.to_string`), values unquoted and
    numbers converted; each field at most once.

    Args:
        text (`str`): the key string.

    Example:
        >>> parse_key_string("icw:sa:seed=7,length=18,draw=2,screen=ref1")
        {'family': 'sa', 'seed': 7, 'length': 18, 'draw': 2, 'screen': 'ref1'}
    """
    pieces = text.split(":", 2)
    if len(pieces) != 3 or pieces[0] != PREFIX:
        raise KeyStringError(f"malformed key {text[:80]!r}: expected 'icw:<family>:name=value,...'")
    data: dict[str, Any] = {"family": pieces[1]}
    for item in filter(None, pieces[2].split(",")):
        name, sep, value = item.partition("=")
        if not sep:
            raise KeyStringError(f"malformed key field {item!r} in {text[:80]!r}: expected name=value")
        value = unquote(value)
        if name in data:
            raise KeyStringError(f"key field {name} is given twice in {text[:80]!r}")
        data[name] = _field_value(name, value)
    return data


def _field_value(name: str, value: str) -> Any:
    """A key field's value from its string form: an int or a float for the numeric fields."""
    try:
        return int(value) if name in _INT_FIELDS else float(value) if name in _FLOAT_FIELDS else value
    except ValueError:
        raise KeyStringError(f"key field {name} must be a number, got {value!r}") from None
