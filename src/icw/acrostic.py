"""The SA perturbation's state along a response: which sentence-start tokens ``Delta_t`` biases at each step.

:class:`~icw.processors.SentenceAcrosticLogitsProcessor` runs it while generating, SDLP's teacher replays it along a
known response (:func:`sa_bias_codes`), so both apply the same ``Delta_t``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .text import START, SentenceState, advance
from .vocab import VocabularyView

#: Row of :func:`sa_bias_rows` that adds nothing (the acrostic is inactive).
SA_NO_BIAS = 52


def sa_bias_rows(view: VocabularyView) -> np.ndarray:
    """``(53, |V|)`` boolean rows of the SA bias: 0-25 tokens opening a sentence with that
    letter; 26-51 the same restricted to tokens that start with whitespace (right after
    ``[.!?]`` whitespace must come first); :data:`SA_NO_BIAS` none.

    Args:
        view (`VocabularyView`): the tokenizer's vocabulary facts.
    """
    rows = np.zeros((53, view.size), dtype=bool)
    for c in range(26):
        rows[c] = view.lead_letter == c
        rows[26 + c] = rows[c] & view.lead_space
    return rows


class SentenceMoves:
    """The sentence automaton of :mod:`icw.text` stepped one token at a time: each
    (state, token) transition is computed once from the token's surface, then memoized.

    Args:
        view (`VocabularyView`): the tokenizer's vocabulary facts (token surfaces).
    """

    def __init__(self, view: VocabularyView) -> None:
        self.view = view
        self._cache: dict[tuple[SentenceState, int], tuple[SentenceState, str]] = {}

    def __call__(self, state: SentenceState, token: int) -> tuple[SentenceState, str]:
        """The next state and the sentence-initial letters the token completes."""
        found = self._cache.get((state, token))
        if found is None:
            surface = self.view.surfaces[token] if 0 <= token < self.view.size else ""
            new, letters = advance(state, surface)
            found = self._cache[(state, token)] = (new, "".join(c for _, c in letters))
        return found


class AcrosticState:
    """One row of the SA perturbation: automaton state, target index ``tau`` and miss counter
    ``f``. :meth:`bias_row` is ``Delta_t`` (a row of :func:`sa_bias_rows`) before a token,
    :meth:`observe` advances past it. Generation (the processor) and teacher forcing (SDLP's
    replay) share this, so both apply the same ``Delta_t``.

    Args:
        secret (`str`): the SA secret ``S`` (upper-case letters).
        moves (`SentenceMoves` or `None`): the tokenizer's shared, memoized automaton transitions (`None`:
            text already split into sentence-initial letters, fed one at a time to :meth:`read`).
    """

    max_misses = 3

    def __init__(self, secret: str, moves: SentenceMoves | None = None) -> None:
        self.secret, self.moves = secret.upper(), moves
        self.state: SentenceState = START
        self.target = self.misses = 0
        self.letters = ""

    def bias_row(self) -> int:
        if self.target < len(self.secret):
            if self.state.opens_sentence:
                return ord(self.secret[self.target]) - 65
            if self.state.ends_sentence:
                return 26 + ord(self.secret[self.target]) - 65
        return SA_NO_BIAS

    def observe(self, token: int) -> None:
        self.state, letters = self.moves(self.state, token)
        self.letters += letters
        for letter in letters:
            self.read(letter)

    def read(self, letter: str) -> bool:
        """Advance past one sentence-initial letter: on a hit, or on the ``max_misses``-th miss in a row.
        Returns whether it hit; always `False` once the secret is spent."""
        if self.target >= len(self.secret):
            return False
        hit = letter == self.secret[self.target]
        if hit or self.misses + 1 >= self.max_misses:
            self.target, self.misses = self.target + 1, 0
        else:
            self.misses += 1
        return hit


def sa_bias_codes(secret: str, response_ids: Sequence[int], view: VocabularyView) -> list[int]:
    r"""Replay the SA perturbation along a known response (teacher forcing): per position ``t``, the row
    of :func:`sa_bias_rows` that is ``Delta_t`` (:data:`SA_NO_BIAS` when inactive), by the
    :class:`AcrosticState` that :class:`SentenceAcrosticLogitsProcessor` runs while generating.

    Args:
        secret (`str`): the SA secret ``S``.
        response_ids (`Sequence[int]`): the response's token ids.
        view (`VocabularyView`): the tokenizer's vocabulary facts.
    """
    row = AcrosticState(secret, SentenceMoves(view))
    codes = []
    for token in response_ids:
        codes.append(row.bias_row())
        row.observe(token)
    return codes
