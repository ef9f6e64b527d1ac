"""Sentence-initial letters of a text: ``Phi(y)`` of the Sentence Acrostic family.

``Phi`` is defined by one character-level automaton, so the verifier (which runs it over a
whole text) and :class:`~icw.processors.SentenceAcrosticLogitsProcessor` (which runs it one
token surface at a time while decoding) can never disagree about where sentences start.

Rules, applied left to right:

* every line starts a new block (headings, list items, quotes, table rows are blocks), and
  the first ASCII letter of a block is a sentence-initial letter; markup before it
  (``#``, ``-``, ``1.``, ``>``, ``**``) is skipped;
* inside a block a sentence ends at ``.``, ``!`` or ``?`` (optionally followed by closing
  quotes, brackets or emphasis ``"')]*_``) followed by ASCII whitespace;
* fenced code blocks (a line opening with three backticks or three tildes, up to a line
  opening with three of the same), inline code and HTML tags (``<`` followed by a letter,
  ``/`` or ``!``, up to ``>`` or the end of the line) are dropped;
* so are HTML comments (``<!--`` up to ``-->``) and ``<script>``/``<style>`` elements (up to
  their end tag, any case), newlines included: they may span lines and a newline inside
  them starts no block;
* letters are ASCII only and reported upper-cased (the SA statistic is case-insensitive).

Example:
    >>> sentence_initials("# Heading\\nHello world. Another one!\\n- item `code`\\n```\\nNot this.\\n```")
    'HHAI'
    >>> sentence_initials("Intro.\\n~~~\\nNot this.\\n~~~\\n<!-- a > b. Zed. --> Real <style>p {}</style> text.")
    'IR'
"""

from __future__ import annotations

import re
from typing import NamedTuple

_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_INLINE_WS = frozenset(" \t\r\x0b\x0c")
_TERMINALS = frozenset(".!?")
_CLOSERS = frozenset("\"')]*_")
_FENCE_CHARS = frozenset("`~")
_TAG_OPENERS = _LETTERS | frozenset("/!")
_NAME_ENDS = _INLINE_WS | frozenset("\n/>")  # what may follow "<script" or "</script"
_RAW_ELEMENTS = frozenset(("script", "style"))
# Names after "<" (lower-cased) still worth reading: prefixes of "!--" (which opens a comment
# at once) and of the raw element names, whole ones included; _NAME_STARTS are their first characters.
_NAME_PREFIXES = frozenset(w[:k] for w in ("!--", *_RAW_ELEMENTS) for k in range(1, len(w))) | _RAW_ELEMENTS
_NAME_STARTS = frozenset("!sS")
_NEXT_IF_SETTLED = re.compile(r"[\n`<.!?]")
_NEXT_IF_PENDING = re.compile(r"[\n`<.!?A-Za-z]")
_CODE_ENDS = re.compile(r"[\n`]")

# HTML modes of SentenceState.tag.
_LT = 1  # just after "<", reading the tag name into ``name``
_TAG = 2  # inside a tag, up to ">" or the end of the line
_RAW_TAG = 3  # inside a <script>/<style> start tag (``name``), up to ">"
_RAW = 4  # inside a <script>/<style> element (``name``); ``seen`` chars of "</name" matched
_COMMENT = 5  # inside "<!--"; ``seen`` trailing dashes, at most 2


class SentenceState(NamedTuple):
    """State of the sentence automaton between two characters."""

    fence: str = ""  # inside a fenced code block: its fence character, "`" or "~"
    bol: bool = True  # only indentation seen on this line so far
    run: str = ""  # fence characters (all the same) seen at the start of this line
    code: bool = False  # inside inline code
    tag: int = 0  # 0 outside HTML, else one of the _LT ... _COMMENT modes
    name: str = ""  # tag name read after "<", or the open raw element ("script", "style")
    seen: int = 0  # progress towards the end of a raw element or comment
    pending: bool = True  # the next ASCII letter opens a sentence
    term: bool = False  # just after sentence-final punctuation (and closers)

    @property
    def opens_sentence(self) -> bool:
        """The next letter, whatever whitespace precedes it, opens a sentence."""
        return self.pending and not (self.fence or self.code or self.tag or self.run)

    @property
    def ends_sentence(self) -> bool:
        """Whitespace followed by a letter would open a sentence (we are right after [.!?])."""
        return self.term and not (self.pending or self.fence or self.code or self.tag or self.run)


START = SentenceState()


def advance(state: SentenceState, text: str, offset: int = 0) -> tuple[SentenceState, list[tuple[int, str]]]:
    """Feed ``text`` to the automaton; return the new state and the sentence-initial letters
    found, as ``(offset + index, LETTER)`` pairs."""
    fence, bol, run, code, tag, name, seen, pending, term = state
    found: list[tuple[int, str]] = []
    i, end = -1, len(text)
    while True:
        i += 1
        if not (fence or code or tag or run or term or bol):
            # Plain prose mid-line: only these characters can change the state, so jump to the next one.
            nxt = (_NEXT_IF_PENDING if pending else _NEXT_IF_SETTLED).search(text, i)
            if nxt is None:
                break
            i = nxt.start()
        if i >= end:
            break
        c = text[i]
        if fence:
            if c == "\n":
                bol, run = True, ""
            elif bol and c == fence:
                run += c
                if len(run) == 3:  # closing fence: what follows starts a new block
                    fence, bol, run, pending, term = "", False, "", True, False
            elif not (bol and not run and c in _INLINE_WS):
                # Nothing closes the fence before the next line: jump to its newline.
                bol, run, nxt_nl = False, "", text.find("\n", i + 1)
                i = (nxt_nl if nxt_nl >= 0 else end) - 1
            continue
        if tag:
            if tag > _TAG:  # comments and script/style elements: newlines do not end them
                if tag == _RAW_TAG:
                    if c == ">":
                        tag = _RAW
                    continue
                if tag == _COMMENT:
                    if c == "-":
                        seen = min(seen + 1, 2)
                    elif c == ">" and seen == 2:
                        tag, seen = 0, 0
                    else:  # nothing closes the comment before the next "-"
                        seen, nxt_dash = 0, text.find("-", i + 1)
                        i = (nxt_dash if nxt_dash >= 0 else end) - 1
                    continue
                close = "</" + name  # tag == _RAW
                if seen < len(close) and (c == close[seen] or c == close[seen].upper()):
                    seen += 1
                    continue
                if seen < len(close) or c not in _NAME_ENDS:
                    if c == "<":
                        seen = 1
                    else:  # nothing closes the element before the next "<"
                        seen, nxt_lt = 0, text.find("<", i + 1)
                        i = (nxt_lt if nxt_lt >= 0 else end) - 1
                    continue
                tag, name, seen = _TAG, "", 0  # its end tag: c is handled inside it, below
            if c == "\n":
                if tag == _LT and name in _RAW_ELEMENTS:  # "<script" then a newline: a start tag
                    tag = _RAW_TAG
                    continue
                tag, name = 0, ""  # other tags end with the line; the newline is handled below
            elif tag == _TAG:
                if c == ">":
                    tag = 0
                continue
            else:  # tag == _LT: reading a name that may open a comment or a script/style element
                if name:
                    # Lower-case ASCII only: the processor sees every non-ASCII character as one byte.
                    low = name + (c.lower() if c in _LETTERS else c)
                    if low == "!--":  # seen=2: "<!-->" and "<!--->" are (empty) comments too
                        tag, name, seen = _COMMENT, "", 2
                    elif low in _NAME_PREFIXES:
                        name = low
                    elif name in _RAW_ELEMENTS and c in _NAME_ENDS:
                        tag = _RAW if c == ">" else _RAW_TAG
                    else:  # an ordinary tag ("<s>", "<scripts", "<!DOCTYPE")
                        tag, name = (0 if c == ">" else _TAG), ""
                    continue
                if c in _NAME_STARTS:
                    name = c.lower()
                    continue
                if c in _TAG_OPENERS:
                    tag = _TAG
                    continue
                tag = 0  # the "<" was ordinary text: handle c normally
        if run and c != run[0]:  # one or two backticks at line start open inline code; tildes are text
            code, run, bol = run == "`", "", False
        if c == "\n":
            bol, run, code, pending, term = True, "", False, True, False
            continue
        if code:
            if c == "`":
                code = False
            else:  # nothing ends inline code before the next backtick or newline
                nxt = _CODE_ENDS.search(text, i + 1)
                i = (nxt.start() if nxt else end) - 1
            continue
        if c in _FENCE_CHARS:
            if bol:
                run += c
                if len(run) == 3:
                    fence, bol, run = c, False, ""
                continue
            if c == "`":
                code, term = True, False
                continue
        if c in _INLINE_WS:
            if term:
                pending, term = True, False
            continue
        bol = False
        if c == "<":
            tag, term = _LT, False
        elif c in _TERMINALS:
            term = True
        elif term and c in _CLOSERS:
            pass
        else:
            term = False
            if pending and c in _LETTERS:
                found.append((offset + i, c.upper()))
                pending = False
    return SentenceState(fence, bol, run, code, tag, name, seen, pending, term), found


def sentence_initial_spans(text: str) -> list[tuple[int, str]]:
    """Character index and upper-cased letter of every sentence start in ``text``."""
    return advance(START, text)[1]


def sentence_initials(text: str) -> str:
    """``Phi(text)``: the upper-cased first letter of every sentence, in order."""
    return "".join(letter for _, letter in sentence_initial_spans(text))
