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
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..keys import FAMILIES, ICWKey, as_key
from .backends import BACKENDS, Backend, BackendError, Request, make_backend
from .scoring import key_tokenizer, score_texts
from .templates import template_for

REQUIRED_COLUMNS = ("id", "family", "key", "instruction", "query")
RESPONSES, RUN_CONFIG, QUALITY = "responses.jsonl", "run.json", "quality.jsonl"
#: Packaged task files (``icw bench run --config NAME`` takes one by name, or any YAML file).
TASKS_DIR = Path(__file__).with_name("tasks")


def read_config_file(spec: str) -> dict[str, Any]:
    """The mapping of a YAML run/task file: a path, or the name of a packaged task (``icwbench``)."""
    import yaml

    path = Path(spec)
    if not path.is_file() and (TASKS_DIR / f"{spec}.yaml").is_file():
        path = TASKS_DIR / f"{spec}.yaml"
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        known = ", ".join(sorted(p.stem for p in TASKS_DIR.glob("*.yaml")))
        raise ValueError(f"--config {spec}: no such file, and no packaged task of that name ({known})") from None
    except yaml.YAMLError as err:
        raise ValueError(f"--config {spec}: not valid YAML ({err})") from None
    if not isinstance(values, dict):
        raise ValueError(f"--config {spec}: expected a YAML mapping of field: value")
    return values


#: The default task (``tasks/icwbench.yaml``): the one home of the task defaults below.
DEFAULT_TASK = read_config_file("icwbench")
DEFAULT_DATASET = DEFAULT_TASK["dataset"]
#: Settings that must match when a run directory is resumed (otherwise results would mix).
_RESUME_FIELDS = ("model", "dataset", "split", "mode", "max_new_tokens", "template", "key_seed_offset",
                  "query_dataset", "query_column", "adapter")
#: Recorded only by newer runs: checked when the saved run.json has them.
_RESUME_FIELDS_IF_SAVED = ("task", "version")


@dataclass
class TaskConfig:
    """What is asked: an ICWBench task, declarative and versioned like an lm-evaluation-harness task.

    The defaults are those of the packaged ``icw/bench/tasks/icwbench.yaml``; a YAML file with the
    same keys (``--config my_task.yaml``) defines another task.
    """

    _argument_group_name = "task (a YAML task file sets these: --config icwbench)"

    task: str = field(default=DEFAULT_TASK["task"], metadata={"help": "task name, recorded in run.json"})
    version: int = field(default=DEFAULT_TASK["version"],
                         metadata={"help": "task version, recorded in run.json (bump when the numbers would move)"})
    dataset: str = field(default=DEFAULT_TASK["dataset"], metadata={"help": "ICWBench folder or Hub id"})
    split: str = field(default=DEFAULT_TASK["split"], metadata={"help": "dataset split"})
    families: list[str] = field(default_factory=lambda: list(DEFAULT_TASK["families"]),
                                metadata={"help": "families to run", "choices": FAMILIES})
    limit: int | None = field(default=None, metadata={"help": "first N queries per family (unset: all)"})
    mode: str = field(default=DEFAULT_TASK["mode"], metadata={
        "help": "instruction (the benchmark) or bias (logit bias, the synthesis upper bound)",
        "choices": ("instruction", "bias")})
    max_new_tokens: int = field(default=DEFAULT_TASK["max_new_tokens"],
                                metadata={"help": "cap on new tokens per response"})
    delta: float | None = field(default=None, metadata={"help": "bias strength in bias mode (unset: the family's default)"})
    template: str = field(default=DEFAULT_TASK["template"], metadata={"help": "paper, heldout, or a template file"})
    key_seed_offset: int | None = field(
        default=None, metadata={"help": "held-out keys: redraw each key with seed = offset + row"})
    query_dataset: str | None = field(default=None, metadata={"help": "take queries from another dataset[:split]"})
    query_column: str = field(default="query", metadata={"help": "column of --query-dataset holding the queries"})

    def __post_init__(self) -> None:
        self.families = [self.families] if isinstance(self.families, str) else list(self.families)
        unknown = sorted(set(self.families) - set(FAMILIES))
        if unknown:
            raise ValueError(f"unknown family {', '.join(unknown)}; choose from {', '.join(FAMILIES)}")
        if not self.families:
            raise ValueError("--families needs at least one of " + ", ".join(FAMILIES))
        if self.mode not in ("instruction", "bias"):
            raise ValueError(f"--mode must be 'instruction' or 'bias', got {self.mode!r}")
        if self.max_new_tokens < 1:
            raise ValueError("--max-new-tokens must be at least 1")
        if self.limit is not None and self.limit < 1:
            raise ValueError("--limit must be at least 1")


@dataclass
class BackendConfig:
    """Who answers: the model or endpoint and how it is driven."""

    _argument_group_name = "backend"

    backend: str = field(default="transformers", metadata={"help": "transformers, openai or vllm",
                                                           "choices": BACKENDS})
    model: str = field(default="smollm2", metadata={"help": "model name, folder or Hub id (smollm2: the embedded SmolLM2)"})
    base_model: str | None = field(default=None, metadata={"help": "recorded: the model this one was trained from"})
    adapter: str | None = field(default=None, metadata={"help": "PEFT adapter folder (transformers backend)"})
    base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible endpoint URL (openai backend)"})
    api_key: str | None = field(default=None, metadata={"help": "endpoint API key (unset: $OPENAI_API_KEY)"})
    batch_size: int = field(default=8, metadata={"help": "prompts per generate call (transformers)"})
    concurrency: int = field(default=4, metadata={"help": "parallel requests (openai backend)"})
    seed: int = field(default=0, metadata={"help": "sampling seed"})

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")


@dataclass
class ExtrasConfig:
    """Where results go and what else is measured: attacks, perplexity, an LLM judge."""

    _argument_group_name = "output, attacks and quality"

    out: str = field(metadata={"help": "run directory (responses.jsonl, run.json, quality.jsonl); "
                                       "rerun the same command to resume it"})
    attacks: list[str] = field(default_factory=list, metadata={"help": "attacks on positives (see icw.bench.attacks)"})
    attack_url: str | None = field(default=None, metadata={"help": "endpoint for paraphrase-style attacks"})
    attack_model: str | None = field(default=None, metadata={"help": "model at --attack-url"})
    paraphrase_rounds: int = field(default=1, metadata={"help": "rounds of LLM paraphrase (1-3)"})
    ppl_models: list[str] = field(default_factory=list, metadata={"help": "reference models for perplexity"})
    judge_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible endpoint of the judge"})
    judge_model: str | None = field(default=None, metadata={"help": "judge model name"})
    progress: bool = field(default=True, metadata={"help": "show progress bars"})

    def __post_init__(self) -> None:
        self.attacks = [self.attacks] if isinstance(self.attacks, str) else list(self.attacks)
        self.ppl_models = [self.ppl_models] if isinstance(self.ppl_models, str) else list(self.ppl_models)
        if self.judge_url and not self.judge_model:
            raise ValueError("--judge-url needs --judge-model")


#: The parts of a run, in the order ``icw bench run``'s parser builds them.
RUN_PARTS = (TaskConfig, BackendConfig, ExtrasConfig)


@dataclass
class RunConfig(TaskConfig, BackendConfig, ExtrasConfig):
    """Settings of one ``icw bench run``: the task, the backend and the extras in one flat object
    (saved as ``RUN_DIR/run.json``). Build it from keywords, or from its parts with :meth:`from_parts`.

    Example:
        >>> config = RunConfig(out="runs/x", families=["sa"], max_new_tokens=200)
        >>> task, backend, extras = config.parts()
        >>> task.task, task.version, task.families, backend.model, extras.out
        ('icwbench', 1, ['sa'], 'smollm2', 'runs/x')
    """

    def __post_init__(self) -> None:
        for part in RUN_PARTS:
            part.__post_init__(self)
        if self.backend == "openai" and self.mode == "bias":
            raise ValueError("bias mode needs logit access: use --backend transformers or vllm with --mode bias")

    @classmethod
    def from_parts(cls, task: TaskConfig, backend: BackendConfig, extras: ExtrasConfig) -> RunConfig:
        return cls(**asdict(task), **asdict(backend), **asdict(extras))

    def parts(self) -> tuple[TaskConfig, BackendConfig, ExtrasConfig]:
        values = asdict(self)
        return tuple(part(**{f.name: values[f.name] for f in fields(part)}) for part in RUN_PARTS)

    def model_id(self) -> str:
        from ..models import SMOLLM2_HUB_ID

        return SMOLLM2_HUB_ID if self.model == "smollm2" else self.model


# ------------------------------------------------------------------------------- the store
class ResultStore:
    """Append-only JSON Lines keyed by ``(model, family, id, role, attack)``.

    Every :meth:`append` writes whole lines and fsyncs, so a killed process loses at most the
    batch in flight. A torn last line (killed mid-write) is ignored on load and the next
    append starts on a fresh line. Later lines win, so a retried failure replaces its error.
    """

    KEY = ("model", "family", "id", "role", "attack")

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.records: dict[tuple, dict[str, Any]] = {}
        self.skipped_lines = 0
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    self.skipped_lines += 1
                    continue
                self.records[self.key(row)] = row

    @classmethod
    def key(cls, row: dict[str, Any]) -> tuple:
        return tuple(row.get(k, "none" if k == "attack" else None) for k in cls.KEY)

    def done(self, row: dict[str, Any]) -> bool:
        got = self.records.get(self.key(row))
        return got is not None and not got.get("error")

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        rows = list(rows)
        if not rows:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as fh:
            if fh.tell() > 0:
                with open(self.path, "rb") as check:
                    check.seek(-1, os.SEEK_END)
                    if check.read(1) != b"\n":
                        fh.write(b"\n")  # finish a line torn by an earlier kill
            fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        for r in rows:
            self.records[self.key(r)] = r

    def rows(self) -> list[dict[str, Any]]:
        return list(self.records.values())


def load_records(run_dir: str | os.PathLike, name: str = RESPONSES) -> list[dict[str, Any]]:
    """The latest record of every item in ``RUN_DIR/responses.jsonl`` (or another JSONL file)."""
    return ResultStore(Path(run_dir) / name).rows()


# ----------------------------------------------------------------------------- the dataset
def load_family(dataset: str, family: str, split: str = "test", limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of one family of ICWBench (local folder or Hub id), checked for the needed columns."""
    import datasets

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
        ds = datasets.load_dataset(dataset, family, split=split)
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
    return rows


def load_queries(spec: str, column: str, n: int) -> list[str]:
    """The first ``n`` values of ``column`` in ``dataset[:split]`` (a Hub id, folder or data file)."""
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
    """One query of the run with its effective key and user messages."""

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
    """Apply the generalization options and the mode to the dataset rows."""
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
        saved = json.loads(saved_path.read_text(encoding="utf-8"))
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
    """A warning when the longest prompt does not fit the local model's context window (the
    model then answers garbage: TSP instructions listing all of ``V_en`` run to ~9k-18k tokens)."""
    model = getattr(backend, "model", None)
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if not prompts or backend.tokenizer is None or not limit:
        return None
    longest = max(prompts, key=len)
    length = len(backend.tokenizer(longest, add_special_tokens=False)["input_ids"])
    if length + 32 <= limit:
        return None
    return (f"the longest prompt has {length} tokens but {backend.name} reads at most {limit}; its answers will be "
            "meaningless. For TSP, build the dataset with a smaller candidate pool (icw bench build --pool-size N)")


def generate_family(config: RunConfig, backend: Backend, store: ResultStore, family: str,
                    items: Sequence[Item]) -> int:
    """Generate and score the missing positives and negatives of one family; returns how many."""
    model = config.model_id()
    requests: list[Request] = []
    for item in items:
        for role in ("positive", "negative"):
            record = _base_record(config, model, family, item, role)
            if store.done(record):
                continue
            if role == "negative":
                requests.append(Request(record, item.query))
            elif config.mode == "bias":
                requests.append(Request(record, item.query, item.key))
            else:
                requests.append(Request(record, item.positive_user))
    if not requests:
        return 0
    warning = context_warning(backend, [r.user for r in requests])
    if warning:
        print(f"icw: warning: {family}: {warning}", file=sys.stderr)
    tokenizers: dict[str, Any] = {}

    def save(done: list[Request], answers: list[str | None], errors: list[str | None]) -> None:
        ok = [i for i, a in enumerate(answers) if a is not None]
        scores = score_texts([answers[i] for i in ok], [done[i].uid["key"] for i in ok], tokenizers)
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

    backend.generate(requests, save, desc=f"{family} ({len(requests)} responses)")
    return len(requests)


def run(config: RunConfig, backend: Backend | None = None) -> Path:
    """Run the benchmark as configured; returns the run directory. Resumable (see module doc)."""
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
    _check_resume(config, out)
    store = ResultStore(out / RESPONSES)
    if store.skipped_lines:
        print(f"icw: note: ignored {store.skipped_lines} torn line(s) in {store.path} (an earlier run was killed)",
              file=sys.stderr)
    attack_client = judge = None
    for family in config.families:
        items = build_items(config, family, rows_by_family[family], backend)
        generate_family(config, backend, store, family, items)
        if config.attacks:
            from .attacks import attack_family, make_attacks

            if attack_client is None and config.attack_url:
                from .backends import ChatClient

                attack_client = ChatClient(config.attack_url, config.attack_model or config.model, config.api_key)
                attack_client.check()
            attack_family(store, config.model_id(), family, make_attacks(config.attacks, attack_client, config.seed,
                                                                         config.paraphrase_rounds))
        if config.ppl_models or config.judge_url:
            from .quality import judge_family, perplexity_family

            quality = ResultStore(out / QUALITY)
            for ref in config.ppl_models:
                perplexity_family(store, quality, config.model_id(), family, ref)
            if config.judge_url:
                if judge is None:
                    from .backends import ChatClient

                    judge = ChatClient(config.judge_url, config.judge_model, config.api_key, temperature=0.0)
                    judge.check()
                judge_family(store, quality, config.model_id(), family, judge)
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
    except KeyboardInterrupt:
        print(f"\nicw: interrupted; finished items are saved in {config.out}/{RESPONSES}. "
              "Run the same command to resume.", file=sys.stderr)
        raise SystemExit(130) from None
    print(f"results in {out / RESPONSES}; summarise with: icw bench report {out}")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``icw bench run``: its options are built from :data:`RUN_PARTS` by the bench's
    ``HfArgumentParser`` (``--field`` and ``--field-name`` spellings), plus ``--config``."""
    p = sub.add_parser("run", help="generate, score, attack and judge one model on ICWBench (resumable)",
                       description=__doc__.split("\n\n")[0], dataclass_types=RUN_PARTS)
    p.set_defaults(func=_run_command)
