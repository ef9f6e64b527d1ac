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
_TAG_ENDS = re.compile(r"[\n>]")

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
    # One loop over the characters with the state in locals: this runs per token while decoding. Fenced code
    # and HTML are read by helpers, one call per block or tag; the line and sentence steps below stay inline,
    # since a call per character or per line would cost measurably.
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
        if fence:  # fenced code: only a line that opens with its closing fence matters
            if not (bol or run):  # mid-line: jump to the newline (per token while decoding, no call)
                i = text.find("\n", i)
                if i < 0:
                    break
            i, bol, run, closed = _read_fence(text, i, fence, bol, run)
            if closed:  # what follows the closing fence starts a new block
                fence, bol, run, pending, term, single = "", False, "", True, False, True
            continue
        if tag:  # HTML markup; what ends it without belonging to it (a newline, say) is read below
            i, tag, name, seen = _read_html(text, i, tag, name, seen)
            continue
        c = text[i]
        if rule and c not in _RULE_CHARS:
            rule = False
        if run and c != run[0]:  # one or two backticks at line start open inline code; tildes are text
            code, run, bol = run == "`", "", False
        if bol and (lead or not (c in _LINE_WS or (c in _FENCE_CHARS and not qline))):
            # Classify the line: does it open a block, or continue the paragraph above (a soft wrap)?
            if lead:  # "#", "-", "*", "+" or digits held: a heading or list marker, or text?
                if _extends_lead(lead, c):
                    lead += c
                    continue
                if _is_marker(lead, c):  # a heading or a list item
                    pending, term, para, single = True, False, False, lead[0] == "#"
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
        if c == "\n":  # end of the line: does the next one continue its paragraph?
            quoted = not bol and (qline or (para and quoted))
            para = not (bol or single or rule)  # bol: a blank line
            pending = (pending or term) if para else True
            bol, run, code, term, qline, single, rule = True, "", False, False, False, False, True
            continue
        if code:  # inline code, up to a backtick (or the end of the line, above)
            if c == "`":
                code = False
            else:  # nothing ends inline code before the next backtick or newline
                nxt = _CODE_ENDS.search(text, i + 1)
                i = (nxt.start() if nxt else end) - 1
            continue
        if c in _FENCE_CHARS:
            if bol:  # three at the start of a line open a fence
                run += c
                if len(run) == 3:
                    fence, bol, run = c, False, ""
                continue
            if c == "`":
                code, term = True, False
                continue
        if c in _INLINE_WS:  # whitespace after [.!?]: the sentence has ended
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


def _read_fence(text: str, i: int, fence: str, bol: bool, run: str) -> tuple[int, bool, str, bool]:
    """Read fenced code from ``text[i]`` on, up to its closing fence or the end of ``text``.

    Returns ``(i, bol, run, closed)``: the index of the last character read, the line state there, and
    whether that character completed the closing fence (three ``fence`` characters opening a line).
    """
    end = len(text)
    while i < end:
        c = text[i]
        if c == "\n":
            bol, run = True, ""
        elif bol and c == fence:
            run += c
            if len(run) == 3:
                return i, bol, run, True
        elif not (bol and not run and c in _INLINE_WS):
            # Nothing closes the fence before the next line: jump to its newline.
            bol, run, i = False, "", text.find("\n", i + 1)
            if i < 0:
                break
            continue
        i += 1
    return end - 1, bol, run, False


def _read_html(text: str, i: int, tag: int, name: str, seen: int) -> tuple[int, int, str, int]:
    """Read HTML from ``text[i]`` on, in mode ``tag``, up to the end of the markup or of ``text``.

    Returns ``(i, tag, name, seen)``, ``i`` the index of the last character read (``tag`` is 0 when the
    markup ended). A character that ends the markup without belonging to it (the newline that ends a
    tag, or what follows a ``<`` that opens no tag) is left unread: the caller reads it as text.
    """
    end = len(text)
    while tag and i < end:  # i: the next character to read
        c = text[i]
        if tag == _TAG:  # inside a tag, up to ">" or the end of the line
            stop = _TAG_ENDS.search(text, i)
            if stop is None:
                i = end
            elif text[stop.start()] == ">":
                tag, i = 0, stop.start() + 1
            else:  # other tags end with the line; the newline is text
                tag, name, i = 0, "", stop.start()
        elif tag == _LT:  # just after "<": a name that may open a comment or a script/style element
            if c == "\n" and name not in _RAW_ELEMENTS:  # the tag ends with the line; the newline is text
                tag, name = 0, ""
            elif c == "\n":  # "<script" then a newline: a start tag
                tag, i = _RAW_TAG, i + 1
            elif name:
                tag, name, seen = _read_name(name, c, seen)
                i += 1
            elif c in _NAME_STARTS:
                name, i = c.lower(), i + 1
            elif c in _TAG_OPENERS:
                tag, i = _TAG, i + 1
            else:  # the "<" was ordinary text, and so is c
                tag = 0
        elif tag == _RAW_TAG:  # a <script>/<style> start tag, up to ">" (newlines included)
            close = text.find(">", i)
            tag, i = (_RAW, close + 1) if close >= 0 else (tag, end)
        elif tag == _COMMENT:  # newlines do not end comments
            i, seen, closed = _read_comment(text, i, seen)
            if closed:
                tag, seen = 0, 0
        else:  # _RAW: a <script>/<style> element; its end tag reads as a tag, from the character after the name
            i, seen, closed = _read_raw_element(text, i, name, seen)
            if closed:
                tag, name, seen = _TAG, "", 0
    return i - 1, tag, name, seen


def _read_name(name: str, c: str, seen: int) -> tuple[int, str, int]:
    """``(tag, name, seen)`` once ``c`` follows the tag name ``name`` (non-empty) read after ``<``."""
    # Lower-case ASCII only: the processor sees every non-ASCII character as one byte.
    low = name + (c.lower() if c in _LETTERS else c)
    if low == "!--":  # seen=2: "<!-->" and "<!--->" are (empty) comments too
        return _COMMENT, "", 2
    if low in _NAME_PREFIXES:
        return _LT, low, seen
    if name in _RAW_ELEMENTS and c in _NAME_ENDS:
        return (_RAW if c == ">" else _RAW_TAG), name, seen
    return (0 if c == ">" else _TAG), "", seen  # an ordinary tag ("<s>", "<scripts", "<!DOCTYPE")


def _read_comment(text: str, i: int, seen: int) -> tuple[int, int, bool]:
    """Read an HTML comment from ``text[i]`` on, ``seen`` dashes (at most 2) just read, up to its ``-->``.

    Returns ``(i, seen, closed)``: ``i`` is where reading stopped, past the ``>`` when ``closed``.
    """
    end = len(text)
    while i < end:
        c = text[i]
        if c == "-":
            seen = min(seen + 1, 2)
        elif c == ">" and seen == 2:
            return i + 1, seen, True
        else:  # nothing closes the comment before the next "-"
            seen, i = 0, text.find("-", i + 1)
            if i < 0:
                break
            continue
        i += 1
    return end, seen, False


def _read_raw_element(text: str, i: int, name: str, seen: int) -> tuple[int, int, bool]:
    """Read a ``<script>``/``<style>`` element ``name`` from ``text[i]`` on, up to its end tag ``</name``
    (any case) followed by a character that ends the name; ``seen`` characters of ``</name`` were just read.

    Returns ``(i, seen, closed)``: ``i`` is where reading stopped, at the character after ``</name``
    when ``closed``.
    """
    close, end = "</" + name, len(text)
    while i < end:
        c = text[i]
        if seen < len(close) and (c == close[seen] or c == close[seen].upper()):
            seen += 1
        elif seen == len(close) and c in _NAME_ENDS:
            return i, seen, True
        elif c == "<":
            seen = 1
        else:  # nothing closes the element before the next "<"
            seen, i = 0, text.find("<", i + 1)
            if i < 0:
                break
            continue
        i += 1
    return end, seen, False


def _extends_lead(lead: str, c: str) -> bool:
    """Whether ``c`` continues the held line start ``lead``: up to six ``#``, or up to nine digits then ``.``/``)``."""
    kind = lead[0]
    if kind == "#":
        return c == "#" and len(lead) < 6
    if kind in _DIGITS:
        return lead[-1] in _DIGITS and ((c in _DIGITS and len(lead) < 9) or c in ".)")
    return False


def _is_marker(lead: str, c: str) -> bool:
    """Whether the held line start ``lead``, followed by ``c``, is a heading or list-item marker."""
    if lead[0] in _DIGITS:
        return lead[-1] in ".)" and c in _LINE_WS
    return c in _LINE_WS


# Plain prose: no code, HTML, quote, table or fence character anywhere, and no line opening (after its
# indentation) with a heading, list, rule or setext character. There the automaton keeps only ``pending``
# and ``term``, and a sentence starts at the first ASCII letter after the text's start, after [.!?] (and
# closers) followed by whitespace, or after a blank line: one C-level regex scan instead of a Python loop
# per sentence. tests/test_text.py checks it against the automaton on random text.
_MARKUP_CHARS = "`<>|~"
_MARKUP_LINE = re.compile(r"\n[ \t\r\x0b\x0c]*[-#*+=_0-9]")
_MARKUP_FIRST_LINE = re.compile(r"[ \t\r\x0b\x0c\n]*[-#*+=_0-9]")
_FIRST_LETTER = re.compile(r"[A-Za-z]")
_UP_TO_LAST_LETTER = re.compile(r".*[A-Za-z]", re.S)
# Led by a character set, which the regex engine skips to quickly; the lookbehinds tell the two breaks apart.
_NEXT_START = re.compile(r"[.!?\n](?:(?<=\n)[ \t\r\x0b\x0c]*\n|(?<=[.!?])[.!?\"')\]*_]*[ \t\r\x0b\x0c\n])"
                         r"[^A-Za-z]*([A-Za-z])")


def _is_plain(text: str) -> bool:
    return not (any(c in text for c in _MARKUP_CHARS) or _MARKUP_FIRST_LINE.match(text)
                or _MARKUP_LINE.search(text))


def _plain_spans(text: str) -> list[tuple[int, str]]:
    first = _FIRST_LETTER.search(text)
    if first is None:
        return []
    return [(first.start(), first.group().upper())] + [(m.start(1), m.group(1).upper())
                                                       for m in _NEXT_START.finditer(text, first.end())]


def _plain_initials(text: str, chunk: int) -> str:
    first = _FIRST_LETTER.search(text)
    if first is None:
        return ""
    letters, start = [first.group()], first.end()
    while start < len(text):
        # windows end just after an ASCII letter: every match ends at its one letter, so none straddles two
        end = len(text)
        if end - start > chunk:
            last = _UP_TO_LAST_LETTER.match(text, start, start + chunk) or _FIRST_LETTER.search(text, start + chunk)
            end = last.end() if last else end
        letters.append("".join(_NEXT_START.findall(text, start, end)))
        start = end
    return "".join(letters).upper()


def sentence_initial_spans(text: str) -> list[tuple[int, str]]:
    """Character index and upper-cased letter of every sentence start in ``text``.

    Args:
        text (`str`): the text to read (markdown aware: code and HTML are skipped).
    """
    return _plain_spans(text) if _is_plain(text) else advance(START, text)[1]


def sentence_initials(text: str, chunk: int = 1 << 16) -> str:
    """``Phi(text)``: the upper-cased first letter of every sentence, in order. The text is read
    in chunks of ``chunk`` characters, so only the letters are kept (one byte per sentence).

    Args:
        text (`str`): the text to read.
        chunk (`int`, defaults to 65536): characters read per step (bounds the memory used on long texts).
    """
    if _is_plain(text):
        return _plain_initials(text, chunk)
    state, letters = START, []
    for start in range(0, len(text), chunk):
        state, found = advance(state, text[start:start + chunk])
        letters.append("".join(letter for _, letter in found))
    return "".join(letters)
