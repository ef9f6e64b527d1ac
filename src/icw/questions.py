"""Question files: the one reader behind ICWBench (``icw bench build --questions``) and the
cold-start synthesis (``queries_file``).

A question file is plain text (one question per line) or JSON Lines, where each object's
question is its first string field among :data:`QUESTION_FIELDS` (``question``, then ``query``,
then ``title``, LFQA's column). Blank lines are skipped; a malformed line is an error that names
the file and line, never a silently wrong question.

The bundled file is split once, by a ``split`` field on every question: ``test`` questions are
ICWBench's evaluation queries (``icw bench build`` draws its test split only from them) and
``train`` questions are the offline training queries (the default of ``icw train synthesize``).
:func:`check_not_test_questions` keeps training queries from any source off the test questions.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .jsonl import loads

#: Fields that may hold the question, in order of precedence (files and dataset columns alike).
QUESTION_FIELDS = ("question", "query", "title")


def bundled_questions_path() -> Path:
    """The project's own open-ended questions (about 200, written for icw), used offline by default."""
    return Path(__file__).resolve().parent / "data" / "questions.jsonl"


def bundled_questions(split: str | None = None) -> list[tuple[str, str]]:
    """The bundled questions as ``(question, source)`` pairs: all, or one fixed split.

    Args:
        split (`str`, *optional*): ``"test"`` (ICWBench's evaluation questions) or ``"train"``
            (training queries); the two are disjoint by construction.

    Example:
        >>> test, train = bundled_questions("test"), bundled_questions("train")
        >>> len(test), len(train), bool({q for q, _ in test} & {q for q, _ in train})
        (100, 115, False)
    """
    pairs = read_questions(bundled_questions_path())
    if split is None:
        return pairs
    if split not in ("test", "train"):
        raise ValueError(f"unknown question split {split!r}; choose test or train")
    splits = bundled_question_splits()
    return [p for p in pairs if splits[p[0]] == split]


def bundled_question_splits() -> dict[str, str]:
    """Each bundled question's split (``test`` or ``train``), by question text."""
    content = bundled_questions_path().read_text(encoding="utf-8")
    rows = [loads(line, f"{bundled_questions_path()}:{n}") for n, line in enumerate(content.split("\n"), 1) if line.strip()]
    return {row["question"].strip(): row["split"] for row in rows}


def _normalize(question: str) -> str:
    return " ".join(question.split()).casefold()


def check_not_test_questions(queries: Iterable[str], source: str) -> None:
    """Raise ``ValueError`` naming the overlap if any query is an ICWBench test question.

    Training on an evaluation question would leak it into the model that is later benchmarked on
    it. Questions are compared after collapsing whitespace and case.

    Args:
        queries: the training queries.
        source (`str`): where they came from, for the message (e.g. ``"queries_file my.txt"``).

    Example:
        >>> check_not_test_questions([q for q, _ in bundled_questions("train")], "the train split")
        >>> check_not_test_questions(["Why do we dream?", bundled_questions("test")[0][0]], "my.txt")
        Traceback (most recent call last):
        ...
        ValueError: my.txt: 1 query is an ICWBench test question (icw-questions:0 'Why does the sky look blue during the day but orange and red at sunset?'); remove it, or leave queries_file and dataset_name unset to use the bundled train questions
    """
    test = {_normalize(q): (q, where) for q, where in bundled_questions("test")}
    overlap = list(dict.fromkeys(test[n] for n in map(_normalize, queries) if n in test))
    if overlap:
        shown = "; ".join(f"{where} {q!r}" for q, where in overlap[:3]) + ("; ..." if len(overlap) > 3 else "")
        many = len(overlap) > 1
        what = "queries are ICWBench test questions" if many else "query is an ICWBench test question"
        raise ValueError(f"{source}: {len(overlap)} {what} ({shown}); remove {'them' if many else 'it'}, or leave "
                         "queries_file and dataset_name unset to use the bundled train questions")


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
