"""Question files: the one reader behind ICWBench (``icw bench build --questions``) and the
cold-start synthesis (``queries_file``).

A question file is plain text (one question per line) or JSON Lines, where each object's
question is its first string field among :data:`QUESTION_FIELDS` (``question``, then ``query``,
then ``title``, LFQA's column). Blank lines are skipped; a malformed line is an error that names
the file and line, never a silently wrong question.
"""

from __future__ import annotations

from pathlib import Path

from .jsonl import loads

#: Fields that may hold the question, in order of precedence (files and dataset columns alike).
QUESTION_FIELDS = ("question", "query", "title")


def bundled_questions_path() -> Path:
    """The project's own open-ended questions (about 200, written for icw), used offline by default."""
    return Path(__file__).resolve().parent / "data" / "questions.jsonl"


def read_questions(path: str | Path) -> list[tuple[str, str]]:
    """``(question, source)`` pairs from a plain-text or JSON Lines question file.

    Args:
        path (`str` or `Path`): the file. A line starting with ``{`` is read as JSON; any other
            non-blank line is a question.

    Returns:
        `list[tuple[str, str]]`: each question with its source, ``"<file stem>:<id or line index>"``
        (``"icw-questions:<id>"`` for the bundled file).

    Example:
        >>> pairs = read_questions(bundled_questions_path())
        >>> len(pairs) > 100, pairs[0][1].startswith("icw-questions:")
        (True, True)
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"question file {path} not found")
    name = "icw-questions" if path.resolve() == bundled_questions_path() else path.stem
    out: list[tuple[str, str]] = []
    try:
        content = path.read_bytes().removeprefix(b"\xef\xbb\xbf").decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"question file {path} is not UTF-8 text") from None
    # split on "\n" only: str.splitlines() would also cut at U+2028/U+2029/U+0085 inside a question
    for number, line in enumerate(content.split("\n"), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            row = loads(line, f"{path}:{number}")
            fields = [row.get(f) for f in QUESTION_FIELDS] if isinstance(row, dict) else []
            text = next((f for f in fields if isinstance(f, str) and f.strip()), None)
            if text is None:
                raise ValueError(f"{path}:{number}: expected a string field among {', '.join(QUESTION_FIELDS)}")
            out.append((text.strip(), f"{name}:{row.get('id', number - 1)}"))
        else:
            out.append((line, f"{name}:{number - 1}"))
    if not out:
        raise ValueError(f"question file {path} holds no questions")
    return out
