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
* fenced code blocks (a line opening with three backticks), inline code and HTML tags
  (``<`` followed by a letter, ``/`` or ``!``, up to ``>``) are dropped;
* letters are ASCII only and reported upper-cased (the SA statistic is case-insensitive).

Example:
    >>> sentence_initials("# Heading\\nHello world. Another one!\\n- item `code`\\n```\\nNot this.\\n```")
    'HHAI'
"""

from __future__ import annotations

import re
from typing import NamedTuple

_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_INLINE_WS = frozenset(" \t\r\x0b\x0c")
_TERMINALS = frozenset(".!?")
_CLOSERS = frozenset("\"')]*_")
_TAG_OPENERS = _LETTERS | frozenset("/!")
_NEXT_IF_SETTLED = re.compile(r"[\n`<.!?]")
_NEXT_IF_PENDING = re.compile(r"[\n`<.!?A-Za-z]")


class SentenceState(NamedTuple):
    """State of the sentence automaton between two characters."""

    fence: bool = False  # inside a fenced code block
    bol: bool = True  # only indentation seen on this line so far
    ticks: int = 0  # backticks seen at the start of this line
    code: bool = False  # inside inline code
    tag: int = 0  # 0 outside HTML, 1 just after "<", 2 inside a tag
    pending: bool = True  # the next ASCII letter opens a sentence
    term: bool = False  # just after sentence-final punctuation (and closers)

    @property
    def opens_sentence(self) -> bool:
        """The next letter, whatever whitespace precedes it, opens a sentence."""
        return self.pending and not (self.fence or self.code or self.tag or self.ticks)

    @property
    def ends_sentence(self) -> bool:
        """Whitespace followed by a letter would open a sentence (we are right after [.!?])."""
        return self.term and not (self.pending or self.fence or self.code or self.tag or self.ticks)


START = SentenceState()


def advance(state: SentenceState, text: str, offset: int = 0) -> tuple[SentenceState, list[tuple[int, str]]]:
    """Feed ``text`` to the automaton; return the new state and the sentence-initial letters
    found, as ``(offset + index, LETTER)`` pairs."""
    fence, bol, ticks, code, tag, pending, term = state
    found: list[tuple[int, str]] = []
    i, end = -1, len(text)
    while True:
        i += 1
        if not (fence or code or tag or ticks or term or bol):
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
                bol, ticks = True, 0
            elif bol and c == "`":
                ticks += 1
                if ticks == 3:  # closing fence: what follows starts a new block
                    fence, bol, ticks, pending, term = False, False, 0, True, False
            elif not (bol and ticks == 0 and c in _INLINE_WS):
                bol, ticks = False, 0
            continue
        if ticks and c != "`":  # one or two backticks at line start were inline code, not a fence
            code, ticks, bol = ticks == 1, 0, False
        if c == "\n":
            bol, ticks, code, tag, pending, term = True, 0, False, 0, True, False
            continue
        if code:
            if c == "`":
                code = False
            continue
        if tag == 2:
            if c == ">":
                tag = 0
            continue
        if tag == 1:
            if c in _TAG_OPENERS:
                tag = 2
                continue
            tag = 0  # the "<" was ordinary text: handle c normally
        if c == "`":
            if bol:
                ticks += 1
                if ticks == 3:
                    fence, bol, ticks = True, False, 0
            else:
                code, term = True, False
            continue
        if c in _INLINE_WS:
            if term:
                pending, term = True, False
            continue
        bol = False
        if c == "<":
            tag, term = 1, False
        elif c in _TERMINALS:
            term = True
        elif term and c in _CLOSERS:
            pass
        else:
            term = False
            if pending and c in _LETTERS:
                found.append((offset + i, c.upper()))
                pending = False
    return SentenceState(fence, bol, ticks, code, tag, pending, term), found


def sentence_initial_spans(text: str) -> list[tuple[int, str]]:
    """Character index and upper-cased letter of every sentence start in ``text``."""
    return advance(START, text)[1]


def sentence_initials(text: str) -> str:
    """``Phi(text)``: the upper-cased first letter of every sentence, in order."""
    return "".join(letter for _, letter in sentence_initial_spans(text))
