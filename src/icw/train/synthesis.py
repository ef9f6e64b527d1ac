r"""Cold-start data synthesis ``D_cs = D_H1 ∪ D_H0`` (the paper's Section 4.1 and Appendix C).

``D_H1``: the base model answers the query alone while the family's logit perturbation
``Delta_t(psi; kappa)`` is applied at decoding time, one fresh training key per row (TSP gamma
drawn from {0.1, 0.2, 0.3}, WIP 13 letters, SA length drawn from {18, 19, 20}).
``D_H0``: the base model answers other queries alone, with no perturbation; each row also
carries a fresh key of the family (never shown to the model) so its z under the null can be
reported, as in the paper's cold-start table.

Rows are appended to ``rows.jsonl`` in the output folder after every batch, so an interrupted
run resumes where it stopped; the finished set is written as ``data.parquet`` (a ``datasets``
dataset with columns ``id, family, key, query, response, label, z, perplexity``) and the
statistics table as ``stats.json``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..argtypes import fraction, non_negative_int, open_unit, positive_float, positive_int
from ..generation import generate_responses
from ..jsonl import JSONLError, append_jsonl, iter_jsonl
from ..keys import DEFAULT_DELTA, FAMILIES, TRAIN_SEED_START, ICWKey
from ..perplexity import perplexities
from ..questions import bundled_questions, check_not_test_questions, read_questions
from ..verification import verify

#: First seed of the training key pool (:data:`icw.keys.TRAIN_SEED_START`; evaluation keys use smaller seeds).
TRAIN_SEED_OFFSET = TRAIN_SEED_START


@dataclass
class SynthesisConfig:
    """Configuration of the cold-start synthesis (``recipes/synthesize.py``, ``icw train synthesize``).

    Args:
        model_name_or_path (`str`, defaults to ``'smollm2'``): Base model: 'smollm2' (embedded, offline), a
            local folder or a Hub id.
        output_dir (`str`, defaults to ``'data/dcs'``): Folder for rows.jsonl, data.parquet and stats.json.
        families (`list[str]`, defaults to ``['tsp', 'wip', 'sa']``): Families to synthesize.
        queries_file (`str`, *optional*): Training queries: a text file (one per line) or JSON Lines with a
            'question', 'query' or 'title' field. With neither this nor dataset_name: the 115 bundled train
            questions (offline). Checked against ICWBench's test questions.
        dataset_name (`str`, *optional*): Hub dataset of queries when no queries_file is given (e.g.
            vblagoje/lfqa).
        dataset_split (`str`, defaults to ``'train'``): Split of dataset_name to draw queries from.
        query_column (`str`, defaults to ``'title'``): Column of dataset_name holding the question.
        num_h1 (`list[int]`, defaults to ``[100]``): D_H1 rows: one count for every family, or one per
            family in `families` order (paper: 3379 TSP, 1865 WIP, 2906 SA).
        num_h0 (`list[int]`, defaults to ``[50]``): D_H0 rows: one count, or one per family (paper: 1000
            TSP, 800 WIP, 800 SA).
        seed_offset (`int`, defaults to ``1000000``): First key seed of the training pool.
        key_seed (`int`, *optional*): Use this one key seed for every row (a fixed-key experiment, where the
            student only has to learn an unconditional bias); default: a key per row.
        gammas (`list[float]`, defaults to ``[0.1, 0.2, 0.3]``): TSP green fractions drawn per row (paper:
            0.1, 0.2, 0.3).
        pool_size (`int`, *optional*): TSP candidate pool size (None: all of V_en); small-context models
            need it.
        num_letters (`int`, defaults to ``13``): WIP green letters per key (paper: 13 of 26).
        sa_lengths (`list[int]`, defaults to ``[18, 19, 20]``): SA secret lengths drawn per row (paper:
            18-20).
        delta_tsp (`float`, defaults to ``3.0``): Synthesis bias for TSP (paper: 3.0).
        delta_wip (`float`, defaults to ``3.0``): Synthesis bias for WIP (paper: 3.0).
        delta_sa (`float`, defaults to ``8.0``): Synthesis bias for SA (reference implementation: 8.0; the
            paper does not state it).
        max_new_tokens (`int`, defaults to ``600``): Answer length cap (paper: 600).
        batch_size (`int`, defaults to ``8``): Prompts per generate() call.
        temperature (`float`, defaults to ``0.7``): Sampling temperature.
        delta_in_tempered_logits (`bool`, defaults to ``True``): transformers applies logits processors
            before the temperature, so a bias delta sampled at temperature T shifts the tempered logits by
            delta / T (3 / 0.7 = 4.3). True passes delta * T to the processor, so the sampled distribution
            is softmax(l / T + delta): the same log-odds shift delta that the SDLP teacher adds and the
            paper's softmax(l + Delta) states. False keeps the earlier behaviour.
        top_p (`float`, defaults to ``0.95``): Nucleus sampling threshold.
        seed (`int`, defaults to ``0``): Seed of the query shuffle and of sampling.
        dtype (`str`, *optional*): Model dtype (e.g. bfloat16); default: the checkpoint's.
        device (`str`, *optional*): Device (cpu, cuda); default: cuda when available.
        perplexity (`bool`, defaults to ``True``): Also compute each answer's perplexity under the base
            model.
    """

    model_name_or_path: str = field(
        default="smollm2", metadata={"help": "Base model: 'smollm2' (embedded, offline), a local folder or a Hub id."})
    output_dir: str = field(default="data/dcs", metadata={"help": "Folder for rows.jsonl, data.parquet and stats.json."})
    families: list[str] = field(default_factory=lambda: list(FAMILIES), metadata={"help": "Families to synthesize."})
    queries_file: str | None = field(
        default=None, metadata={"help": "Training queries: a text file (one per line) or JSON Lines with a 'question', "
                                        "'query' or 'title' field. With neither this nor dataset_name: the 115 bundled "
                                        "train questions (offline). Checked against ICWBench's test questions."})
    dataset_name: str | None = field(
        default=None, metadata={"help": "Hub dataset of queries when no queries_file is given (e.g. vblagoje/lfqa)."})
    dataset_split: str = field(default="train", metadata={"help": "Split of dataset_name to draw queries from."})
    query_column: str = field(default="title", metadata={"help": "Column of dataset_name holding the question."})
    num_h1: list[int] = field(default_factory=lambda: [100], metadata={
        "help": "D_H1 rows: one count for every family, or one per family in `families` order "
                "(paper: 3379 TSP, 1865 WIP, 2906 SA)."})
    num_h0: list[int] = field(default_factory=lambda: [50], metadata={
        "help": "D_H0 rows: one count, or one per family (paper: 1000 TSP, 800 WIP, 800 SA)."})
    seed_offset: int = field(default=TRAIN_SEED_OFFSET, metadata={"help": "First key seed of the training pool."})
    key_seed: int | None = field(
        default=None, metadata={"help": "Use this one key seed for every row (a fixed-key experiment, where the "
                                        "student only has to learn an unconditional bias); default: a key per row."})
    gammas: list[float] = field(default_factory=lambda: [0.1, 0.2, 0.3],
                                metadata={"help": "TSP green fractions drawn per row (paper: 0.1, 0.2, 0.3)."})
    pool_size: int | None = field(
        default=None, metadata={"help": "TSP candidate pool size (None: all of V_en); small-context models need it."})
    num_letters: int = field(default=13, metadata={"help": "WIP green letters per key (paper: 13 of 26)."})
    sa_lengths: list[int] = field(default_factory=lambda: [18, 19, 20],
                                  metadata={"help": "SA secret lengths drawn per row (paper: 18-20)."})
    delta_tsp: float = field(default=DEFAULT_DELTA["tsp"], metadata={"help": "Synthesis bias for TSP (paper: 3.0)."})
    delta_wip: float = field(default=DEFAULT_DELTA["wip"], metadata={"help": "Synthesis bias for WIP (paper: 3.0)."})
    delta_sa: float = field(default=DEFAULT_DELTA["sa"], metadata={
        "help": "Synthesis bias for SA (reference implementation: 8.0; the paper does not state it)."})
    max_new_tokens: int = field(default=600, metadata={"help": "Answer length cap (paper: 600)."})
    batch_size: int = field(default=8, metadata={"help": "Prompts per generate() call."})
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature."})
    delta_in_tempered_logits: bool = field(
        default=True, metadata={"help": "transformers applies logits processors before the temperature, so a bias "
                                        "delta sampled at temperature T shifts the tempered logits by delta / T "
                                        "(3 / 0.7 = 4.3). True passes delta * T to the processor, so the sampled "
                                        "distribution is softmax(l / T + delta): the same log-odds shift delta that "
                                        "the SDLP teacher adds and the paper's softmax(l + Delta) states. False "
                                        "keeps the earlier behaviour."})
    top_p: float = field(default=0.95, metadata={"help": "Nucleus sampling threshold."})
    seed: int = field(default=0, metadata={"help": "Seed of the query shuffle and of sampling."})
    dtype: str | None = field(default=None, metadata={"help": "Model dtype (e.g. bfloat16); default: the checkpoint's."})
    device: str | None = field(default=None, metadata={"help": "Device (cpu, cuda); default: cuda when available."})
    perplexity: bool = field(default=True, metadata={"help": "Also compute each answer's perplexity under the base model."})

    def __post_init__(self) -> None:
        self.output_dir = os.path.expanduser(self.output_dir)  # the CPU config writes D_cs under ~/.cache/icw/runs
        for domain, names in ((non_negative_int, ("num_h1", "num_h0", "seed_offset", "key_seed", "seed")),
                              (positive_int, ("pool_size", "num_letters", "sa_lengths", "max_new_tokens", "batch_size")),
                              (open_unit, ("gammas",)), (fraction, ("top_p",)),
                              (positive_float, ("delta_tsp", "delta_wip", "delta_sa", "temperature"))):
            for name in names:
                domain.require(getattr(self, name), f"--{name}")

    def delta(self, family: str) -> float:
        return float(getattr(self, f"delta_{family}"))

    def count(self, label: int, index: int) -> int:
        """Rows of split ``label`` (1: D_H1, 0: D_H0) for the ``index``-th family."""
        counts = self.num_h1 if label else self.num_h0
        counts = [counts] if isinstance(counts, int) else list(counts)
        if len(counts) not in (1, len(self.families)):
            raise ValueError(f"num_h{label} needs one count or one per family ({len(self.families)}), got {counts}")
        return int(counts[0] if len(counts) == 1 else counts[index])


def make_parser(subparsers: Any = None, prog: str | None = None) -> Any:
    """The ``TrlParser`` of ``recipes/synthesize.py`` and ``icw train synthesize`` (one :class:`SynthesisConfig`).
    With ``subparsers`` it is added there as the ``synthesize`` sub-command, as trl's scripts do."""
    from trl import TrlParser

    if subparsers is not None:
        return subparsers.add_parser("synthesize", help="generate the cold-start dataset D_cs with the logit "
                                     "perturbation", dataclass_types=(SynthesisConfig,))
    return TrlParser((SynthesisConfig,), prog=prog)


def main(script_args: SynthesisConfig) -> Any:
    """Synthesize as parsed by :func:`make_parser` (``recipes/synthesize.py``, ``icw train synthesize``)."""
    return synthesize(script_args)


def training_key(family: str, seed: int, tokenizer: Any, config: SynthesisConfig) -> ICWKey:
    """A training key with its per-row parameters drawn from ``seed`` (the paper's Appendix C table).

    Args:
        family (`str`): ``"tsp"``, ``"wip"`` or ``"sa"``.
        seed (`int`): the row's key seed.
        tokenizer: the tokenizer TSP/WIP keys are built for.
        config (`SynthesisConfig`): gives the parameter ranges (``gammas``, ``num_letters``, ``sa_lengths``,
            ``pool_size``).
    """
    rng = np.random.default_rng([seed, 7])
    if family == "tsp":
        return ICWKey.create("tsp", seed, tokenizer, gamma=float(rng.choice(config.gammas)), pool_size=config.pool_size)
    if family == "wip":
        return ICWKey.create("wip", seed, tokenizer, num_letters=config.num_letters)
    return ICWKey.create("sa", seed, length=int(rng.choice(config.sa_lengths)))


def read_queries(config: SynthesisConfig) -> list[str]:
    """Training queries from ``queries_file``, online from ``dataset_name``, or else the bundled
    ``train`` questions (offline). Any query that is an ICWBench test question is an error.

    Args:
        config (`SynthesisConfig`): names the query source.
    """
    if config.queries_file:
        queries, source = [q for q, _ in read_questions(config.queries_file)], f"queries_file {config.queries_file}"
    elif config.dataset_name:
        from datasets import load_dataset

        ds = load_dataset(config.dataset_name, split=config.dataset_split)
        queries, source = [str(q) for q in ds[config.query_column]], f"dataset {config.dataset_name}[{config.dataset_split}]"
    else:
        return [q for q, _ in bundled_questions("train")]  # disjoint from the test questions by construction
    check_not_test_questions(queries, source)
    return queries


def plan(config: SynthesisConfig, queries: Sequence[str]) -> list[dict[str, Any]]:
    """Every row to generate: id, family, label, key seed and query.

    The shuffled queries are split into a ``D_H1`` part and a ``D_H0`` part in proportion to the
    rows asked for, so no ``D_H0`` query is also a ``D_H1`` query (a shared query would give the
    student the same answer context with and without the bias). Within a part queries are not
    reused while they last; then they are reused with other keys (the run's summary says so:
    :func:`query_use`).

    Args:
        config (`SynthesisConfig`): gives the families, row counts and seeds.
        queries (`Sequence[str]`): the training queries.
    """
    for family in config.families:
        if family not in FAMILIES:
            raise ValueError(f"unknown family {family!r}; choose from {', '.join(FAMILIES)}")
    if not queries:
        raise ValueError("the query list is empty")
    order = [queries[int(i)] for i in np.random.default_rng(config.seed).permutation(len(queries))]
    need = {label: sum(config.count(label, i) for i in range(len(config.families))) for label in (1, 0)}
    if need[1] and need[0]:
        if len(order) < 2:
            raise ValueError("D_H1 and D_H0 need disjoint queries: give at least two queries")
        cut = min(max(round(len(order) * need[1] / (need[1] + need[0])), 1), len(order) - 1)
    else:
        cut = len(order) if need[1] else 0
    parts = {1: order[:cut], 0: order[cut:]}
    items, used = [], {1: 0, 0: 0}
    for f_index, family in enumerate(config.families):
        for label in (1, 0):
            for i in range(config.count(label, f_index)):
                seed = config.seed_offset + FAMILIES.index(family) * 10_000_000 + (1 - label) * 5_000_000 + i
                seed = seed if config.key_seed is None else config.key_seed
                pool = parts[label]
                items.append({"id": f"{family}-h{label}-{i}", "family": family, "label": label, "seed": seed,
                              "query": pool[used[label] % len(pool)]})
                used[label] += 1
    return items


def query_use(items: Sequence[dict[str, Any]]) -> str:
    """One line of the run's summary: the queries each split drew on and, when there are fewer than its rows, that
    they were reused with other keys (whose instructions, and so answers, differ).

    Args:
        items (`Sequence[dict]`): :func:`plan`'s rows.
    """
    parts, reused = [], False
    for label, name in ((1, "D_H1"), (0, "D_H0")):
        queries = [it["query"] for it in items if it["label"] == label]
        if queries:
            parts.append(f"{name} {len(queries)} rows from {len(set(queries))} queries")
            reused |= len(queries) > len(set(queries))
    note = "; each query is reused with other keys (more queries: --queries_file)" if reused else ""
    shared = ", none shared by D_H1 and D_H0" if len(parts) == 2 else ""
    return f"queries: {', '.join(parts)}{shared}{note}"


def statistics(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The paper's cold-start table: size, mean z and mean perplexity per family and split.

    Args:
        rows (`Sequence[dict]`): the synthesized rows (with ``z_score`` and optional ``perplexity``).
    """
    table = []
    for family in FAMILIES:
        entry: dict[str, Any] = {"family": family}
        for label, name in ((1, "h1"), (0, "h0")):
            part = [r for r in rows if r["family"] == family and r["label"] == label]
            entry[f"size_{name}"] = len(part)
            entry[f"mean_z_{name}"] = float(np.mean([r["z"] for r in part])) if part else float("nan")
            ppl = [r["perplexity"] for r in part if r.get("perplexity") is not None and math.isfinite(r["perplexity"])]
            entry[f"ppl_{name}"] = float(np.mean(ppl)) if ppl else float("nan")
        if entry["size_h1"] or entry["size_h0"]:
            table.append(entry)
    return table


def format_statistics(table: Sequence[dict[str, Any]]) -> str:
    """The cold-start table of :func:`statistics` as markdown.

    Args:
        table (`Sequence[dict]`): the rows :func:`statistics` returns.
    """
    lines = ["| Family | |D_H1| | |D_H0| | mean z H1 | mean z H0 | PPL H1 | PPL H0 |", "|---|---|---|---|---|---|---|"]
    for e in table:
        lines.append(f"| {e['family'].upper()} | {e['size_h1']} | {e['size_h0']} | {e['mean_z_h1']:.2f} | "
                     f"{e['mean_z_h0']:.2f} | {e['ppl_h1']:.2f} | {e['ppl_h0']:.2f} |")
    return "\n".join(lines)


def _load(config: SynthesisConfig) -> tuple[Any, Any]:
    from ..models import load_model

    dtype = getattr(torch, config.dtype) if config.dtype else None
    device = config.device or ("cuda" if torch.cuda.is_available() else None)
    return load_model(config.model_name_or_path, dtype=dtype, device=device)


def synthesize(config: SynthesisConfig, model: Any = None, tokenizer: Any = None,
               queries: Sequence[str] | None = None) -> Any:
    """Generate ``D_cs`` into ``config.output_dir`` (resuming from ``rows.jsonl``) and return it as a
    ``datasets.Dataset``; prints the statistics table.

    Args:
        config (`SynthesisConfig`): what to generate and where.
        model (*optional*): a loaded model (``None``: load ``config.model_name_or_path``).
        tokenizer (*optional*): its tokenizer (``None``: loaded with the model).
        queries (`Sequence[str]`, *optional*): the training queries (``None``: :func:`read_queries`).
    """
    from accelerate import PartialState
    from datasets import Dataset

    state = PartialState()  # under `accelerate launch` each process takes every world_size-th row
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    # the queries (and their overlap with ICWBench's test questions) are checked before the model loads
    items = plan(config, read_queries(config) if queries is None else list(queries))
    if model is None or tokenizer is None:
        if config.device is None and state.num_processes > 1:
            config.device = str(state.device)
        model, tokenizer = _load(config)
    log = out / ("rows.jsonl" if state.num_processes == 1 else f"rows.{state.process_index}.jsonl")
    done = _read_logs(out)
    todo = [it for it in items if it["id"] not in done][state.process_index :: state.num_processes]
    if done:
        print(f"resuming: {len(done)} rows already in {log}, {len(todo)} to go")
    (out / "config.json").write_text(json.dumps(asdict(config), indent=2))
    sampling = {"do_sample": True, "temperature": config.temperature, "top_p": config.top_p}
    scale = config.temperature if config.delta_in_tempered_logits else 1.0
    bar = tqdm(total=len(todo), desc="synthesizing D_cs", disable=not state.is_local_main_process)
    # rows are appended through icw.jsonl: whole lines, locked, fsynced (resumable after a kill)
    for family in config.families:
        for label in (1, 0):
            group = [it for it in todo if it["family"] == family and it["label"] == label]
            if not group:
                continue
            keys = [training_key(family, it["seed"], tokenizer, config) for it in group]

            def save(indices: list[int], answers: list[str], ids: list[list[int]], group=group, keys=keys,
                     label=label) -> None:
                rows = [group[i] for i in indices]
                row_keys = [keys[i] for i in indices]
                zs = [r.z_score for r in verify(answers, row_keys, tokenizer, num_null_keys=1)]
                ppl = (perplexities(model, tokenizer, [r["query"] for r in rows], answers) if config.perplexity
                       else [None] * len(rows))
                records = [{"id": row["id"], "family": row["family"], "key": key.to_string(),
                            "query": row["query"], "response": answer, "response_ids": seq, "label": label,
                            "z": float(z), "perplexity": p}
                           for row, key, answer, seq, z, p in zip(rows, row_keys, answers, ids, zs, ppl, strict=True)]
                append_jsonl(log, records)
                done.update((r["id"], r) for r in records)
                bar.update(len(rows))

            generate_responses(model, tokenizer, [it["query"] for it in group], keys,
                               mode="bias" if label else "plain", delta=config.delta(family) * scale,
                               max_new_tokens=config.max_new_tokens, batch_size=config.batch_size,
                               seed=config.seed + group[0]["seed"], generation_kwargs=sampling, on_batch=save,
                               return_token_ids=True)
    bar.close()
    state.wait_for_everyone()
    rows = list(_read_logs(out).values())  # earlier runs into the same folder (e.g. one family at a time) are kept
    if not state.is_main_process:
        return Dataset.from_list(rows)
    dataset = Dataset.from_list(rows)
    dataset.to_parquet(str(out / "data.parquet"))
    table = statistics(rows)
    (out / "stats.json").write_text(json.dumps(table, indent=2))
    print(format_statistics(table))
    print(query_use(items))
    print(f"saved D_cs ({len(rows)} rows) to {out / 'data.parquet'} (statistics: {out / 'stats.json'})")
    return dataset


def _read_logs(out: Path) -> dict[str, dict[str, Any]]:
    """Rows already generated, by id; a torn last line (an interrupted run) is skipped and regenerated."""
    done: dict[str, dict[str, Any]] = {}
    for log in sorted(out.glob("rows*.jsonl")):
        for number, row in iter_jsonl(log, on_torn=_note_torn):
            if not isinstance(row, dict) or not isinstance(row.get("id"), str):
                raise JSONLError(f"{log}:{number}: expected an object with a string 'id' field")
            done[row["id"]] = row
    return done


def _note_torn(name: str, number: int) -> None:
    print(f"note: {name}:{number}: skipped an incomplete last line (interrupted run); it is regenerated")
