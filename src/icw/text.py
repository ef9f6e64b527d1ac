"""Sentence-initial letters of a text: ``Phi(y)`` of the Sentence Acrostic family.

``Phi`` is defined by one character-level automaton, so the verifier (which runs it over a
whole text) and :class:`~icw.processors.SentenceAcrosticLogitsProcessor` (which runs it one
token surface at a time while decoding) can never disagree about where sentences start.

Rules, applied left to right (CommonMark blocks, simplified; docs/sentences.md has the
conformance table):

* a text is a sequence of blocks, and the first ASCII letter of a block opens a sentence;
  markup before it (``#``, ``-``, ``1.``, ``>``, ``**``) is skipped;
* consecutive non-blank lines form one paragraph: a line break inside a paragraph (a soft
  wrap) is whitespace, not a sentence start. A blank line ends the paragraph, and so does a
  line that opens a block: a heading (``#`` to ``######`` then a blank), a list item (``-``,
  ``*``, ``+`` or ``1.``/``1)`` then a blank), a block quote (``>``, when the paragraph was
  not already quoted), a table row (``|``), a fence or an HTML line (``<``). A heading or a
  table row is one line; a line of only ``-``, ``=``, ``*``, ``_`` (a rule or setext
  underline) also ends the paragraph;
* inside a block a sentence ends at ``.``, ``!`` or ``?`` (optionally followed by closing
  quotes, brackets or emphasis ``"')]*_``) followed by ASCII whitespace (a newline included);
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
    >>> sentence_initials("The fox jumps over\\nthe lazy dog. Another\\nsentence.\\n\\n> Quoted\\n> text.")
    'TAQ'
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
_LINE_WS = _INLINE_WS | frozenset("\n")
_DIGITS = frozenset("0123456789")
_LEAD_CHARS = _DIGITS | frozenset("#-*+")  # may open a heading or a list item: wait for the next character
_RULE_CHARS = _LINE_WS | frozenset("-=*_>")  # a line of only these (and some of them) ends a paragraph
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
    para: bool = False  # this line continues a paragraph (while ``bol``: the previous line was paragraph text)
    quoted: bool = False  # that paragraph is inside a block quote
    qline: bool = False  # this line opened with ">"
    lead: str = ""  # "#", "-", "*", "+" or digits (then "." or ")") held at the line start: marker or text?
    single: bool = False  # this line is a heading, a table row or a closing fence: the next one opens a block
    rule: bool = True  # this line has only "-", "=", "*", "_", ">" and blanks so far

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
    found, as ``(offset + index, LETTER)`` pairs.

    Args:
        state (`SentenceState`): the automaton state after the text read so far.
        text (`str`): the next chunk of text.
        offset (`int`, defaults to 0): the chunk's character offset in the whole text, added to the returned
            indices.
    """
    fence, bol, run, code, tag, name, seen, pending, term, para, quoted, qline, lead, single, rule = state
    found: list[tuple[int, str]] = []
    i, end = -1, len(text)
    while True:
        i += 1
        if not (fence or code or tag or run or term or bol or rule):
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
                    fence, bol, run, pending, term, single = "", False, "", True, False, True
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
        if rule and c not in _RULE_CHARS:
            rule = False
        if run and c != run[0]:  # one or two backticks at line start open inline code; tildes are text
            code, run, bol = run == "`", "", False
        if bol and (lead or not (c in _LINE_WS or (c in _FENCE_CHARS and not qline))):
            # Classify the line: does it open a block, or continue the paragraph above (a soft wrap)?
            if lead:
                kind = lead[0]
                if kind == "#":
                    if c == "#" and len(lead) < 6:
                        lead += c
                        continue
                    marker = c in _LINE_WS
                elif kind in _DIGITS:  # up to 9 digits, then "." or ")"
                    if lead[-1] in _DIGITS and ((c in _DIGITS and len(lead) < 9) or c in ".)"):
                        lead += c
                        continue
                    marker = lead[-1] in ".)" and c in _LINE_WS
                else:  # "-", "*", "+"
                    marker = c in _LINE_WS
                if marker:  # a heading or a list item
                    pending, term, para, single = True, False, False, kind == "#"
                else:  # text after all ("#5", "-3 C", "**bold**", "3.5"): only a final "." matters
                    term = lead[-1] == "."
                lead, bol = "", False
            elif c == ">":  # a quote marker; the line stays undecided (lazy continuation)
                qline = True
                if para and not quoted:
                    pending, term, para = True, False, False
                continue
            elif c in _LEAD_CHARS:
                lead = c
                continue
            else:
                bol = False
                if c == "|" or c == "<":  # a table row or an HTML line opens a block
                    pending, term, para, single = True, False, False, c == "|"
        if c == "\n":
            quoted = not bol and (qline or (para and quoted))
            para = not (bol or single or rule)  # bol: a blank line
            pending = (pending or term) if para else True
            bol, run, code, term, qline, single, rule = True, "", False, False, False, False, True
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
    return SentenceState(fence, bol, run, code, tag, name, seen, pending, term, para, quoted, qline, lead, single,
                         rule), found


def sentence_initial_spans(text: str) -> list[tuple[int, str]]:
    """Character index and upper-cased letter of every sentence start in ``text``.

    Args:
        text (`str`): the text to read (markdown aware: code and HTML are skipped).
    """
    return advance(START, text)[1]


def sentence_initials(text: str, chunk: int = 1 << 16) -> str:
    """``Phi(text)``: the upper-cased first letter of every sentence, in order. The text is read
    in chunks of ``chunk`` characters, so only the letters are kept (one byte per sentence).

    Args:
        text (`str`): the text to read.
        chunk (`int`, defaults to 65536): characters read per step (bounds the memory used on long texts).
    """
    state, letters = START, []
    for start in range(0, len(text), chunk):
        state, found = advance(state, text[start:start + chunk])
        letters.append("".join(letter for _, letter in found))
    return "".join(letters)
