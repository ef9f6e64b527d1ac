"""The configuration of ``icw bench run``: the task, the backend and the extras.

The task (:class:`TaskConfig`) is declarative and versioned, like an lm-evaluation-harness task:
its defaults come from the packaged ``tasks/icwbench.yaml``, and ``--config FILE.yaml`` (or the
name of a packaged task) replaces them. :class:`BackendConfig` says which model answers and how;
:class:`ExtrasConfig` holds the output folder, attacks and quality measurements.
:class:`RunConfig` is their flat union, saved as ``RUN_DIR/run.json``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..argtypes import non_negative_int, positive_float, positive_int
from ..keys import FAMILIES
from ..rewriting import ATTACK_FILE
from .backends import BACKENDS

#: Packaged task files (``icw bench run --config NAME`` takes one by name, or any YAML file).
TASKS_DIR = Path(__file__).with_name("tasks")


def read_config_file(spec: str) -> dict[str, Any]:
    """The mapping of a YAML run/task file: a path, or the name of a packaged task (``icwbench``).

    Args:
        spec (`str`): a YAML file's path, or the name of a task in ``icw/bench/tasks``.
    """
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
@dataclass
class TaskConfig:
    """What is asked: an ICWBench task, declarative and versioned like an lm-evaluation-harness task.

    The defaults are those of the packaged ``icw/bench/tasks/icwbench.yaml``; a YAML file with the
    same keys (``--config my_task.yaml``) defines another task.

    Args:
        task (`str`, defaults to ``'icwbench'``): task name, recorded in ``run.json``.
        version (`int`, defaults to ``1``): task version, recorded in ``run.json`` (bump when the numbers
            would move).
        dataset (`str`, defaults to ``'icw/ICWBench'``): ICWBench folder or Hub id.
        split (`str`, defaults to ``'test'``): dataset split.
        families (`list[str]`, defaults to ``['tsp', 'wip', 'sa']``): families to run.
        limit (`int`, *optional*): first N queries per family (unset: all).
        mode (`str`, defaults to ``'instruction'``): instruction (the benchmark) or bias (logit bias, the
            synthesis upper bound).
        max_new_tokens (`int`, defaults to ``600``): cap on new tokens per response.
        delta (`float`, *optional*): bias strength in bias mode (unset: the family's default).
        template (`str`, defaults to ``'paper'``): paper, heldout, or a template file.
        key_seed_offset (`int`, *optional*): held-out keys: redraw each key with seed = offset + row.
        query_dataset (`str`, *optional*): take queries from another dataset[:split].
        query_column (`str`, defaults to ``'query'``): column of ``--query-dataset`` holding the queries.
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
        for option, value, domain in (("--version", self.version, positive_int), ("--limit", self.limit, positive_int),
                                      ("--max-new-tokens", self.max_new_tokens, positive_int),
                                      ("--delta", self.delta, positive_float),
                                      ("--key-seed-offset", self.key_seed_offset, non_negative_int)):
            domain.require(value, option)


#: Options that only some backends read (the rest are common to all).
BACKEND_ONLY_OPTIONS = {"batch_size": ("transformers",), "adapter": ("transformers",), "concurrency": ("openai",),
                        "base_url": ("openai",)}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass
class BackendConfig:
    """Who answers: the model or endpoint and how it is driven.

    Args:
        backend (`str`, defaults to ``'transformers'``): transformers, openai or vllm.
        model (`str`, defaults to ``'smollm2'``): model name, folder or Hub id (smollm2: the embedded
            SmolLM2).
        base_model (`str`, *optional*): recorded: the model this one was trained from.
        adapter (`str`, *optional*): PEFT adapter folder (transformers backend).
        base_url (`str`, *optional*): OpenAI-compatible endpoint URL (openai backend).
        api_key (`str`, *optional*): endpoint API key (unset: ``$OPENAI_API_KEY``).
        batch_size (`int`, *optional*): prompts per generate call (transformers backend; unset: 8).
        concurrency (`int`, *optional*): parallel requests (openai backend; unset: 4).
        seed (`int`, *optional*): sampling seed (transformers and vllm: 0 when unset; openai: sent with
            each request only when set, since not every provider takes one).
    """

    _argument_group_name = "backend"

    backend: str = field(default="transformers", metadata={"help": "transformers, openai or vllm",
                                                           "choices": BACKENDS})
    model: str = field(default="smollm2", metadata={"help": "model name, folder or Hub id (smollm2: the embedded SmolLM2)"})
    base_model: str | None = field(default=None, metadata={"help": "recorded: the model this one was trained from"})
    adapter: str | None = field(default=None, metadata={"help": "PEFT adapter folder (transformers backend)"})
    base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible endpoint URL (openai backend)"})
    api_key: str | None = field(default=None, metadata={"help": "endpoint API key (unset: $OPENAI_API_KEY)"})
    batch_size: int | None = field(default=None, metadata={"help": "prompts per generate call (transformers "
                                                                   "backend; default: 8)"})
    concurrency: int | None = field(default=None, metadata={"help": "parallel requests (openai backend; default: 4)"})
    seed: int | None = field(default=None, metadata={"help": "sampling seed (transformers and vllm: 0 when unset; "
                                                             "openai: sent with each request only when set)"})

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        for name in ("batch_size", "concurrency"):
            if getattr(self, name) is not None:
                positive_int.require(getattr(self, name), _flag(name))
        if self.seed is not None:
            non_negative_int.require(self.seed, "--seed")
        # an option the chosen backend never reads is refused, not silently dropped
        misplaced = [name for name, backends in BACKEND_ONLY_OPTIONS.items()
                     if getattr(self, name) is not None and self.backend not in backends]
        if misplaced:
            options = ", ".join(f"{_flag(name)} ({' or '.join(BACKEND_ONLY_OPTIONS[name])})" for name in misplaced)
            raise ValueError(f"the {self.backend} backend does not use {options}: drop it or choose that backend")


@dataclass
class ExtrasConfig:
    """Where results go and what else is measured: attacks, perplexity, an LLM judge.

    Args:
        out (`str`): run directory (``responses.jsonl``, ``run.json``, ``quality.jsonl``); rerun the same
            command to resume it.
        attacks (`list[str]`, defaults to ``[]``): attacks on positives (see icw.bench.attacks).
        attack_url (`str`, *optional*): endpoint for paraphrase-style attacks.
        attack_model (`str`, *optional*): model at ``--attack-url``.
        attack_adapter (`str`, *optional*): folder of a trained adaptive attacker (``icw train adaptive-attack``)
            for ``--attacks adaptive``.
        paraphrase_rounds (`int`, defaults to ``1``): rounds of LLM paraphrase (1-3).
        ppl_models (`list[str]`, defaults to ``[]``): reference models for perplexity.
        judge_url (`str`, *optional*): OpenAI-compatible endpoint of the judge (quality scores of the
            positives; with ``attacks``, also the Coverage of every attacked positive).
        judge_model (`str`, *optional*): judge model name.
        progress (`bool`, defaults to ``True``): show progress bars.
    """

    _argument_group_name = "output, attacks and quality"

    out: str = field(metadata={"help": "run directory (responses.jsonl, run.json, quality.jsonl); "
                                       "rerun the same command to resume it"})
    attacks: list[str] = field(default_factory=list, metadata={"help": "attacks on positives (see icw.bench.attacks)"})
    attack_url: str | None = field(default=None, metadata={"help": "endpoint for paraphrase-style attacks"})
    attack_model: str | None = field(default=None, metadata={"help": "model at --attack-url"})
    paraphrase_rounds: int = field(default=1, metadata={"help": "rounds of LLM paraphrase (1-3)"})
    attack_adapter: str | None = field(default=None, metadata={
        "help": "folder of a trained adaptive attacker (icw train adaptive-attack) for --attacks adaptive"})
    ppl_models: list[str] = field(default_factory=list, metadata={"help": "reference models for perplexity"})
    judge_url: str | None = field(default=None, metadata={
        "help": "OpenAI-compatible endpoint of the judge (with --attacks, it also scores each attack's Coverage)"})
    judge_model: str | None = field(default=None, metadata={"help": "judge model name"})
    progress: bool = field(default=True, metadata={"help": "show progress bars"})

    def __post_init__(self) -> None:
        self.attacks = [self.attacks] if isinstance(self.attacks, str) else list(self.attacks)
        self.ppl_models = [self.ppl_models] if isinstance(self.ppl_models, str) else list(self.ppl_models)
        positive_int.require(self.paraphrase_rounds, "--paraphrase-rounds")
        if self.judge_url and not self.judge_model:
            raise ValueError("--judge-url needs --judge-model")
        if ("adaptive" in self.attacks) != bool(self.attack_adapter):
            raise ValueError("--attacks adaptive needs --attack-adapter DIR (an `icw train adaptive-attack` output)"
                             if self.attack_adapter is None else "--attack-adapter is only used by --attacks adaptive")
        if self.attack_adapter and not (Path(self.attack_adapter) / ATTACK_FILE).is_file():
            raise ValueError(f"--attack-adapter {self.attack_adapter}: not an adaptive attacker (no {ATTACK_FILE}); "
                             "train one with `icw train adaptive-attack`")


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
