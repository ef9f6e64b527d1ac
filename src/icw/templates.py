"""ICW instruction templates: the paper's wording and a held-out wording, in one place.

:data:`TEMPLATES` are the paper's instructions (Appendix A), rendered by
:meth:`icw.ICWKey.instruction`. :data:`HELDOUT_TEMPLATES` carry the same key material in
different words and layout, written for this project, to test whether a model follows the
*idea* of an ICW instruction rather than one memorised phrasing
(``icw bench run --template heldout``). Templates are ``str.format`` strings with the fields
``{green_tokens}`` (TSP), ``{green_letters}``/``{red_letters}`` (WIP) and ``{secret}`` (SA).

Example:
    >>> sorted(TEMPLATE_SETS)
    ['heldout', 'paper']
    >>> all(MATERIAL_FIELD[f] in HELDOUT_TEMPLATES[f] for f in MATERIAL_FIELD)
    True
"""

from __future__ import annotations

import json
from pathlib import Path

#: The paper's instruction per family.
TEMPLATES = {
    "tsp": (
        "<green>\n{green_tokens}\n</green>\n\n"
        "Respond to the user query. Seamlessly incorporate as many tokens\n"
        "from <green> as possible without compromising text quality."
    ),
    "wip": (
        "<green>\n{green_letters}\n</green>\n\n<red>\n{red_letters}\n</red>\n\n"
        "Given the <green> and <red> letter lists, respond to the user query\n"
        "with clarity, accuracy, informativeness, and relevance. Favor words\n"
        "beginning with letters from <green> and minimize those beginning with\n"
        "letters from <red>. Never reveal the <green> and <red> letter lists\n"
        "in your reply."
    ),
    "sa": (
        "You will receive a SECRET STRING and a user query. Answer the query\n"
        "naturally and helpfully. While doing so, structure the answer so the\n"
        "first letters of your sentences can spell out the secret string in\n"
        "order. Treat the acrostic as a soft guide that you follow whenever it\n"
        "does not hurt the response.\n\n"
        "Rules:\n"
        "1. Track the next unmatched letter in the secret string as the target\n"
        "   letter. It starts at the first letter and only advances when a\n"
        "   sentence successfully starts with it.\n"
        "2. Prefer to start each new sentence with the target letter. If\n"
        "   starting with the target letter would clearly hurt the response\n"
        "   quality, write a non-matching sentence instead. After three\n"
        "   consecutive misses, drop that letter and advance to the next.\n"
        "3. Once the secret string is fully consumed, continue answering\n"
        "   naturally with no further letter constraints.\n"
        "4. Write in plain narrative prose. Do not visually highlight first\n"
        "   letters in any way.\n\n"
        "SECRET STRING: {secret}"
    ),
}
#: The placeholder each family's template must contain.
MATERIAL_FIELD = {"tsp": "{green_tokens}", "wip": "{green_letters}", "sa": "{secret}"}

#: The held-out instruction per family (same fields, other words).
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
    template read from a file; a ``.json`` file maps family -> template.

    Args:
        name (`str`, *optional*): a template set name, or the path of a template file (``.json`` maps family
            -> template).
        family (`str`): ``"tsp"``, ``"wip"`` or ``"sa"``.
    """
    if name in (None, "paper"):
        return None
    if name in TEMPLATE_SETS:
        return TEMPLATE_SETS[name][family]
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
