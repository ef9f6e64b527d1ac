"""Logit perturbations ``Delta_t(psi; kappa)`` as transformers ``LogitsProcessor`` s.

Each processor takes one key per batch row (a single key is shared), so one ``generate``
call can watermark a batch under different keys. Rows are matched to keys in order; when
``generate`` expands rows (``num_return_sequences`` or ``num_beams``), each key covers its
consecutive copies, as transformers lays them out.

Decoding strategies. TSP and WIP are stateless (the bias depends on the key only), so they
work under every strategy. SA is stateful; it supports greedy search, sampling
(``num_return_sequences`` included), beam search (``num_beams``, any ``num_return_sequences``)
and assisted decoding (``assistant_model=`` or ``prompt_lookup_num_tokens=``): each call
matches every row to the row of the previous call with the same prefix and key (beam search
reorders rows), and a row that is not one token longer than its match (assisted decoding
appends several tokens at once, then may roll back rejected ones) is replayed from the
prompt. After ``generate``, pass the returned sequences to
:meth:`SentenceAcrosticLogitsProcessor.finish` to get the letters of each returned row.
Not supported: encoder-decoder models (the prompt is not in ``input_ids``) and reusing one
SA processor for a new ``generate`` call that continues the previous output without
``finish``/``reset`` in between (it would be read as the same generation).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from transformers import LogitsProcessor

from .keys import DEFAULT_DELTA, ICWKey, ICWKeyError, as_key, green_mask
from .text import START, SentenceState, advance
from .vocab import VocabularyView


def _keys(keys: Any, family: str) -> list[ICWKey]:
    keys = [as_key(k) for k in ([keys] if isinstance(keys, (ICWKey, str, dict)) else list(keys))]
    if not keys:
        raise ICWKeyError("no keys given: pass one key, or one key per batch row")
    wrong = {k.family for k in keys} - {family}
    if wrong:
        raise ICWKeyError(f"this processor implements the {family} family but got {', '.join(sorted(wrong))} key(s)")
    return keys


def _row_index(num_keys: int, rows: int) -> torch.Tensor | None:
    """Key index of each row, or None when a single key serves every row."""
    if num_keys == 1:
        return None
    if rows % num_keys:
        raise ValueError(f"got {num_keys} keys for a batch of {rows} rows: pass one key per prompt or per row")
    return torch.arange(num_keys).repeat_interleave(rows // num_keys)


class _BiasCache:
    """A ``(num_keys, vocab)`` table moved and padded to the logits' device, dtype and width once."""

    def __init__(self, table: np.ndarray) -> None:
        self.table = torch.from_numpy(table)
        self._placed: dict[tuple, torch.Tensor] = {}

    def get(self, scores: torch.Tensor) -> torch.Tensor:
        place = (scores.device, scores.dtype, scores.shape[-1])
        if place not in self._placed:
            width = scores.shape[-1]
            table = self.table[:, :width]
            if table.shape[1] < width:  # the model's embedding is often padded past the tokenizer
                table = torch.nn.functional.pad(table, (0, width - table.shape[1]))
            self._placed[place] = table.to(device=scores.device, dtype=scores.dtype)
        return self._placed[place]


class _StaticBiasLogitsProcessor(LogitsProcessor):
    family: str

    def __init__(self, keys: ICWKey | str | list, tokenizer: Any, delta: float | None = None) -> None:
        self.keys = _keys(keys, self.family)
        self.delta = DEFAULT_DELTA[self.family] if delta is None else float(delta)
        view = self.keys[0].check_tokenizer(tokenizer)
        table = np.stack([green_mask(k, view) for k in self.keys]).astype(np.float32) * self.delta
        self._bias = _BiasCache(table)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        bias = self._bias.get(scores)
        index = _row_index(len(self.keys), scores.shape[0])
        return scores + (bias if index is None else bias[index.to(scores.device)])


class TokenSetPreferenceLogitsProcessor(_StaticBiasLogitsProcessor):
    r"""Token-Set Preference: ``Delta_t[v] = delta * 1[v in T]`` at every step.

    Args:
        keys: a TSP key (shared) or one per prompt/row.
        tokenizer: the tokenizer the keys were built for.
        delta: bias strength (3.0 in the paper's synthesis, 5.0 when training).

    Example:
        >>> from icw import ICWKey
        >>> from icw.models import load_model
        >>> model, tok = load_model()
        >>> key = ICWKey.create("tsp", seed=1, tokenizer=tok)
        >>> inputs = tok(["The weather today"], return_tensors="pt")
        >>> out = model.generate(**inputs, logits_processor=[TokenSetPreferenceLogitsProcessor(key, tok)],
        ...                      max_new_tokens=20, do_sample=False)
    """

    family = "tsp"


class WordInitialPreferenceLogitsProcessor(_StaticBiasLogitsProcessor):
    r"""Word-Initial Preference: ``Delta_t[v] = delta * 1[v in V_en^word and phi(v) in L]``.

    Applied at every step, not only at word boundaries (gating on boundaries misses most word
    starts under BPE, where the space is part of the next token).
    """

    family = "wip"


class SentenceAcrosticLogitsProcessor(LogitsProcessor):
    r"""Sentence Acrostic: a stateful bias towards the next letter of the secret ``S``.

    Per row the processor keeps the sentence automaton of :mod:`icw.text`, a target index
    ``tau`` and a miss counter ``f``. A step is *active* when ``tau < |S|`` and the text so
    far ends a sentence; then ``Delta_t[v] = delta * 1[v opens a sentence with S[tau]]``
    (after ``[.!?]`` only tokens starting with whitespace can). Each sentence-initial letter
    the model emits advances ``tau`` on a match, or after three consecutive misses.

    State updates are O(1) per row and step when rows keep their order (greedy search,
    sampling): each token's effect on the automaton is computed once from its surface and
    memoized, so nothing is re-decoded. Under beam search each row continues the state of
    the previous row with the same prefix; under assisted decoding a row is replayed from the
    prompt (O(length), memoized per token). The first call of a ``generate`` (or any call
    whose rows continue no row of the previous call) starts a new generation: the whole
    input is the prompt.

    ``finish(sequences)`` returns the sentence-initial letters of each returned sequence,
    which equal :func:`icw.text.sentence_initials` of its decoded continuation.

    Args:
        keys: an SA key (shared) or one per prompt/row.
        tokenizer: the tokenizer of the model (its vocabulary gives each token's surface).
        delta: bias strength (8.0 when training).

    Example:
        >>> from icw import ICWKey
        >>> from icw.models import load_model
        >>> model, tok = load_model()
        >>> proc = SentenceAcrosticLogitsProcessor(ICWKey.create("sa", seed=1), tok)
        >>> inputs = tok(["The weather today"], return_tensors="pt")
        >>> out = model.generate(**inputs, logits_processor=[proc], max_new_tokens=20, num_beams=2)
        >>> letters = proc.finish(out)  # one string of sentence-initial letters per returned row
    """

    family = "sa"

    def __init__(self, keys: ICWKey | str | list, tokenizer: Any, delta: float | None = None) -> None:
        self.keys = _keys(keys, self.family)
        self.delta = DEFAULT_DELTA[self.family] if delta is None else float(delta)
        self.view: VocabularyView = self.keys[0].check_tokenizer(tokenizer)
        self._moves = SentenceMoves(self.view)
        self._bias = _BiasCache(sa_bias_rows(self.view).astype(np.float32) * self.delta)
        self.reset()

    def reset(self) -> None:
        """Forget all rows (a new ``generate`` call starts)."""
        self.rows: list[AcrosticState] = []
        self._prev: torch.Tensor | None = None  # input_ids of the last call of the current generation
        self._prompt_length: int | None = None

    @property
    def tracked_letters(self) -> list[str]:
        """Sentence-initial letters of each row of the last call (after :meth:`finish`: of each returned row)."""
        return [row.letters for row in self.rows]

    @property
    def targets(self) -> list[int]:
        return [row.target for row in self.rows]

    def _key_index(self, rows: int) -> list[int]:
        index = _row_index(len(self.keys), rows)
        return [0] * rows if index is None else index.tolist()

    def _replay(self, key_index: int, tokens: list[int]) -> AcrosticState:
        row = AcrosticState(self.keys[key_index].secret_string, self._moves)
        for token in tokens:
            row.observe(token)
        return row

    def _follow(self, input_ids: torch.LongTensor) -> list[AcrosticState] | None:
        """States of the rows of ``input_ids`` if each continues a row of the previous call
        (same key, same tokens up to its last one), else None (a new generation)."""
        prev, rows, length = self._prev, *input_ids.shape
        if prev is None or rows != prev.shape[0] or not self._prompt_length <= length <= prev.shape[1] + 1:
            return None
        if length == prev.shape[1] + 1 and torch.equal(input_ids[:, :-1], prev):  # greedy, sampling: rows in order
            for row, token in zip(self.rows, input_ids[:, -1].tolist(), strict=True):
                row.observe(token)
            return self.rows
        cut = length - 1  # beam search reorders rows; assisted decoding appends and rolls back tokens
        keys = self._key_index(rows)
        old = {(keys[j], r.tobytes()): j for j, r in enumerate(prev[:, :cut].cpu().numpy())}
        ids = input_ids.cpu().numpy()
        out = []
        for r in range(rows):
            j = old.get((keys[r], ids[r, :cut].tobytes()))
            if j is None:
                return None
            if cut == prev.shape[1]:  # one token past row j: continue its state
                row = copy.copy(self.rows[j])
                row.observe(int(ids[r, -1]))
            else:
                row = self._replay(keys[r], ids[r, self._prompt_length:].tolist())
            out.append(row)
        return out

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = self._follow(input_ids)
        if rows is None:  # first step of a generation: the whole input is the prompt
            self._prompt_length = input_ids.shape[1]
            rows = [self._replay(k, []) for k in self._key_index(input_ids.shape[0])]
        self.rows, self._prev = rows, input_ids.clone()  # beam search reuses its buffer: keep a copy
        choice = torch.tensor([row.bias_row() for row in self.rows], device=scores.device)
        return scores + self._bias.get(scores)[choice]

    def finish(self, sequences: torch.LongTensor) -> list[str]:
        """Read each returned sequence from the end of the prompt, set ``tracked_letters`` to
        their sentence-initial letters and return them. Works for every strategy (beam search
        returns fewer or reordered rows); the next call starts a new generation.

        Args:
            sequences: ``generate``'s output, ``(batch * num_return_sequences, length)``.
        """
        if self._prompt_length is None:
            raise RuntimeError("finish() needs a generation first: pass this processor to generate() before")
        if sequences.shape[1] < self._prompt_length:
            raise ValueError(f"got sequences of {sequences.shape[1]} tokens, shorter than the prompt "
                             f"({self._prompt_length}): pass generate()'s output (prompt included)")
        ids = sequences[:, self._prompt_length:].tolist()
        self.rows = [self._replay(k, tokens) for k, tokens in zip(self._key_index(len(ids)), ids, strict=True)]
        self._prev = None
        return self.tracked_letters


#: Row of :func:`sa_bias_rows` that adds nothing (the acrostic is inactive).
SA_NO_BIAS = 52


def sa_bias_rows(view: VocabularyView) -> np.ndarray:
    """``(53, |V|)`` boolean rows of the SA bias: 0-25 tokens opening a sentence with that
    letter; 26-51 the same restricted to tokens that start with whitespace (right after
    ``[.!?]`` whitespace must come first); :data:`SA_NO_BIAS` none."""
    rows = np.zeros((53, view.size), dtype=bool)
    for c in range(26):
        rows[c] = view.lead_letter == c
        rows[26 + c] = rows[c] & view.lead_space
    return rows


class SentenceMoves:
    """The sentence automaton of :mod:`icw.text` stepped one token at a time: each
    (state, token) transition is computed once from the token's surface, then memoized."""

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
    replay) share this, so both apply the same ``Delta_t``."""

    max_misses = 3

    def __init__(self, secret: str, moves: SentenceMoves) -> None:
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
            if self.target >= len(self.secret):
                break
            if letter == self.secret[self.target] or self.misses + 1 >= self.max_misses:
                self.target, self.misses = self.target + 1, 0
            else:
                self.misses += 1


_PROCESSORS = {"tsp": TokenSetPreferenceLogitsProcessor, "wip": WordInitialPreferenceLogitsProcessor,
               "sa": SentenceAcrosticLogitsProcessor}


def logits_processor(keys: ICWKey | str | list, tokenizer: Any, delta: float | None = None) -> LogitsProcessor:
    """The processor of the keys' family (all keys must share one family)."""
    first = as_key(keys if isinstance(keys, (ICWKey, str, dict)) else next(iter(keys)))
    return _PROCESSORS[first.family](keys, tokenizer, delta)
