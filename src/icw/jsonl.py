"""JSON Lines: the one reader and writer every icw store and input file goes through.

Records are separated by ``"\\n"`` only. ``json.dumps(..., ensure_ascii=False)`` keeps U+0085,
U+2028 and U+2029 raw, and ``str.splitlines()`` splits on them, so a response containing one
would be cut in two when read back; :func:`dumps` escapes them (and lone surrogates, which
UTF-8 cannot hold), and :func:`iter_jsonl` never splits anywhere but at ``"\\n"``.

Appends are whole lines written under a :mod:`filelock` lock and fsynced, so several
processes can append to one file and a killed writer leaves at most one torn last line. A
torn **last** line (a record begun with ``{`` or ``[``, no newline, not valid JSON) is skipped
with a :class:`TornLineWarning`, so a resumed run regenerates that record (the next append cuts
it off); a malformed line anywhere else raises :class:`JSONLError` naming the file and line.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "rows.jsonl"
    >>> append_jsonl(path, [{"text": "one\\u2028two"}, {"text": "three"}])
    >>> [row["text"] for _, row in iter_jsonl(path)]
    ['one\\u2028two', 'three']
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from filelock import FileLock

#: Characters that ``str.splitlines()`` treats as line breaks but ``json.dumps(ensure_ascii=False)``
#: leaves raw (ASCII control characters are always escaped by ``json``), plus lone surrogates.
_UNSAFE = re.compile("[\u0085\u2028\u2029\ud800-\udfff]")


class JSONLError(ValueError):
    """A JSON Lines file has a malformed record before its last line."""


class TornLineWarning(UserWarning):
    """The last line of a JSON Lines file is incomplete (a writer was killed mid-line)."""


def dumps(value: Any) -> str:
    """One JSON record on one line: UTF-8 friendly, with every line separator escaped.

    Args:
        value: a JSON-serializable value.
    """
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False))


def loads(text: str | bytes, where: str = "input") -> Any:
    """``json.loads`` with one-line errors naming ``where`` (nesting too deep included).

    Args:
        text (`str` or `bytes`): one JSON document.
        where (`str`, defaults to ``"input"``): names the source (file and line) in errors.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise JSONLError(f"{where}: not valid JSON ({err.msg} at column {err.colno})") from None
    except UnicodeDecodeError:
        raise JSONLError(f"{where}: not UTF-8 text") from None
    except RecursionError:
        raise JSONLError(f"{where}: JSON nested too deeply") from None


def _warn_torn(name: str, number: int) -> None:
    warnings.warn(f"{name}:{number}: skipped an incomplete last line (a writer was interrupted); "
                  "it is regenerated when the run is resumed", TornLineWarning, stacklevel=3)


def iter_jsonl(source: str | os.PathLike | IO[bytes], *, name: str | None = None,
               max_line_bytes: int | None = None,
               on_torn: Callable[[str, int], None] | None = _warn_torn) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, value)`` for every non-blank line of a JSON Lines file, streaming.

    Args:
        source: a path, or a binary file object (e.g. ``sys.stdin.buffer``).
        name: how errors name the file (default: the path).
        max_line_bytes: refuse a line longer than this many bytes without reading it whole.
        on_torn: called with ``(name, line_number)`` for a torn last line, which is skipped;
            ``None`` makes a torn last line an error like any other.

    Raises:
        JSONLError: a malformed line that is not the last one (or any, with ``on_torn=None``),
            or a line longer than ``max_line_bytes``.
    """
    if isinstance(source, (str, os.PathLike)):
        name = name or str(source)
        with open(source, "rb") as fh:
            yield from iter_jsonl(fh, name=name, max_line_bytes=max_line_bytes, on_torn=on_torn)
        return
    name = name or getattr(source, "name", "input")
    limit = -1 if max_line_bytes is None else max_line_bytes + 1
    number = 0
    while True:
        line = source.readline(limit)
        if not line:
            return
        number += 1
        if number == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]  # a UTF-8 byte-order mark, as some editors write
        if max_line_bytes is not None and len(line.rstrip(b"\r\n")) > max_line_bytes:
            raise JSONLError(f"{name}:{number}: line longer than {max_line_bytes:,} bytes")
        if not line.strip():
            continue
        try:
            value = loads(line, f"{name}:{number}")
        except JSONLError:
            # readline() stops short of a newline only at end of file (the length limit raised above),
            # so this line was last when read; re-checking for EOF would race a concurrent appender.
            if on_torn is not None and not line.endswith(b"\n") and _is_torn(line):
                on_torn(name, number)
                return
            raise
        yield number, value


def read_jsonl(path: str | os.PathLike, **kwargs: Any) -> list[tuple[int, Any]]:
    """All ``(line_number, value)`` pairs of a file (see :func:`iter_jsonl`).

    Args:
        path (`str` or `os.PathLike`): the JSON Lines file.
        **kwargs: passed to :func:`iter_jsonl`.
    """
    return list(iter_jsonl(path, **kwargs))


def append_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> None:
    """Append ``rows`` as whole lines, under an inter-process lock, and fsync.

    A torn last line left by a killed writer (no newline, not valid JSON) is cut off first: the
    readers skipped it, so its record is being regenerated, and the file stays valid throughout.

    Args:
        path (`str` or `os.PathLike`): the JSON Lines file (created when missing).
        rows: the values to append, one per line.
    """
    data = "".join(dumps(row) + "\n" for row in rows).encode("utf-8")
    if not data:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"), open(path, "ab+") as fh:
        start, tail = _last_line(fh)
        if tail.strip():
            if _is_torn(tail):
                fh.truncate(start)
            else:
                data = b"\n" + data  # a complete record that only lacks its newline: keep it
        fh.seek(0, os.SEEK_END)
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _is_torn(line: bytes) -> bool:
    """An unterminated last line that began a record but is not valid JSON (its writer was killed)."""
    if line.lstrip()[:1] not in (b"{", b"["):
        return False
    try:
        json.loads(line)
    except (ValueError, RecursionError):
        return True
    return False


def _last_line(fh: IO[bytes], chunk: int = 1 << 16) -> tuple[int, bytes]:
    """Offset and bytes of the text after the file's last newline (``b""`` when it ends in one)."""
    end = fh.seek(0, os.SEEK_END)
    pos, tail = end, b""
    while pos > 0:
        step = min(chunk, pos)
        pos -= step
        fh.seek(pos)
        tail = fh.read(step) + tail
        cut = tail.rfind(b"\n")
        if cut >= 0:
            return pos + cut + 1, tail[cut + 1:]
    return 0, tail


def write_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> None:
    """Write ``rows`` to a new file atomically (a temporary file, then a rename).

    Args:
        path (`str` or `os.PathLike`): the file to create or replace.
        rows: the values to write, one per line.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes("".join(dumps(row) + "\n" for row in rows).encode("utf-8"))
    os.replace(tmp, path)


def read_json_object(path: str | os.PathLike, hint: str = "") -> dict[str, Any]:
    """A JSON file that must hold one object (``run.json``, ``results.json``), with one-line errors
    naming the file; ``hint`` says what the file should be.

    Args:
        path (`str` or `os.PathLike`): the JSON file.
        hint (`str`, defaults to ``""``): appended to errors, e.g. which command writes the file.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise JSONLError(f"cannot read {path}: {err.strerror or err}") from None
    value = loads(raw.removeprefix(b"\xef\xbb\xbf"), str(path))
    if not isinstance(value, dict):
        raise JSONLError(f"{path}: expected a JSON object, got {type(value).__name__}" + (f"; {hint}" if hint else ""))
    return value
