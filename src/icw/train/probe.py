r"""The key-swap probe: does a model read the key from the instruction, or from the response so far?

For held-out ``D_cs``-style rows (a query, a response written under a generating key ``K``, and
a second key ``K'`` of the same family), teacher-force the response and, at every position whose
next token is scored by the family, take the log-odds that the next scored token is green under
a key's preferred set ``G``:

    lo(m, prompt, G)_t = log sum_{v in S_t ∩ G_t} p_m(v | prompt, y_<t) - log sum_{v in S_t \ G_t} p_m(v | prompt, y_<t)

TSP: ``S`` is the candidate pool, ``G`` the key's token set; WIP: ``S`` the word-initial tokens, ``G``
those whose initial is one of the key's letters. SA: the positions are those where the SA teacher's
bias is active (a sentence is about to open; :class:`~icw.acrostic.AcrosticState` replayed along
the response under that key), ``S_t`` the tokens that can open the sentence there and ``G_t`` those
opening it with the letter the key's secret asks for at ``t``.

The probe reports the *lift* over the frozen base model that sees the query alone (the SDLP
teacher before its perturbation; a teacher with bias ``delta`` on ``G`` has lift exactly
``delta``), averaged over a row's positions, then over rows (mean ± standard error over rows):

    A     = lo(model, instr(K)  + q, G_K)  - lo(base, q, G_K)    prompt key = generating key
    B     = lo(model, instr(K') + q, G_K') - lo(base, q, G_K')   reading the instruction
    C     = lo(model, instr(K') + q, G_K)  - lo(base, q, G_K)    reading the prefix
    plain = lo(model, q,              G_K) - lo(base, q, G_K)    no instruction at all

A model that follows instructions has ``B > 0``; a prefix-reader has ``C ≈ A`` and ``B ≈ 0``.

TSP's verifier counts *distinct* green tokens, and the gated SDLP teacher (``tsp_unused_only``) biases only the
green tokens the response has not used before ``t``. So TSP also splits each condition's green set into the
tokens not used yet (``G_t \ y_<t``) and the used ones (``G_t ∩ y_<t``), each against the same non-green pool
tokens: the gated teacher's lift is ``delta`` on the first and 0 on the second; a student that lifts both alike
learned "green" without "new". Only the first raises z (``scripts/tsp_teacher.py`` decodes the base model with a
``split:UNUSED:USED`` profile to show what a student's two lifts give).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from ..acrostic import SA_NO_BIAS, AcrosticState, SentenceMoves, sa_bias_rows
from ..generation import chat_prompt
from ..keys import ICWKey, as_key, green_mask, scored_mask
from ..vocab import VocabularyView, vocabulary

#: First key seed of the probe's "other" keys: disjoint from ICWBench's test seeds (small) and
#: from the training pool (>= 1,000,000).
PROBE_SEED_OFFSET = 900_000
CONDITIONS = ("A", "B", "C", "plain")
#: SA: where the scoring key's acrostic stands before a probed opening: its first letter; the letter after an
#: advance (a hit, or the third miss); the same letter again after a miss. Relabelled training answers (written
#: under another key) show a student mostly the third, the student's own on-key answers mostly the second.
SA_STATES = ("first letter", "after an advance", "after a miss")
#: TSP: the green set split by whether the response used the token before the position.
USE_SPLITS = ("unused green", "used green")
_MEANING = {"A": "prompt key = generating key, scored on its green set",
            "B": "prompt key = another key, scored on the prompt key's set (reading the instruction)",
            "C": "prompt key = another key, scored on the generating key's set (reading the prefix)",
            "plain": "no instruction, scored on the generating key's set"}


@dataclass
class ProbeStat:
    """One condition of the probe: mean lift over rows with its standard error.

    Args:
        condition (`str`): the probe condition's name.
        mean (`float`): mean lift over rows.
        stderr (`float`): its standard error over rows.
        num_rows (`int`): rows averaged.
        num_positions (`int`): scored positions in all rows.
        meaning (`str`, defaults to ``""``): what the condition shows, in words.
    """

    condition: str
    mean: float
    stderr: float
    num_rows: int
    num_positions: int
    meaning: str = ""


@dataclass
class KeySwapProbeReport:
    """The four conditions of :func:`key_swap_probe` plus what the numbers are.

    Args:
        family (`str`): the family probed.
        stats (`dict[str, ProbeStat]`): one :class:`ProbeStat` per condition.
        statistic (`str`, *optional*): what the lift measures, in words.
        per_row (`dict[str, list[float]]`, *optional*): each condition's per-row lifts.
        by_state (`dict[str, dict[str, ProbeStat]]`, *optional*): SA: each condition by the acrostic's state
            before the opening (:data:`SA_STATES`), mean ± s.e. over positions.
        by_use (`dict[str, dict[str, ProbeStat]]`, *optional*): TSP: each condition on the green tokens the
            response has not used yet and on the used ones (:data:`USE_SPLITS`), mean ± s.e. over rows.
    """

    family: str
    stats: dict[str, ProbeStat]
    statistic: str = ("log-odds lift of the next scored token being green, model (given prompt) minus "
                      "base model (query alone); per-row mean over positions, mean ± s.e. over rows")
    per_row: dict[str, list[float]] = field(default_factory=dict, repr=False)
    by_state: dict[str, dict[str, ProbeStat]] = field(default_factory=dict)
    by_use: dict[str, dict[str, ProbeStat]] = field(default_factory=dict)

    def __getitem__(self, condition: str) -> ProbeStat:
        return self.stats[condition]

    def to_dict(self) -> dict[str, Any]:
        out = {"family": self.family, "statistic": self.statistic, **{c: asdict(s) for c, s in self.stats.items()}}
        if self.by_state:
            out["by_state"] = {c: {state: asdict(s) for state, s in v.items()} for c, v in self.by_state.items()}
        if self.by_use:
            out["by_use"] = {c: {split: asdict(s) for split, s in v.items()} for c, v in self.by_use.items()}
        return out

    def to_markdown(self) -> str:
        lines = [f"Key-swap probe ({self.family.upper()}): {self.statistic}", "",
                 "| Condition | Lift (mean ± s.e.) | Rows | Positions | Meaning |", "|---|---|---|---|---|"]
        for c, s in self.stats.items():
            lines.append(f"| {c} | {s.mean:+.3f} ± {s.stderr:.3f} | {s.num_rows} | {s.num_positions} | {s.meaning} |")
        if self.by_state:
            lines += ["", "By the acrostic's state before the opening (mean ± s.e. over positions):", "",
                      "| Condition | " + " | ".join(SA_STATES) + " |", "|---|" + "---|" * len(SA_STATES)]
            lines += [f"| {c} | " + " | ".join(f"{v[t].mean:+.3f} ± {v[t].stderr:.3f} (n={v[t].num_positions})"
                                               if t in v else "" for t in SA_STATES) + " |"
                      for c, v in self.by_state.items()]
        if self.by_use:
            lines += ["", "On green tokens the response has not used yet and on used ones (the gated teacher's lift: "
                      "delta and 0; mean ± s.e. over rows, positions where the set is not empty):", "",
                      "| Condition | " + " | ".join(USE_SPLITS) + " |", "|---|" + "---|" * len(USE_SPLITS)]
            lines += [f"| {c} | " + " | ".join(f"{v[u].mean:+.3f} ± {v[u].stderr:.3f} (n={v[u].num_positions})"
                                               if u in v else "" for u in USE_SPLITS) + " |"
                      for c, v in self.by_use.items()]
        return "\n".join(lines)


def other_key(key: ICWKey, tokenizer: Any, index: int) -> ICWKey:
    """A held-out key of ``key``'s family and parameters, different from ``key`` (seed ``PROBE_SEED_OFFSET + index``).

    Args:
        key (`ICWKey`): the row's own key.
        tokenizer: the tokenizer TSP/WIP keys are built for.
        index (`int`): the row index (picks the seed).
    """
    seed = PROBE_SEED_OFFSET + index
    while True:
        if key.family == "sa":  # SA keys are tokenizer-free
            candidate = ICWKey.create("sa", seed, length=len(key.secret_string))
            if candidate.secret_string != key.secret_string:
                return candidate
        else:
            candidate = ICWKey.create(key.family, seed, tokenizer, **_params(key))
            if candidate.family == "tsp" or candidate.green_letters != key.green_letters:
                return candidate
        seed += 100_000


def _params(key: ICWKey) -> dict[str, Any]:
    if key.family == "tsp":
        return {"gamma": key.gamma, "pool_size": key.pool_size}
    return {"num_letters": key.num_letters}


Sets = tuple[np.ndarray, np.ndarray]  # (scored, green): each (V,) for every position, or (P, V) per position


def _sa_sets(table: np.ndarray, codes: np.ndarray) -> Sets:
    """Per-position (scored, green) masks of SA bias rows ``codes`` (rows of :func:`~icw.acrostic.sa_bias_rows`):
    green is the row itself, scored the union of the 26 rows of its half (sentence opening / after its end)."""
    halves = np.stack([table[:26].any(0), table[26:52].any(0)])
    return halves[codes // 26], table[codes]


def _sa_replay(secret: str, ids: list[int], moves: SentenceMoves) -> tuple[np.ndarray, np.ndarray]:
    """The SA bias row before each token (as :func:`~icw.acrostic.sa_bias_codes`) and the index in
    :data:`SA_STATES` of the acrostic's state there."""
    state, codes, states = AcrosticState(secret, moves), [], []
    for token in ids:
        codes.append(state.bias_row())
        states.append(2 if state.misses else int(state.target > 0))
        state.observe(token)
    return np.array(codes, dtype=np.int64), np.array(states, dtype=np.int64)


def _split_by_use(sets: Sets, ids: list[int], pos: np.ndarray) -> list[Sets]:
    """``sets`` followed by its green set split into the tokens ``ids`` has not used before each position in
    ``pos`` and the used ones, each scored against the non-green tokens alone (per-position ``(P, V)`` masks)."""
    scored, green = sets
    used, seen, j = np.zeros((len(pos), green.shape[-1]), dtype=bool), np.zeros(green.shape[-1], dtype=bool), 0
    for t, token in enumerate(ids):
        while j < len(pos) and pos[j] == t:
            used[j] = seen
            j += 1
        if token < len(seen):
            seen[token] = True
    green, other = green & scored[: green.shape[-1]], scored[: green.shape[-1]] & ~green
    return [sets] + [(other | part, part) for part in (green & ~used, green & used)]


def _probe_sets(key: ICWKey, alt: ICWKey, ids: list[int], view: VocabularyView, sa_table: np.ndarray | None
                ) -> tuple[np.ndarray, Sets, Sets, tuple[np.ndarray, np.ndarray] | None]:
    """The probe positions of a response, the (scored, green) masks of the generating key and of the other, and
    (SA) each key's acrostic state at the positions."""
    if key.family == "sa":
        moves = SentenceMoves(view)
        (own, own_states), (swapped, alt_states) = (_sa_replay(k.secret_string, ids, moves) for k in (key, alt))
        pos = np.flatnonzero((own != SA_NO_BIAS) & (swapped != SA_NO_BIAS))
        return (pos, _sa_sets(sa_table, own[pos]), _sa_sets(sa_table, swapped[pos]),
                (own_states[pos], alt_states[pos]))
    scored = scored_mask(key, view)
    pos = np.array([t for t, tok in enumerate(ids) if tok < len(scored) and scored[tok]], dtype=np.int64)
    return pos, (scored, green_mask(key, view)), (scored_mask(alt, view), green_mask(alt, view)), None


@torch.no_grad()
def _log_odds(model: Any, prompts: list[list[int]], responses: list[list[int]], sets: list[list[Sets]],
              positions: list[np.ndarray]) -> list[list[np.ndarray]]:
    """For each row and each (scored, green) pair of masks: ``lo_t`` at the row's probe positions; one forward
    per row batch (right padding)."""
    device = next(model.parameters()).device
    seqs = [p + r for p, r in zip(prompts, responses, strict=True)]
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s)
        mask[b, : len(s)] = 1
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
    out = []
    for b, (prompt, pos) in enumerate(zip(prompts, positions, strict=True)):
        logp = torch.log_softmax(logits[b, len(prompt) - 1 + torch.as_tensor(pos, device=device)], dim=-1)
        row = []
        for scored, green in sets[b]:
            s = torch.as_tensor(_fit(scored, logp.shape[-1]), device=device)
            g = torch.as_tensor(_fit(green, logp.shape[-1]), device=device) & s
            lo = _logsumexp_on(logp, g) - _logsumexp_on(logp, s & ~g)
            row.append(lo.cpu().numpy())
        out.append(row)
    return out


def _mean_se(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and standard error (nan for a single value)."""
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")


def _logsumexp_on(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``log sum_{v in mask} p(v)`` per position; ``mask`` is (V,) for all positions or (P, V) per position."""
    return logp.masked_fill(~mask, float("-inf")).logsumexp(-1)


def _fit(mask: np.ndarray, width: int) -> np.ndarray:
    if mask.shape[-1] >= width:
        return mask[..., :width]
    return np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, width - mask.shape[-1])])


def key_swap_probe(model: Any, tokenizer: Any, rows: Sequence[dict[str, Any]], base_model: Any = None,
                   other_keys: Sequence[ICWKey | str] | None = None, template: str | None = None,
                   max_response_tokens: int | None = 256, batch_size: int = 4) -> KeySwapProbeReport:
    r"""Run the key-swap probe (see the module docstring) on ``rows``.

    Args:
        model: the model under test (a causal LM).
        tokenizer: its tokenizer (the keys' tokenizer).
        rows: dicts with ``query``, ``key`` (the generating key, all of one family) and ``response`` (or the
            sampled ``response_ids``); ``D_H1`` rows of ``D_cs`` are exactly this.
        base_model: the frozen reference that sees the query alone (the SDLP teacher without its
            bias). Default: ``model`` with its adapter disabled when it is a PEFT model, else ``model``
            itself (then ``plain`` is 0 by construction and the lifts are relative to the model's
            own plain behaviour).
        other_keys: one key ``K'`` per row (default: :func:`other_key`, held-out seeds).
        template: a custom instruction template (default: the paper's).
        max_response_tokens: teacher-force at most this many response tokens per row.
        batch_size: rows per forward pass.

    Returns:
        A :class:`KeySwapProbeReport` with conditions ``A``, ``B``, ``C`` and ``plain``; for SA also each
        condition by the acrostic's state before the opening (:data:`SA_STATES`, ``by_state``).

    Example:
        >>> from icw.models import load_tokenizer
        >>> from icw.testing import tiny_random_model
        >>> model, tok = tiny_random_model(), load_tokenizer("qwen3")
        >>> key = ICWKey.create("wip", seed=1, tokenizer=tok)
        >>> rows = [{"query": "Why is the sky blue?", "key": key.to_string(),
        ...          "response": "Because sunlight scatters off small molecules in the air."}]
        >>> report = key_swap_probe(model, tok, rows)
        >>> sorted(report.stats)
        ['A', 'B', 'C', 'plain']
    """
    if not rows:
        raise ValueError("the probe needs at least one row (query, key, response)")
    view = vocabulary(tokenizer)
    keys = [as_key(r["key"]) for r in rows]
    if len({k.family for k in keys}) > 1:
        raise ValueError(f"the key-swap probe takes rows of one family; got {sorted({k.family for k in keys})}")
    others = ([as_key(k) for k in other_keys] if other_keys is not None
              else [other_key(k, tokenizer, i) for i, k in enumerate(keys)])
    if len(others) != len(rows):
        raise ValueError(f"got {len(others)} other keys for {len(rows)} rows: pass one per row")
    sa_table = sa_bias_rows(view) if keys[0].family == "sa" else None
    eos = tokenizer.eos_token_id
    items = []
    for row, key, alt in zip(rows, keys, others, strict=True):
        ids = list(row["response_ids"]) if row.get("response_ids") is not None else \
            tokenizer(row["response"], add_special_tokens=False)["input_ids"]
        ids = [t for t in ids if t != eos][:max_response_tokens]
        pos, own, swapped, states = _probe_sets(key, alt, ids, view, sa_table)
        if len(pos) == 0:
            continue
        # each condition's (scored, green) masks: the whole green set, then (TSP) its unused and used parts
        own, swapped = ([s] if key.family != "tsp" else _split_by_use(s, ids, pos) for s in (own, swapped))
        q = row["query"]
        prompts = {name: tokenizer(chat_prompt(tokenizer, text), add_special_tokens=False)["input_ids"]
                   for name, text in (("key", key.prompt(q, tokenizer, template)),
                                      ("alt", alt.prompt(q, tokenizer, template)), ("plain", q))}
        items.append((ids, pos, prompts, own, swapped, states))
    if not items:
        raise ValueError("no row has a scored position in its response (WIP/TSP: a scored token; SA: a sentence "
                         "opening): nothing to probe")
    reference_ctx = _reference(model, base_model)
    lifts: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    by_state: dict[str, dict[int, list[np.ndarray]]] = {c: {} for c in CONDITIONS}
    by_use: dict[str, dict[str, list[tuple[float, int]]]] = {c: {} for c in CONDITIONS}
    positions = 0
    for start in range(0, len(items), batch_size):
        part = items[start : start + batch_size]
        resp, pos = [it[0] for it in part], [it[1] for it in part]
        positions += sum(len(p) for p in pos)
        a = _log_odds(model, [it[2]["key"] for it in part], resp, [it[3] for it in part], pos)
        bc = _log_odds(model, [it[2]["alt"] for it in part], resp, [it[4] + it[3] for it in part], pos)
        plain = _log_odds(model, [it[2]["plain"] for it in part], resp, [it[3] for it in part], pos)
        with reference_ctx() as ref:
            base = _log_odds(ref, [it[2]["plain"] for it in part], resp, [it[3] + it[4] for it in part], pos)
        for b, item in enumerate(part):
            n_sets = len(item[3])  # 1, or 3 with TSP's split: [whole, unused, used]
            with np.errstate(invalid="ignore"):  # -inf - -inf where a split set is empty: nan, skipped below
                per_set = [{"A": a[b][i] - base[b][i], "B": bc[b][i] - base[b][n_sets + i],
                            "C": bc[b][n_sets + i] - base[b][i], "plain": plain[b][i] - base[b][i]}
                           for i in range(n_sets)]
            for split, lifts_of_split in zip(USE_SPLITS, per_set[1:], strict=False):
                for c, lift in lifts_of_split.items():  # positions where the split set is empty give nan
                    if np.isfinite(lift).any():
                        by_use[c].setdefault(split, []).append((float(np.nanmean(lift)), int(np.isfinite(lift).sum())))
            for c, lift in per_set[0].items():
                lifts[c].append(float(lift.mean()))
                if item[5] is not None:  # SA: B is scored on the other key's acrostic, the rest on the writer's
                    states = item[5][1] if c == "B" else item[5][0]
                    for state in np.unique(states):
                        by_state[c].setdefault(int(state), []).append(lift[states == state])
    n = len(items)
    stats = {c: ProbeStat(c, *_mean_se(v), n, positions, _MEANING[c]) for c, v in lifts.items()}
    states_report = {}
    for c, found in by_state.items():
        for state, parts in sorted(found.items()):
            v = np.concatenate(parts)
            states_report.setdefault(c, {})[SA_STATES[state]] = ProbeStat(c, *_mean_se(v), len(parts), len(v))
    use_report = {c: {split: ProbeStat(c, *_mean_se([m for m, _ in found[split]]), len(found[split]),
                                       sum(k for _, k in found[split]))
                      for split in USE_SPLITS if split in found} for c, found in by_use.items() if found}
    return KeySwapProbeReport(keys[0].family, stats, per_row=lifts, by_state=states_report, by_use=use_report)


#: SA, free-running answers: what the previous sentence opening did before an opening.
TRANSITIONS = ("first letter", "after a hit", "after a miss")


def acrostic_transitions(texts: Sequence[str], keys: Sequence[ICWKey | str]) -> dict[str, tuple[float, float, int]]:
    """How generated SA answers walk through their secrets, opening by opening: the verifier's sentence-initial
    letters (:func:`~icw.text.sentence_initials`) read by :class:`~icw.acrostic.AcrosticState` (advance on a
    hit or on the third miss in a row). Per :data:`TRANSITIONS` state: the hit rate (the opening has the letter
    the secret asks for), the repeat rate (it has the previous opening's letter) and the number of openings,
    pooled over answers until each secret is spent.

    The key-swap probe teacher-forces answers whose acrostic state is given; this reads the model's own
    answers, where a model that lifts the asked letter may still prefer another one. A model that holds a
    letter across sentences (the miss regime that relabelled SA rows teach) repeats after a hit, where the
    acrostic has moved on.

    Args:
        texts (`Sequence[str]`): generated answers.
        keys (`Sequence[ICWKey | str]`): the SA key each answer was asked to follow, one per text.

    Example:
        >>> key = ICWKey.create("sa", seed=0)
        >>> s = key.secret_string
        >>> acrostic_transitions([f"{s[0]}a. {s[1]}b. {s[1]}c. {s[2]}d."], [key])  # hit, hit, repeat, hit
        {'first letter': (1.0, 0.0, 1), 'after a hit': (0.5, 0.5, 2), 'after a miss': (1.0, 0.0, 1)}
    """
    from ..text import sentence_initials

    counts = {state: [0, 0, 0] for state in TRANSITIONS}  # hits, repeats, openings
    for text, key in zip(texts, keys, strict=True):
        state, previous = AcrosticState(as_key(key).secret_string), None
        for letter in sentence_initials(text).upper():
            if state.target >= len(state.secret):
                break
            where = counts[TRANSITIONS[0] if previous is None else TRANSITIONS[1] if previous[1] else TRANSITIONS[2]]
            hit = state.read(letter)
            where[0] += hit
            where[1] += previous is not None and letter == previous[0]
            where[2] += 1
            previous = (letter, hit)
    return {state: (h / n, r / n, n) for state, (h, r, n) in counts.items() if n}


def _reference(model: Any, base_model: Any) -> Any:
    from contextlib import contextmanager, nullcontext

    @contextmanager
    def ctx() -> Any:
        if base_model is not None:
            yield base_model
        elif hasattr(model, "disable_adapter"):
            with model.disable_adapter():
                yield model
        else:
            with nullcontext():
                yield model

    return ctx


# ----------------------------------------------------------------------------------- CLI
def probe_rows(dataset_name: str, family: str, num_rows: int, seed: int = 0) -> list[dict[str, Any]]:
    """``num_rows`` D_H1 rows of ``family`` from a ``D_cs`` folder or parquet file.

    Args:
        dataset_name (`str`): a ``D_cs`` folder or parquet file.
        family (`str`): the family to probe.
        num_rows (`int`): rows to return.
        seed (`int`, defaults to 0): seed of the row shuffle.
    """
    from .common import load_dcs

    ds = load_dcs(dataset_name, [family], label=1).shuffle(seed=seed)
    return [dict(r) for r in ds.select(range(min(num_rows, len(ds))))]


def make_parser() -> Any:
    """The ``icw train probe`` parser (``argparse``; a bad option ends in one ``icw: error:`` line)."""
    import argparse

    from ..argtypes import one_line_error, positive_int

    parser = argparse.ArgumentParser(prog="icw train probe", description=__doc__.split("\n\n")[0])
    parser.error = lambda message: one_line_error(parser, message)  # type: ignore[method-assign]
    parser.add_argument("--model", required=True, help="model under test: smollm2, a folder (full or LoRA adapter)")
    parser.add_argument("--base_model", default="smollm2", help="frozen reference that sees the query alone")
    parser.add_argument("--dataset_name", required=True, help="held-out D_cs rows (a folder written by synthesize)")
    parser.add_argument("--family", default="wip", choices=["wip", "tsp", "sa"])
    parser.add_argument("--num_rows", type=positive_int, default=32)
    parser.add_argument("--max_response_tokens", type=positive_int, default=256)
    parser.add_argument("--batch_size", type=positive_int, default=4)
    parser.add_argument("--device", default=None)
    parser.add_argument("--output", default=None, help="write the report as JSON here")
    return parser


def main(argv: Sequence[str] | None = None) -> KeySwapProbeReport:
    """``icw train probe``: run the probe on a model and held-out D_cs rows, print the table."""
    import json
    from pathlib import Path

    from ..models import load_model

    args = make_parser().parse_args(None if argv is None else list(argv))
    if args.num_rows < 2:
        raise ValueError("--num_rows must be at least 2 (the standard error needs two rows)")
    if not Path(args.dataset_name).exists():
        raise ValueError(f"{args.dataset_name} does not exist: write held-out rows with `icw train synthesize "
                         "--seed_offset 0 --queries_file <held-out queries> --output_dir <folder>`")
    rows = probe_rows(args.dataset_name, args.family, args.num_rows)
    model, tok = load_model(args.model, device=args.device)
    base = model if args.base_model == args.model else load_model(args.base_model, device=args.device)[0]
    report = key_swap_probe(model.eval(), tok, rows, base_model=base.eval(),
                            max_response_tokens=args.max_response_tokens, batch_size=args.batch_size)
    print(report.to_markdown())
    if args.output:
        Path(args.output).write_text(json.dumps(report.to_dict(), indent=2))
    return report
