"""``icw bench run``: generate positives and negatives over ICWBench, score them, attack them,
measure quality, and save everything as it finishes.

For every query of a family the runner asks one model for

* a **positive** response: the key's instruction + the query (``--mode instruction``, the
  benchmark), or the query alone decoded with the key's logit bias (``--mode bias``, the
  synthesis upper bound);
* a **negative** response: the query alone, plain decoding.

Each response is verified under the query's key (z, exact p). Results are appended to
``RUN_DIR/responses.jsonl``, one JSON object per ``(model, family, id, role, attack)``, flushed
after every batch: a run that is interrupted (Ctrl-C, SIGKILL, a crash) is restarted with the
same command and continues where it stopped, repeating no finished item. Items that failed
(an endpoint error) are recorded with an ``error`` field and retried on the next run.

Example (the embedded SmolLM2, bias mode, 60 queries per family)::

    icw bench run --dataset ./icwbench --out runs/smollm2-bias --mode bias --limit 60 --max-new-tokens 200
    icw bench report runs/smollm2-bias
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ..jsonl import JSONLError, append_jsonl, iter_jsonl, read_json_object
from ..keys import FAMILIES, ICWKey, as_key
from ..templates import template_for
from .backends import Backend, BackendError, Request, make_backend
from .config import (  # noqa: F401 (the configuration's names stay importable from the runner)
    DEFAULT_DATASET,
    DEFAULT_TASK,
    RUN_PARTS,
    TASKS_DIR,
    BackendConfig,
    ExtrasConfig,
    RunConfig,
    TaskConfig,
    read_config_file,
)
from .scoring import key_tokenizer, score_texts

REQUIRED_COLUMNS = ("id", "family", "key", "instruction", "query")
RESPONSES, RUN_CONFIG, QUALITY = "responses.jsonl", "run.json", "quality.jsonl"
#: Settings that must match when a run directory is resumed (otherwise results would mix).
_RESUME_FIELDS = ("model", "dataset", "split", "mode", "max_new_tokens", "template", "key_seed_offset",
                  "query_dataset", "query_column", "adapter")
#: Recorded only by newer runs: checked when the saved run.json has them.
_RESUME_FIELDS_IF_SAVED = ("task", "version")


# ------------------------------------------------------------------------------- the store
class ResultStore:
    """Append-only JSON Lines keyed by ``(model, family, id, role, attack)``.

    Reads and appends go through :mod:`icw.jsonl`: records split only at ``"\\n"``, appends are
    whole lines under an inter-process lock (several processes may share a run folder) and
    fsynced, so a killed process loses at most the batch in flight. A torn last line (killed
    mid-write) is skipped on load and counted in ``skipped_lines``; a malformed line anywhere
    else is an error naming the file and line. Later lines win, so a retried failure replaces
    its error.

    Args:
        path (`str` or `os.PathLike`): the JSON Lines file (created on the first append).
    """

    KEY = ("model", "family", "id", "role", "attack")
    REQUIRED = ("model", "family", "role")

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.records: dict[tuple, dict[str, Any]] = {}
        self.skipped_lines = 0
        if self.path.exists():
            for number, row in iter_jsonl(self.path, on_torn=self._torn):
                self.records[self.key(check_record(row, f"{self.path}:{number}", self.REQUIRED))] = row

    def _torn(self, name: str, number: int) -> None:
        self.skipped_lines += 1

    @classmethod
    def key(cls, row: dict[str, Any]) -> tuple:
        return tuple(row.get(k, "none" if k == "attack" else None) for k in cls.KEY)

    def done(self, row: dict[str, Any]) -> bool:
        got = self.records.get(self.key(row))
        return got is not None and not got.get("error")

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        rows = list(rows)
        append_jsonl(self.path, rows)
        for r in rows:
            self.records[self.key(r)] = r

    def rows(self) -> list[dict[str, Any]]:
        return list(self.records.values())


def check_record(row: Any, where: str, required: Sequence[str] = ()) -> dict[str, Any]:
    """``row`` if it is a JSON object with string fields ``required``, else a one-line error at ``where``.

    Args:
        row: a parsed JSON value.
        where (`str`): names the file and line in the error.
        required (`Sequence[str]`, defaults to ``()``): fields that must be strings.
    """
    if not isinstance(row, dict):
        raise JSONLError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for name in required:
        if not isinstance(row.get(name), str):
            raise JSONLError(f"{where}: expected a string field {name!r} (fields: {', '.join(sorted(row)) or 'none'})")
    if "id" in row and (isinstance(row["id"], bool) or not isinstance(row["id"], (str, int))):
        raise JSONLError(f"{where}: field 'id' must be a string or an integer, got {row['id']!r:.60}")
    if not isinstance(row.get("attack", "none"), str):
        raise JSONLError(f"{where}: field 'attack' must be a string, got {row['attack']!r:.60}")
    for name in ("z_score", "p_value", "value"):
        value = row.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise JSONLError(f"{where}: field {name!r} must be a number or null, got {value!r:.60}")
    return row


def load_records(run_dir: str | os.PathLike, name: str = RESPONSES) -> list[dict[str, Any]]:
    """The latest record of every item in ``RUN_DIR/responses.jsonl`` (or another JSONL file).

    Args:
        run_dir (`str` or `os.PathLike`): an ``icw bench run`` folder.
        name (`str`, defaults to ``"responses.jsonl"``): the JSON Lines file inside it.
    """
    return ResultStore(Path(run_dir) / name).rows()


# ----------------------------------------------------------------------------- the dataset
def load_family(dataset: str, family: str, split: str = "test", limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of one family of ICWBench (local folder or Hub id), checked for the needed columns.

    Args:
        dataset (`str`): an ICWBench folder or Hub id.
        family (`str`): ``"tsp"``, ``"wip"`` or ``"sa"``.
        split (`str`, defaults to ``"test"``): the dataset split.
        limit (`int`, *optional*): keep the first ``limit`` rows (``None``: all).
    """
    import datasets

    from .dataset import load_config

    try:
        configs = datasets.get_dataset_config_names(dataset)
    except FileNotFoundError:
        raise ValueError(f"dataset {dataset!r} not found: pass an ICWBench folder (icw bench build) or a Hub id "
                         "while online") from None
    except Exception as err:  # datasets raises many kinds for unreachable/malformed sources
        raise ValueError(f"cannot read dataset {dataset!r}: {type(err).__name__}: {err}") from None
    if family not in configs:
        raise ValueError(f"family {family!r} is not in dataset {dataset!r}, which has configs {configs}; "
                         f"choose --families from those")
    try:
        ds = load_config(dataset, family, split)
    except ValueError as err:
        raise ValueError(f"dataset {dataset!r} ({family}) has no split {split!r}: {err}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in ds.column_names]
    if missing:
        raise ValueError(f"dataset {dataset!r} ({family}/{split}) lacks column(s) {missing}; ICWBench rows need "
                         f"{list(REQUIRED_COLUMNS)} (see icw bench build)")
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    rows = ds.to_list()
    wrong = {r["family"] for r in rows} - {family}
    if wrong:
        raise ValueError(f"dataset {dataset!r} config {family!r} holds rows of family {sorted(wrong)}")
    check_row_keys(rows, f"dataset {dataset!r} ({family}/{split})")
    return rows


def check_row_keys(rows: Sequence[dict[str, Any]], where: str) -> None:
    """Parse every row's key before anything is generated or written; errors name the row.

    Args:
        rows (`Sequence[dict]`): ICWBench rows.
        where (`str`): names the dataset and family in errors.
    """
    for number, row in enumerate(rows):
        try:
            key = as_key(row["key"])
        except ValueError as err:
            raise ValueError(f"{where} row {number} (id {row.get('id')!r}): bad key: {err}") from None
        if key.family != row["family"]:
            raise ValueError(f"{where} row {number} (id {row.get('id')!r}): a {key.family} key in a "
                             f"{row['family']} row")


def load_queries(spec: str, column: str, n: int) -> list[str]:
    """The first ``n`` values of ``column`` in ``dataset[:split]`` (a Hub id, folder or data file).

    Args:
        spec (`str`): ``dataset[:split]``: a Hub id, folder or data file, optionally with a split.
        column (`str`): the column holding the queries.
        n (`int`): the number of queries needed.
    """
    import datasets

    name, _, split = spec.partition(":")
    split = split or "test"
    try:
        if Path(name).is_file():
            ds = datasets.load_dataset(Path(name).suffix.lstrip(".").replace("jsonl", "json"), data_files=name,
                                       split="train")
        else:
            ds = datasets.load_dataset(name, split=split)
    except Exception as err:
        raise ValueError(f"cannot load queries from {spec!r}: {type(err).__name__}: {err}") from None
    if column not in ds.column_names:
        raise ValueError(f"{spec!r} has no column {column!r}; its columns are {ds.column_names} (--query-column)")
    if len(ds) < n:
        raise ValueError(f"{spec!r} has {len(ds)} rows but {n} queries are needed")
    return [str(q) for q in ds.select(range(n))[column]]


@dataclass
class Item:
    """One query of the run with its effective key and user messages.

    Args:
        row (`dict`): the ICWBench row.
        key (`ICWKey`): the effective key (held-out keys redraw it).
        positive_user (`str`): the user turn of the watermarked answer (instruction + query in
            ``instruction`` mode).
        query (`str`): the query alone (the negative's user turn).
    """

    row: dict[str, Any]
    key: ICWKey
    positive_user: str
    query: str


def _rekey(key: ICWKey, tokenizer: Any, seed: int | None = None) -> ICWKey:
    """The same key material definition (family, parameters, seed) over another tokenizer."""
    params = {k: v for k, v in key.to_dict().items() if k not in ("family", "seed", "tokenizer", "vocab")}
    seed = key.seed if seed is None else seed
    return ICWKey.create(key.family, seed, tokenizer if key.family != "sa" else None, **params)


def build_items(config: RunConfig, family: str, rows: Sequence[dict[str, Any]], backend: Backend) -> list[Item]:
    """Apply the generalization options and the mode to the dataset rows.

    Args:
        config (`RunConfig`): the run's options (mode, template, held-out keys, query dataset).
        family (`str`): the family.
        rows (`Sequence[dict]`): the family's ICWBench rows.
        backend (`Backend`): the backend (its tokenizer renders TSP instructions).
    """
    queries = ([r["query"] for r in rows] if not config.query_dataset
               else load_queries(config.query_dataset, config.query_column, len(rows)))
    template = template_for(config.template, family)
    tokenizers: dict[str, Any] = {}
    items = []
    for index, (row, query) in enumerate(zip(rows, queries, strict=True)):
        key = as_key(row["key"])
        redraw = config.key_seed_offset is not None
        if redraw:
            key = _rekey(key, key_tokenizer(key, tokenizers), config.key_seed_offset + index)
        if config.mode == "bias":
            tok = backend.tokenizer
            if key.family != "sa" and key.vocab != _fingerprint(tok):
                key = _rekey(key, tok)  # the bias lives in the model's own vocabulary
            items.append(Item(row, key, query, query))
            continue
        instruction = row["instruction"]
        if redraw or template is not None:
            instruction = key.instruction(key_tokenizer(key, tokenizers), template)
        items.append(Item(row, key, f"{instruction}\n\n{query}", query))
    return items


def _fingerprint(tokenizer: Any) -> str:
    from ..vocab import vocabulary

    return vocabulary(tokenizer).fingerprint


# ---------------------------------------------------------------------------------- running
def _check_resume(config: RunConfig, out: Path) -> None:
    saved_path = out / RUN_CONFIG
    current = {**asdict(config), "model": config.model_id()}
    current.pop("api_key", None)
    if saved_path.exists():
        saved = read_json_object(saved_path, "it holds the settings of an earlier icw bench run")
        clash = [f for f in _RESUME_FIELDS if saved.get(f) != current.get(f)]
        clash += [f for f in _RESUME_FIELDS_IF_SAVED if f in saved and saved[f] != current.get(f)]
        if clash:
            details = ", ".join(f"{f}: {saved.get(f)!r} there vs {current.get(f)!r} now" for f in clash)
            raise ValueError(f"{out} holds a run with other settings ({details}); resume with the same settings "
                             "or choose another --out")
        merged = {**saved, **current, "families": sorted(set(saved.get("families", [])) | set(config.families))}
    else:
        merged = current
    merged["families"] = [f for f in FAMILIES if f in merged["families"]]
    out.mkdir(parents=True, exist_ok=True)
    tmp = saved_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(merged, indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(saved_path)


def _base_record(config: RunConfig, model: str, family: str, item: Item, role: str) -> dict[str, Any]:
    return {"model": model, "family": family, "id": item.row["id"], "role": role, "attack": "none",
            "mode": config.mode if role == "positive" else "plain", "key": item.key.to_string(),
            "query": item.query, "query_source": item.row.get("query_source"), "template": config.template}


def context_warning(backend: Backend, prompts: Sequence[str]) -> str | None:
    """A warning when the longest prompt (plus a short answer) does not fit the local model's context.

    Args:
        backend (`Backend`): the backend (a local model's context size is checked).
        prompts (`Sequence[str]`): the user turns to send.
    """
    from ..generation import prompt_overflow

    overflow = prompt_overflow(getattr(backend, "model", None), backend.tokenizer, prompts, max_new_tokens=32)
    if overflow is None:
        return None
    length, limit = overflow
    return (f"the longest prompt has {length} tokens but {backend.name} reads at most {limit}; its answers will be "
            "meaningless. For TSP, build the dataset with a smaller candidate pool (icw bench build --pool-size N)")


def generate_family(config: RunConfig, backend: Backend, store: ResultStore, family: str,
                    items: Sequence[Item]) -> int:
    """Generate and score the missing positives and negatives of one family; returns how many.

    Positives and negatives are generated in turn, each with its own progress bar that names the
    role and, on resume, how many the run folder already holds ("sa positives: 12 of 24 already done").

    Args:
        config (`RunConfig`): the run's options.
        backend (`Backend`): generates the answers.
        store (`ResultStore`): the run's records; finished items are skipped and new ones appended.
        family (`str`): the family.
        items (`Sequence[Item]`): the family's items (:func:`build_items`).
    """
    model = config.model_id()
    pending: dict[str, list[Request]] = {"positive": [], "negative": []}
    for item in items:
        for role in ("positive", "negative"):
            record = _base_record(config, model, family, item, role)
            if store.done(record):
                continue
            if role == "negative":
                pending[role].append(Request(record, item.query))
            elif config.mode == "bias":
                pending[role].append(Request(record, item.query, item.key))
            else:
                pending[role].append(Request(record, item.positive_user))
    requests = pending["positive"] + pending["negative"]
    if not requests:
        return 0
    warning = context_warning(backend, [r.user for r in requests])
    if warning:
        print(f"icw: warning: {family}: {warning}", file=sys.stderr)

    def save(done: list[Request], answers: list[str | None], errors: list[str | None]) -> None:
        ok = [i for i, a in enumerate(answers) if a is not None]
        scores = score_texts([answers[i] for i in ok], [done[i].uid["key"] for i in ok])
        by_index = dict(zip(ok, scores, strict=True))
        rows = []
        for i, request in enumerate(done):
            row = {**request.uid, "response": answers[i], "time": time.time()}
            if i in by_index:
                row.update(by_index[i])
            else:
                row.update(z_score=None, p_value=None, num_tokens_scored=None, error=errors[i] or "no answer")
            rows.append(row)
        store.append(rows)

    for role, todo in pending.items():
        if todo:
            backend.generate(todo, save, desc=progress_label(family, role, len(items) - len(todo), len(items))
                             if config.progress else None)
    return len(requests)


def progress_label(family: str, role: str, done: int, total: int) -> str:
    """The progress bar's description: family, role and, on resume, what is already done.

    Args:
        family (`str`): the family.
        role (`str`): ``"positive"`` or ``"negative"``.
        done (`int`): items the run folder already holds.
        total (`int`): items of this family and role.

    Example:
        >>> progress_label("sa", "positive", 12, 24)
        'sa positives: 12 of 24 already done'
        >>> progress_label("wip", "negative", 0, 24)
        'wip negatives'
    """
    label = f"{family} {role}s"
    return f"{label}: {done} of {total} already done" if done else label


def run(config: RunConfig, backend: Backend | None = None) -> Path:
    """Run the benchmark as configured; returns the run directory. Resumable (see module doc).

    Args:
        config (`RunConfig`): what to run and where to write it.
        backend (`Backend`, *optional*): a ready backend (``None``: built from ``config``).
    """
    out = Path(config.out)
    # dataset problems surface before anything is written, so a failed start leaves no run.json
    rows_by_family = {f: load_family(config.dataset, f, config.split, config.limit) for f in config.families}
    if backend is None:
        backend = make_backend(config.backend, config.model, base_url=config.base_url, api_key=config.api_key,
                               max_new_tokens=config.max_new_tokens, batch_size=config.batch_size,
                               delta=config.delta, seed=config.seed, adapter=config.adapter,
                               concurrency=config.concurrency)
    if config.mode == "bias" and not backend.supports_bias:
        raise BackendError(f"the {type(backend).__name__} cannot apply a logit bias: use --mode instruction")
    store = ResultStore(out / RESPONSES)  # a malformed store is rejected before run.json is written
    _check_resume(config, out)
    if store.skipped_lines:
        print(f"icw: note: ignored {store.skipped_lines} torn line(s) in {store.path} (an earlier run was killed)",
              file=sys.stderr)
    attack_client = judge = attacks = None
    for family in config.families:
        items = build_items(config, family, rows_by_family[family], backend)
        generate_family(config, backend, store, family, items)
        if config.attacks:
            from .attacks import attack_family, make_attacks

            if attack_client is None and config.attack_url:
                from .backends import ChatClient

                attack_client = ChatClient(config.attack_url, config.attack_model or config.model, config.api_key)
                attack_client.check()
            if attacks is None:  # once per run: the adaptive attacker loads a model
                attacks = make_attacks(config.attacks, attack_client, config.seed or 0, config.paraphrase_rounds,
                                       config.attack_adapter)
            attack_family(store, config.model_id(), family, attacks)
        if config.ppl_models or config.judge_url:
            from .quality import coverage_family, judge_family, perplexity_family, repetition_family

            quality = ResultStore(out / QUALITY)
            for ref in config.ppl_models:
                perplexity_family(store, quality, config.model_id(), family, ref)
                repetition_family(store, quality, config.model_id(), family, ref)
            if config.judge_url:
                if judge is None:
                    from .backends import ChatClient

                    judge = ChatClient(config.judge_url, config.judge_model, config.api_key, temperature=0.0)
                    judge.check()
                judge_family(store, quality, config.model_id(), family, judge)
                if config.attacks:  # the adaptive-attack table's Coverage: how much of the answer each attack kept
                    coverage_family(store, quality, config.model_id(), family, judge)
    failed = [r for r in store.rows() if r.get("error") and r["family"] in config.families]
    if failed:
        print(f"icw: note: {len(failed)} item(s) failed and are recorded with an 'error' field in {store.path}; "
              "run the same command again to retry them", file=sys.stderr)
    return out


# -------------------------------------------------------------------------------------- CLI
def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The :class:`RunConfig` of parsed ``icw bench run`` arguments (the parser's three parts, joined)."""
    values = vars(args)
    return RunConfig.from_parts(*(part(**{f.name: values[f.name] for f in fields(part)}) for part in RUN_PARTS))


def _run_command(args: argparse.Namespace) -> None:
    config = config_from_args(args)
    try:
        out = run(config)
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM (icw.cli.Terminated, exit status 143)
        print(f"\nicw: interrupted; finished items are saved in {config.out}/{RESPONSES}. "
              "Run the same command to resume.", file=sys.stderr)
        raise SystemExit(getattr(err, "exit_status", 130)) from None
    print(f"results in {out / RESPONSES}; summarise with: icw bench report {out}")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``icw bench run``: its options are built from :data:`RUN_PARTS` by the bench's
    ``HfArgumentParser`` (``--field`` and ``--field-name`` spellings), plus ``--config``."""
    p = sub.add_parser("run", help="generate, score, attack and judge one model on ICWBench (resumable)",
                       description=__doc__.split("\n\n")[0], dataclass_types=RUN_PARTS)
    p.set_defaults(func=_run_command)
