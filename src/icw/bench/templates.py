"""Held-out instruction templates: a second wording per family, written for this project.

They carry the same key material as the paper's templates (:data:`icw.keys.TEMPLATES`) in
different words and layout, to test whether a model follows the *idea* of an ICW instruction
rather than one memorised phrasing (``icw bench run --template heldout``).
"""

from __future__ import annotations

from ..keys import TEMPLATES

HELDOUT_TEMPLATES = {
    "tsp": (
        "Vocabulary hint. Below, between the markers, is a list of preferred tokens separated by '|'.\n"
        "BEGIN PREFERRED TOKENS\n{green_tokens}\nEND PREFERRED TOKENS\n\n"
        "Write a helpful, natural answer to the question that follows. Wherever a preferred token\n"
        "fits just as well as another word, choose the preferred one. Do not list or mention the tokens."
    ),
    "wip": (
        "Style constraint for this answer.\n"
        "Favoured first letters: {green_letters}\n"
        "Disfavoured first letters: {red_letters}\n\n"
        "Answer the question below accurately and clearly. When choosing between words of similar\n"
        "meaning, pick words whose first letter is favoured and avoid words whose first letter is\n"
        "disfavoured. Keep the letter lists to yourself."
    ),
    "sa": (
        "Hidden pattern: {secret}\n\n"
        "Answer the question below in ordinary prose. Try to open consecutive sentences with the\n"
        "letters of the hidden pattern, in order: when the next sentence can naturally begin with the\n"
        "current letter, do so and move on to the following letter; if three sentences in a row cannot,\n"
        "skip that letter. After the last letter, write freely. Never emphasise the first letters and\n"
        "never mention the pattern."
    ),
}

#: Named template sets accepted by ``--template`` (any other value is read as a file path).
TEMPLATE_SETS = {"paper": TEMPLATES, "heldout": HELDOUT_TEMPLATES}


def template_for(name: str | None, family: str) -> str | None:
    """The template text for ``family`` under ``name`` (None: the paper's default), or a
    template read from a file; a ``.json`` file maps family -> template."""
    if name in (None, "paper"):
        return None
    if name in TEMPLATE_SETS:
        return TEMPLATE_SETS[name][family]
    import json
    from pathlib import Path

    path = Path(name)
    if not path.is_file():
        raise ValueError(f"--template must be 'paper', 'heldout' or a template file; {name!r} is none of these")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        mapping = json.loads(text)
        if family not in mapping:
            raise ValueError(f"{name} has no template for family {family!r}")
        return mapping[family]
    return text
