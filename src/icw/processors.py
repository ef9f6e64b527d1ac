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

from .acrostic import AcrosticState, SentenceMoves, sa_bias_rows
from .keys import DEFAULT_DELTA, ICWKey, ICWKeyError, as_key, green_mask
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


def check_key_rows(num_keys: int, input_ids: torch.Tensor) -> None:
    """At the first step of a generation, refuse keys that map onto rows of different prompts.

    With ``k`` keys and ``r`` rows each key covers ``r / k`` consecutive rows, which at the first
    step must be copies of one prompt (``num_return_sequences`` or beams). 3 keys for 2 prompts
    with 3 returned sequences each (6 rows) would otherwise give one key to rows of two prompts.

    Args:
        num_keys (`int`): the number of keys of the processor.
        input_ids (`torch.Tensor`): ``(rows, prompt length)`` ids at the first generation step.
    """
    rows = input_ids.shape[0]
    if num_keys in (1, rows) or rows % num_keys:
        return  # one shared key, one key per row, or an uneven split (refused by _row_index)
    groups = input_ids.reshape(num_keys, rows // num_keys, -1)
    bad = (groups != groups[:, :1]).any(dim=-1).any(dim=-1).nonzero().flatten().tolist()
    if bad:
        raise ValueError(f"got {num_keys} keys for a batch of {rows} rows: key {bad[0]} would cover rows of "
                         f"different prompts. Pass one key per prompt (each covers its num_return_sequences "
                         f"copies) or one key per row")


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
        self._length = -1

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[1] <= self._length or self._length < 0:  # a generation starts: rows are prompts
            check_key_rows(len(self.keys), input_ids)
            self._prompt_length = input_ids.shape[1]
        self._length = input_ids.shape[1]
        bias = self._bias.get(scores)
        index = _row_index(len(self.keys), scores.shape[0])
        return scores + (bias if index is None else bias[index.to(scores.device)])


class TokenSetPreferenceLogitsProcessor(_StaticBiasLogitsProcessor):
    r"""[`LogitsProcessor`] for Token-Set Preference (TSP): adds ``delta`` to the logits of the key's green
    set ``T`` (a uniform ``gamma`` fraction of the English vocabulary ``V_en``) at every step,

        Delta_t[v] = delta * 1[v in T],

    so the text uses more distinct green tokens than the ``gamma`` a text written without the key
    would (the verifier's statistic: distinct green tokens among distinct ``V_en`` tokens).

    Args:
        keys (`ICWKey`, `str` or `list` of them):
            A TSP key shared by every row, or one key per prompt (rows are matched to keys in order;
            with ``num_return_sequences`` or beams each key covers its prompt's consecutive copies).
            Serialized keys (``icw:...``) and dicts are accepted.
        tokenizer (`PreTrainedTokenizerBase`):
            The tokenizer the keys were built for (checked against the keys' vocabulary fingerprint).
        delta (`float`, *optional*, defaults to 3.0):
            Bias strength added to the logits (``icw.keys.DEFAULT_DELTA``, the paper's synthesis value;
            SDLP trains with 5.0).
        unused_only (`bool`, *optional*, defaults to `False`):
            ``Delta_t[v] = delta * 1[v in T, v not in y_<t]``: the verifier counts distinct tokens. With a
            300-token pool the static bias at 5 loops SmolLM2-135M on green tokens (24 of 32 answers), the
            gate at 4 does not (1 of 32; ``scripts/tsp_teacher.py``).

    Tip:
        The bias table is ``(num_keys, vocab)`` and is placed on the logits' device once; pass one
        processor per distinct key list rather than rebuilding it per step.

    Examples:
        >>> import torch
        >>> from icw import ICWKey, verify
        >>> from icw.models import load_tokenizer
        >>> from icw.processors import TokenSetPreferenceLogitsProcessor
        >>> from icw.testing import tiny_random_model
        >>> tok = load_tokenizer("qwen3")
        >>> tok.padding_side = "left"  # decoder-only batches: new tokens must follow the prompt directly
        >>> model = tiny_random_model("qwen3")  # random weights: the bias alone shapes the text
        >>> keys = [ICWKey.create("tsp", seed=s, tokenizer=tok) for s in (1, 2)]  # one key per prompt
        >>> inputs = tok(["Why is the sky blue?", "Name a bird."], return_tensors="pt", padding=True)
        >>> def sample(processors):
        ...     torch.manual_seed(0)
        ...     out = model.generate(**inputs, logits_processor=processors, do_sample=True, top_k=0,
        ...                          max_new_tokens=30)
        ...     return tok.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        >>> plain = verify(sample([]), keys, tok)
        >>> marked = verify(sample([TokenSetPreferenceLogitsProcessor(keys, tok, delta=3.0)]), keys, tok)
        >>> [round(r.z_score, 1) for r in plain], [round(r.z_score, 1) for r in marked]
        ([-0.8, -0.5], [7.8, 7.3])
        >>> marked[0].p_value_method
        'exact hypergeometric (|P| = 88492, |T| = 17698)'
    """

    family = "tsp"

    def __init__(self, keys: ICWKey | str | list, tokenizer: Any, delta: float | None = None,
                 unused_only: bool = False) -> None:
        super().__init__(keys, tokenizer, delta)
        self.unused_only = unused_only

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        biased = super().__call__(input_ids, scores)
        if not self.unused_only:
            return biased
        used = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, input_ids[:, self._prompt_length :], True)
        return torch.where(used, scores, biased)


class WordInitialPreferenceLogitsProcessor(_StaticBiasLogitsProcessor):
    r"""[`LogitsProcessor`] for Word-Initial Preference (WIP): adds ``delta`` to the word-initial
    tokens whose first letter is one of the key's green letters ``L`` (13 of 26),

        Delta_t[v] = delta * 1[v in V_en^word and phi(v) in L],

    so more words start with a green letter than the letters' share of the vocabulary ``p0``.

    Args:
        keys (`ICWKey`, `str` or `list` of them):
            A WIP key shared by every row, or one key per prompt (rows are matched to keys in order;
            with ``num_return_sequences`` or beams each key covers its prompt's consecutive copies).
            Serialized keys (``icw:...``) and dicts are accepted.
        tokenizer (`PreTrainedTokenizerBase`):
            The tokenizer the keys were built for (checked against the keys' vocabulary fingerprint).
        delta (`float`, *optional*, defaults to 3.0):
            Bias strength added to the logits (``icw.keys.DEFAULT_DELTA``, the paper's synthesis value;
            SDLP trains with 3.0).

    Tip:
        The bias is applied at every step, not only after a word boundary: under BPE the space is
        part of the next token, so gating on boundaries misses most word starts.

    Examples:
        >>> import torch
        >>> from icw import ICWKey, verify
        >>> from icw.models import load_tokenizer
        >>> from icw.processors import WordInitialPreferenceLogitsProcessor
        >>> from icw.testing import tiny_random_model
        >>> tok = load_tokenizer("qwen3")
        >>> tok.padding_side = "left"  # decoder-only batches: new tokens must follow the prompt directly
        >>> model = tiny_random_model("qwen3")  # random weights: the bias alone shapes the text
        >>> keys = [ICWKey.create("wip", seed=s, tokenizer=tok) for s in (1, 2)]  # one key per prompt
        >>> inputs = tok(["Why is the sky blue?", "Name a bird."], return_tensors="pt", padding=True)
        >>> def sample(processors):
        ...     torch.manual_seed(0)
        ...     out = model.generate(**inputs, logits_processor=processors, do_sample=True, top_k=0,
        ...                          max_new_tokens=30)
        ...     return tok.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        >>> plain = verify(sample([]), keys, tok)
        >>> marked = verify(sample([WordInitialPreferenceLogitsProcessor(keys, tok)]), keys, tok)
        >>> [round(r.z_score, 1) for r in plain], [round(r.z_score, 1) for r in marked]
        ([-0.2, 0.6], [4.7, 5.0])
    """

    family = "wip"


class SentenceAcrosticLogitsProcessor(LogitsProcessor):
    r"""[`LogitsProcessor`] for Sentence Acrostic (SA): a stateful bias towards the next letter of the
    key's secret ``S``, so that the sentence-initial letters spell it.

    Per row the processor keeps the sentence automaton of :mod:`icw.text`, a target index
    ``tau`` and a miss counter ``f``. A step is *active* when ``tau < |S|`` and the text so
    far ends a sentence; then ``Delta_t[v] = delta * 1[v opens a sentence with S[tau]]``
    (after ``[.!?]`` only tokens starting with whitespace can). Each sentence-initial letter
    the model emits advances ``tau`` on a match, or after three consecutive misses.

    State updates cost no re-decoding: each token's effect on the automaton is computed once
    from its surface and memoized. When rows keep their order (greedy search, sampling) a step
    is O(1) per row; under beam search each row continues the state of the previous step's row
    with the same key and prefix; under assisted decoding a row that is not one token longer
    than its match is replayed from the prompt. ``tracked_letters[row]`` holds the
    sentence-initial letters of each row of the last step, which equal
    :func:`icw.text.sentence_initials` of its decoded continuation; ``targets[row]`` is ``tau``.
    After ``generate``, :meth:`finish` gives the letters of each *returned* row (beam search
    returns other rows than it ran).

    Args:
        keys (`ICWKey`, `str` or `list` of them):
            An SA key shared by every row, or one key per prompt (rows are matched to keys in order;
            with ``num_return_sequences`` or beams each key covers its prompt's consecutive copies).
        tokenizer (`PreTrainedTokenizerBase`):
            The model's tokenizer (SA keys hold letters only, so any tokenizer works).
        delta (`float`, *optional*, defaults to 8.0):
            Bias strength at active steps (the paper's synthesis and training value).

    Tip:
        The processor is stateful. Use **one processor per** ``generate`` **call**, or call
        :meth:`finish` (or :meth:`reset`) between calls: a step starts a new generation when its
        rows continue no row of the previous step, so a call whose prompt is the previous output
        would silently continue the old rows' state. Batch with **left padding**
        (``tokenizer.padding_side = "left"``) so that every row's new tokens follow its prompt; with
        right padding pad tokens sit between prompt and answer. Keys are per row: a key list has
        one key per prompt, in the batch's order.

    Examples:
        >>> import torch
        >>> from icw import ICWKey, verify
        >>> from icw.models import load_tokenizer
        >>> from icw.processors import SentenceAcrosticLogitsProcessor
        >>> from icw.testing import tiny_random_model
        >>> tok = load_tokenizer("qwen3")
        >>> tok.padding_side = "left"  # decoder-only batches: new tokens must follow the prompt directly
        >>> model = tiny_random_model("qwen3")  # random weights: the bias alone shapes the text
        >>> keys = [ICWKey.create("sa", seed=s) for s in (1, 2)]  # one key per prompt
        >>> inputs = tok(["Why is the sky blue?", "Name a bird."], return_tensors="pt", padding=True)
        >>> def sample(processors):
        ...     torch.manual_seed(0)
        ...     out = model.generate(**inputs, logits_processor=processors, do_sample=True, top_k=0,
        ...                          max_new_tokens=30)
        ...     return tok.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        >>> processor = SentenceAcrosticLogitsProcessor(keys, tok)
        >>> texts = sample([processor])
        >>> [k.secret_string[:3] for k in keys], processor.tracked_letters, processor.targets
        (['YNT', 'BSR'], ['Y', 'B'], [1, 1])
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
            check_key_rows(len(self.keys), input_ids)
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


_PROCESSORS = {"tsp": TokenSetPreferenceLogitsProcessor, "wip": WordInitialPreferenceLogitsProcessor,
               "sa": SentenceAcrosticLogitsProcessor}


def logits_processor(keys: ICWKey | str | list, tokenizer: Any, delta: float | None = None) -> LogitsProcessor:
    """The processor of the keys' family (all keys must share one family).

    Args:
        keys (`ICWKey`, `str` or `list` of them): one key, or one per prompt, all of one family.
        tokenizer (`PreTrainedTokenizerBase`): the tokenizer the keys were built for.
        delta (`float`, *optional*): bias strength; defaults to the family's ``DEFAULT_DELTA``.

    Example:
        >>> from icw import ICWKey
        >>> from icw.models import load_tokenizer
        >>> from icw.processors import logits_processor
        >>> type(logits_processor(ICWKey.create("sa", seed=1), load_tokenizer("gpt2"))).__name__
        'SentenceAcrosticLogitsProcessor'
    """
    first = as_key(keys if isinstance(keys, (ICWKey, str, dict)) else next(iter(keys)))
    return _PROCESSORS[first.family](keys, tokenizer, delta)
