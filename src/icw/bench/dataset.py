"""ICWBench as a ``datasets`` dataset: one config per family, ``test`` and ``train`` splits.

``icw bench build --out DIR`` writes ``DIR/<family>/{test,train}-00000-of-00001.parquet`` and a
dataset card whose ``configs:`` YAML makes ``datasets.load_dataset(DIR, "wip", split="test")``
work offline; ``icw bench push DIR --repo-id ORG/NAME`` uploads it with ``push_to_hub``.

Queries come from ``vblagoje/lfqa`` on the Hub (``--lfqa``: 500 evaluation queries, as in the
paper) or, offline and by default, from the project's own question file (``icw/data/questions.jsonl``,
about 200 open-ended questions written for icw). Every row gets its own key: test row ``i`` uses
key seed ``TEST_SEED_START + i`` and train row ``i`` seed ``TRAIN_SEED_START + i``, so the two
pools are disjoint and every key is reproducible from the family and the seed. The same test
queries are used in every family.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..argtypes import non_negative_int, open_unit, positive_int
from ..citation import BIBTEX
from ..jsonl import read_json_object
from ..keys import FAMILIES, FAMILY_NAMES, TEST_SEED_START, TRAIN_SEED_START, ICWKey, check_family
from ..questions import QUESTION_FIELDS, bundled_question_splits, bundled_questions_path, read_questions

LFQA_ID = "vblagoje/lfqa"
#: ICWBench's Hub id: the runner's default dataset and the one model cards cite.
ICWBENCH_ID = "icw/ICWBench"
COLUMNS = ("id", "family", "seed", "key", "instruction", "query", "query_source")
_BUILD_FILE = "icwbench_build.json"


@dataclass
class BenchBuildConfig:
    """Options of ``icw bench build``.

    Args:
        out (`str`): output folder.
        questions (`str`, *optional*): question file: JSON Lines with a 'question', 'query' or 'title'
            field, or plain text, one per line (default: the bundled icw question file).
        lfqa (`bool`, defaults to ``False``): take queries from vblagoje/lfqa on the Hub (online).
        num_test (`int`, *optional*): test queries (default: 500 with ``--lfqa``, else half of the question
            file, at most 100).
        num_train (`int`, *optional*): train queries, disjoint from test (default: the rest, at most 1000).
        families (`tuple[str, ...]`, defaults to ``('tsp', 'wip', 'sa')``): families to build.
        tokenizer (`str`, defaults to ``'qwen3'``): tokenizer TSP/WIP keys are built for.
        pool_size (`int`, *optional*): TSP candidate pool (the N lowest-id English tokens); default: all of
            V_en as in the paper.
        gamma (`float`, defaults to ``0.2``): TSP green fraction.
        shuffle_seed (`int`, defaults to ``0``): seed of the query shuffle before the test/train split.
    """

    out: str = field(metadata={"help": "output folder"})
    questions: str | None = field(default=None, metadata={
        "help": "question file: JSON Lines with a 'question', 'query' or 'title' field, or plain text, one per line "
                "(default: the bundled icw question file)"})
    lfqa: bool = field(default=False, metadata={"help": f"take queries from {LFQA_ID} on the Hub (online)"})
    num_test: int | None = field(default=None, metadata={
        "help": "test queries (default: 500 with --lfqa, all 100 test questions of the bundled file, else half of "
                "the question file, at most 100)"})
    num_train: int | None = field(default=None, metadata={"help": "train queries, disjoint from test (default: the rest, "
                                                                  "at most 1000)"})
    families: tuple[str, ...] = field(default=FAMILIES, metadata={"help": "families to build"})
    tokenizer: str = field(default="qwen3", metadata={"help": "tokenizer TSP/WIP keys are built for"})
    pool_size: int | None = field(default=None, metadata={
        "help": "TSP candidate pool (the N lowest-id English tokens); default: all of V_en as in the paper"})
    gamma: float = field(default=0.2, metadata={"help": "TSP green fraction"})
    shuffle_seed: int = field(default=0, metadata={"help": "seed of the query shuffle before the test/train split"})

    def __post_init__(self) -> None:
        self.families = tuple(check_family(f) for f in self.families)
        if not self.families:
            raise ValueError("choose at least one family")
        if self.questions and self.lfqa:
            raise ValueError("pass either --questions FILE or --lfqa, not both")
        for name in ("num_test", "num_train"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {value}")
        if self.num_test == 0:
            raise ValueError("--num-test must be at least 1")
        if (self.num_test or 0) > TRAIN_SEED_START - TEST_SEED_START:
            raise ValueError(f"--num-test above {TRAIN_SEED_START - TEST_SEED_START:,} would overlap the train seeds")
        if "tsp" in self.families:  # the key's own checks, before anything is read or written
            try:
                ICWKey("tsp", 0, gamma=self.gamma, pool_size=self.pool_size, tokenizer="-", vocab="-")
            except ValueError as err:
                raise ValueError(f"--gamma/--pool-size: {err}") from None


# --------------------------------------------------------------------------- queries
def load_config(source: str | Path, family: str, split: str | None = None) -> Any:
    """One family's config of ICWBench: a folder written by :func:`build`, or a Hub id.

    ``datasets`` caches a local folder by its name and layout, not its content, so a folder rebuilt
    at the same path would be read from the old build's cache: a local folder is re-read every time.

    Args:
        source (`str` or `Path`): an ICWBench folder or a Hub dataset id.
        family (`str`): the config to read (``tsp``, ``wip`` or ``sa``).
        split (`str`, *optional*): one split; by default the ``DatasetDict`` of all splits.
    """
    import datasets

    fresh = {"download_mode": "force_redownload", "verification_mode": "no_checks"} if Path(source).is_dir() else {}
    return datasets.load_dataset(str(source), family, split=split, **fresh)


def lfqa_queries(num_test: int, num_train: int, seed: int = 0,
                 dataset_id: str = LFQA_ID) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Test queries sampled from LFQA's test split (topped up from validation), train from its train split.

    ``dataset_id`` may be a local copy with the same splits (how the tests run it offline).

    Args:
        num_test (`int`): test queries to sample.
        num_train (`int`): train queries to sample.
        seed (`int`, defaults to 0): seed of the sampling.
        dataset_id (`str`, defaults to ``"vblagoje/lfqa"``): the LFQA dataset on the Hub.
    """
    import datasets

    def pairs(split: str) -> list[tuple[str, str]]:
        ds = datasets.load_dataset(dataset_id, split=split)
        # LFQA (ELI5-derived) keeps the question in "title"; accept the usual alternatives too
        column = next((c for c in QUESTION_FIELDS if c in ds.column_names), None)
        if column is None:
            raise ValueError(f"{dataset_id}[{split}] has no question column (looked for {', '.join(QUESTION_FIELDS)})")
        return [(q.strip(), f"lfqa:{split}:{i}") for i, q in enumerate(ds[column]) if q and q.strip()]

    rng = np.random.default_rng(seed)
    pool = pairs("test")
    if len(pool) < num_test:
        pool += pairs("validation")
    if len(pool) < num_test:
        raise ValueError(f"LFQA test+validation hold {len(pool)} queries, fewer than --num-test {num_test}")
    test = [pool[i] for i in sorted(rng.permutation(len(pool))[:num_test])]
    train_pool = pairs("train") if num_train else []
    seen = {q for q, _ in test}
    train_pool = [p for p in train_pool if p[0] not in seen]
    train = [train_pool[i] for i in sorted(rng.permutation(len(train_pool))[:num_train])]
    return test, train


def split_queries(pairs: list[tuple[str, str]], num_test: int | None, num_train: int | None,
                  seed: int = 0, test_pool: set[str] | None = None) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Shuffle (seeded) and cut into disjoint test and train query lists; duplicates are dropped.

    With ``test_pool`` (the bundled file's ``test`` questions) test queries come only from the pool
    and train queries only from outside it, so the split is fixed by the file, whatever the seed.

    Args:
        pairs (`list[tuple[str, str]]`): ``(query, source id)`` pairs.
        num_test (`int`, *optional*): test queries (``None``: half of them, at most 100).
        num_train (`int`, *optional*): train queries (``None``: the rest, at most 1000).
        seed (`int`, defaults to 0): seed of the shuffle.
        test_pool (`set[str]`, *optional*): the only queries test may draw from (train draws from the rest).
    """
    unique = list(dict.fromkeys(pairs).keys())
    seen: set[str] = set()
    unique = [p for p in unique if not (p[0] in seen or seen.add(p[0]))]
    order = np.random.default_rng(seed).permutation(len(unique))
    shuffled = [unique[i] for i in order]
    if test_pool is not None:
        candidates = [p for p in shuffled if p[0] in test_pool]
        n_test = len(candidates) if num_test is None else num_test
        if n_test < 1 or n_test > len(candidates):
            raise ValueError(f"--num-test {n_test} needs at least that many questions; the bundled question file "
                             f"has {len(candidates)} test questions")
        return candidates[:n_test], _take_train([p for p in shuffled if p[0] not in test_pool], n_test, num_train)
    n_test = min(100, len(shuffled) // 2) if num_test is None else num_test
    if n_test < 1 or n_test > len(shuffled):
        raise ValueError(f"--num-test {n_test} needs at least that many questions; the file has {len(shuffled)}")
    return shuffled[:n_test], _take_train(shuffled[n_test:], n_test, num_train)


def _take_train(rest: list[tuple[str, str]], n_test: int, num_train: int | None) -> list[tuple[str, str]]:
    n_train = min(1000, len(rest)) if num_train is None else num_train
    if n_train > len(rest):
        raise ValueError(f"--num-train {n_train} exceeds the {len(rest)} questions left after {n_test} test queries")
    return rest[:n_train]


# ------------------------------------------------------------------------------ rows
def build_rows(family: str, split: str, queries: list[tuple[str, str]], tokenizer: Any,
               pool_size: int | None = None, gamma: float = 0.2, progress: bool = False) -> list[dict[str, Any]]:
    """One row per query, each with its own key (seed ``TEST_SEED_START + i`` or ``TRAIN_SEED_START + i``).

    Args:
        family (`str`): ``"tsp"``, ``"wip"`` or ``"sa"``.
        split (`str`): ``"test"`` or ``"train"`` (picks the disjoint key seed range).
        queries (`list[tuple[str, str]]`): ``(query, source id)`` pairs.
        tokenizer: the tokenizer TSP/WIP keys are built for.
        pool_size (`int`, *optional*): TSP candidate pool size (``None``: all of ``V_en``).
        gamma (`float`, defaults to 0.2): TSP green fraction.
        progress (`bool`, defaults to `False`): show a progress bar.
    """
    from tqdm.auto import tqdm

    family = check_family(family)
    start = TEST_SEED_START if split == "test" else TRAIN_SEED_START
    params: dict[str, Any] = {"gamma": gamma, "pool_size": pool_size} if family == "tsp" else {}
    rows = []
    for i, (query, source) in enumerate(tqdm(queries, desc=f"{family}/{split}", disable=not progress)):
        key = ICWKey.create(family, start + i, tokenizer if family != "sa" else None, **params)
        rows.append({"id": f"{family}-{split}-{i:05d}", "family": family, "seed": start + i, "key": key.to_string(),
                     "instruction": key.instruction(tokenizer), "query": query, "query_source": source})
    return rows


def _write_parquet(rows: list[dict[str, Any]], path: Path, progress: bool = True) -> None:
    import datasets

    features = datasets.Features({c: datasets.Value("int64" if c == "seed" else "string") for c in COLUMNS})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    quiet = datasets.is_progress_bar_enabled() and not progress
    if quiet:
        datasets.disable_progress_bars()
    try:
        datasets.Dataset.from_list(rows, features=features).to_parquet(str(tmp))
    finally:
        if quiet:
            datasets.enable_progress_bars()
    os.replace(tmp, path)  # atomic: an interrupted build never leaves a half-written split


def build(config: BenchBuildConfig, progress: bool = True) -> Path:
    """Build ICWBench into ``config.out``; returns the folder. Re-running resumes: splits already
    written by the same build settings are kept.

    Args:
        config (`BenchBuildConfig`): what to build and where.
        progress (`bool`, defaults to `True`): show progress bars.
    """
    from ..models import load_tokenizer

    out = Path(config.out)
    if config.lfqa:
        num_test = 500 if config.num_test is None else config.num_test
        num_train = 1000 if config.num_train is None else config.num_train
        test_q, train_q = lfqa_queries(num_test, num_train, config.shuffle_seed)
        source = LFQA_ID
    else:
        path = Path(config.questions) if config.questions else bundled_questions_path()
        # the bundled file's own test/train split keeps ICWBench's test questions out of training queries
        pool = None if config.questions else {q for q, split in bundled_question_splits().items() if split == "test"}
        test_q, train_q = split_queries(read_questions(path), config.num_test, config.num_train, config.shuffle_seed,
                                        test_pool=pool)
        source = "icw-questions" if not config.questions else str(path)
    tokenizer = load_tokenizer(config.tokenizer)
    settings = {**asdict(config), "out": None, "families": list(config.families),
                "queries": hashlib.sha256(json.dumps([test_q, train_q]).encode()).hexdigest()[:16]}
    for family in config.families:  # one key per family now: a bad setting fails before the folder exists
        build_rows(family, "test", test_q[:1], tokenizer, config.pool_size, config.gamma)
    done: dict[str, Any] = {}
    record = out / _BUILD_FILE
    if record.is_file():
        previous = read_json_object(record)
        if previous.get("settings") == settings:
            done = previous.get("written", {})
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, dict[str, int]] = {}
    for family in config.families:
        counts[family] = {}
        for split, queries in (("test", test_q), ("train", train_q)):
            path = out / family / f"{split}-00000-of-00001.parquet"
            counts[family][split] = len(queries)
            if not queries or (done.get(f"{family}/{split}") == len(queries) and path.is_file()):
                continue  # an empty split (--num-train 0) has no file; the card lists only written splits
            _write_parquet(build_rows(family, split, queries, tokenizer, config.pool_size, config.gamma, progress),
                           path, progress)
            done[f"{family}/{split}"] = len(queries)
            record.write_text(json.dumps({"settings": settings, "written": done}, indent=1), encoding="utf-8")
    (out / "README.md").write_text(dataset_card(config, counts, source, tokenizer), encoding="utf-8")
    return out


# ------------------------------------------------------------------------------ card


def card_metadata(families: list[str], counts: dict[str, dict[str, int]], lfqa: bool) -> dict[str, Any]:
    """The card's YAML header: ``configs:`` (one per family, test/train parquet files) and tags.

    Args:
        families (`list[str]`): the families built.
        counts (`dict`): rows per family and split.
        lfqa (`bool`): whether the queries came from LFQA (sets the source dataset tag).
    """
    total = sum(sum(c.values()) for c in counts.values())
    size = "n<1K" if total < 1000 else "1K<n<10K" if total < 10_000 else "10K<n<100K"
    return {
        "license": "other" if lfqa else "apache-2.0",
        "language": ["en"],
        "pretty_name": "ICWBench",
        "size_categories": [size],
        "task_categories": ["text-generation"],
        "tags": ["watermarking", "in-context-watermarking", "instruction-following", "icw"],
        "configs": [{"config_name": f, "data_files": [{"split": s, "path": f"{f}/{s}-*.parquet"}
                                                      for s in ("test", "train") if counts[f].get(s)]}
                    for f in families],
    }


def dataset_card(config: BenchBuildConfig, counts: dict[str, dict[str, int]], source: str, tokenizer: Any) -> str:
    """The ICWBench dataset card (``README.md``): YAML header, how it was built, and the key facts.

    Args:
        config (`BenchBuildConfig`): the build's options.
        counts (`dict`): rows per family and split.
        source (`str`): where the queries came from, in words.
        tokenizer: the tokenizer TSP/WIP keys were built for (its vocabulary sizes go in the card).
    """
    import yaml

    from ..vocab import vocabulary

    meta = card_metadata(list(config.families), counts, config.lfqa)
    view = vocabulary(tokenizer)
    table = "\n".join(f"| {f} | {FAMILY_NAMES[f]} | {counts[f]['test']} | {counts[f]['train']} |" for f in config.families)
    pool = "all of V_en, as in the paper" if config.pool_size is None else f"the {config.pool_size} lowest-id V_en tokens"
    if config.lfqa:
        queries = (f"Queries come from [{LFQA_ID}](https://huggingface.co/datasets/{LFQA_ID}) (long-form question "
                   "answering): test queries are sampled from its test split (topped up from validation), train "
                   "queries from its train split, disjoint from the test queries. The queries keep the license "
                   "and terms of that dataset; the keys and instructions added here are Apache-2.0.")
    else:
        queries = ("Queries come from the icw question file (open-ended \"explain like I'm five\" style questions "
                   "written for the icw project, Apache-2.0), shuffled with seed "
                   f"{config.shuffle_seed} and cut into disjoint test and train sets.")
    return f"""---
{yaml.safe_dump(meta, sort_keys=False).strip()}
---

# ICWBench

ICWBench measures whether a language model follows **in-context watermark (ICW) instructions**: an
instruction prepended to a query asks the model to embed a statistically detectable signal in its
answer, and a verifier tests the answer with a z-statistic and an exact p-value. Three families:

| config | family | test rows | train rows |
|---|---|---|---|
{table}

- **TSP (Token-Set Preference)**: favour tokens of a green set T (gamma = {config.gamma} of {pool}).
- **WIP (Word-Initial Preference)**: favour words whose first letter is one of 13 green letters.
- **SA (Sentence Acrostic)**: sentence-initial letters should spell an 18-letter secret.

## Usage

```python
from datasets import load_dataset

test = load_dataset("<this dataset>", "wip", split="test")
row = test[0]
prompt = row["instruction"] + "\\n\\n" + row["query"]   # what the model is asked
# verify the model's answer with the row's key:
from icw import verify
result = verify(answer, row["key"])
```

## Columns

`id` (unique), `family`, `seed` (key seed), `key` (serialized `icw.ICWKey`, e.g.
`icw:wip:seed=3,num_letters=13,tokenizer=qwen3,vocab=...`), `instruction` (the paper's template
rendered for the key), `query`, `query_source` (where the query came from).

## Keys and seeds

Every row has its own key, a deterministic function of (family, seed, parameters, tokenizer):
`icw.ICWKey.from_string(row["key"])` rebuilds it, and its instruction, logit bias and verifier.
Test row i uses seed {TEST_SEED_START} + i and train row i seed {TRAIN_SEED_START:,} + i, so test and train keys come
from disjoint seed pools. TSP and WIP keys are defined over the `{view.name}` tokenizer
(vocabulary fingerprint `{view.fingerprint}`, |V_en| = {len(view.v_en):,}); verify them with that tokenizer.
The same test queries are used in every family.

## Queries

{queries}

## Evaluation

Positives are answers to instructed queries, negatives plain answers to the same queries; report
ROC-AUC and TPR at 1% FPR of the verifier's z (`icw bench run` and `icw bench report`).

## Citation

```bibtex
{BIBTEX}
```
"""


# ------------------------------------------------------------------------------ push
def push(folder: str | Path, repo_id: str, dry_run: bool = False, private: bool = False,
         token: str | None = None) -> list[dict[str, Any]]:
    """Upload a built ICWBench folder: ``push_to_hub`` per config, then the dataset card.

    Args:
        folder (`str` or `Path`): the folder :func:`build` wrote.
        repo_id (`str`): the Hub dataset repository.
        dry_run (`bool`, defaults to `False`): list the uploads without sending anything.
        private (`bool`, defaults to `False`): create the repository as private.
        token (`str`, *optional*): a Hub token (``None``: the logged-in user's).
    """
    import datasets

    folder = Path(folder)
    if not (folder / "README.md").is_file():
        raise FileNotFoundError(f"{folder} is not an ICWBench folder (no README.md): run icw bench build first")
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"--repo-id must look like ORG/NAME, got {repo_id!r}")
    plan = []
    for family in datasets.get_dataset_config_names(str(folder)):
        dd = load_config(folder, family)
        plan.append({"config": family, "repo_id": repo_id,
                     "splits": {split: ds.num_rows for split, ds in dd.items()}, "dataset": dd})
    if not dry_run:
        from huggingface_hub import HfApi

        for item in plan:
            item["dataset"].push_to_hub(repo_id, config_name=item["config"], private=private, token=token)
        # push_to_hub writes the same <config>/<split>-*.parquet layout; our card replaces its stub
        HfApi(token=token).upload_file(path_or_fileobj=str(folder / "README.md"), path_in_repo="README.md",
                                       repo_id=repo_id, repo_type="dataset", commit_message="ICWBench dataset card")
    for item in plan:
        item.pop("dataset")
    return plan


# ------------------------------------------------------------------------------- CLI
def _cli_build(args: argparse.Namespace) -> None:
    config = BenchBuildConfig(out=args.out, questions=args.questions, lfqa=args.lfqa, num_test=args.num_test,
                              num_train=args.num_train, families=tuple(args.families), tokenizer=args.tokenizer,
                              pool_size=args.pool_size, gamma=args.gamma, shuffle_seed=args.shuffle_seed)
    out = build(config, progress=not args.quiet)
    print(f"wrote ICWBench to {out}; read it with datasets.load_dataset({str(out)!r}, 'wip', split='test')",
          file=sys.stderr)


def _cli_push(args: argparse.Namespace) -> None:
    plan = push(args.folder, args.repo_id, dry_run=args.dry_run, private=args.private)
    verb = "would push" if args.dry_run else "pushed"
    for item in plan:
        splits = ", ".join(f"{s}: {n} rows" for s, n in item["splits"].items())
        print(f"{verb} config {item['config']} ({splits}) -> datasets/{item['repo_id']}")
    print(f"{verb} {Path(args.folder) / 'README.md'} -> datasets/{args.repo_id}/README.md")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``icw bench build`` and ``icw bench push`` to the CLI's subparsers."""
    """Add ``icw bench build`` and ``icw bench push`` to the CLI's subparsers."""
    helps = {f.name: f.metadata.get("help") for f in BenchBuildConfig.__dataclass_fields__.values()}
    b = sub.add_parser("build", help="build the ICWBench dataset (parquet + dataset card)")
    b.add_argument("--out", required=True, help=helps["out"])
    src = b.add_mutually_exclusive_group()
    src.add_argument("--questions", help=helps["questions"])
    src.add_argument("--lfqa", action="store_true", help=helps["lfqa"])
    b.add_argument("--num-test", type=positive_int, help=helps["num_test"])
    b.add_argument("--num-train", type=non_negative_int, help=helps["num_train"])
    b.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES, help=helps["families"])
    b.add_argument("--tokenizer", default="qwen3", help=helps["tokenizer"])
    b.add_argument("--pool-size", type=positive_int, help=helps["pool_size"])
    b.add_argument("--gamma", type=open_unit, default=0.2, help=helps["gamma"])
    b.add_argument("--shuffle-seed", type=non_negative_int, default=0, help=helps["shuffle_seed"])
    b.add_argument("--quiet", action="store_true", help="no progress bars")
    b.set_defaults(func=_cli_build)

    p = sub.add_parser("push", help="upload a built ICWBench folder to the Hub (push_to_hub per config)")
    p.add_argument("folder", help="folder written by icw bench build")
    p.add_argument("--repo-id", required=True, help="Hub dataset id ORG/NAME")
    p.add_argument("--private", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="show what would be pushed; upload nothing")
    p.set_defaults(func=_cli_push)
