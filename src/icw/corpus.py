"""Detection at corpus scale: verify a text column of a ``datasets`` dataset or parquet/JSON Lines files.

``icw detect --dataset NAME_OR_PATH --column text --num-proc N --key KEY`` runs
:func:`detect_dataset`: the texts are verified ``batch_size`` at a time with
``datasets.Dataset.map(batched=True, num_proc=N)`` (one :func:`icw.verification.verify` call per
batch, each worker loading the tokenizer once), and the results are written as parquet next to
the input ids: one row per text with ``id``, ``z_score``, ``p_value``, ``is_watermarked``,
``num_tokens_scored``, ``num_aligned`` and ``note``. The statistic, the null hypothesis and the
p-value method are the same for every row of one key; they go into the parquet file's metadata
and the command's summary line instead of being repeated per row.

With ``--executor local`` the same command runs :func:`icw.integrations.datatrove.detect_files`
instead: a datatrove pipeline over the input files on a ``LocalPipelineExecutor``, resumable task by
task; for a cluster, the same steps go on datatrove's Slurm or Ray executors (docs/corpus-detection.md).
The command line's options and its choice between the two live in :mod:`icw.cli_corpus`; this module
never imports the datatrove steps (they import it).

Example:
    >>> from icw.corpus import detect_dataset
    >>> out = detect_dataset("corpus.parquet", "icw:sa:seed=1,length=18", column="text", num_proc=2)  # doctest: +SKIP
    >>> out.path  # doctest: +SKIP
    'corpus.icw-detect.parquet'
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .keys import ICWKey, as_key
from .verification import DEFAULT_ALPHA, DEFAULT_MAX_CHARS, verify

#: Columns each result row carries (besides the id).
RESULT_COLUMNS = ("z_score", "p_value", "is_watermarked", "num_tokens_scored", "num_aligned", "note")
_SUFFIXES = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}


@dataclass
class CorpusResult:
    """Where the results went and what they say.

    Args:
        path (`str`): the results parquet file.
        num_texts (`int`): texts verified.
        num_watermarked (`int`): texts with ``p_value <= alpha``.
        seconds (`float`): wall time of the run.
        statistic (`str`): what the verifier counts, in words.
        null_hypothesis (`str`): the null the p-values are computed under.
        p_value_method (`str`): how the p-values were computed.
    """

    path: str
    num_texts: int
    num_watermarked: int
    seconds: float
    statistic: str
    null_hypothesis: str
    p_value_method: str

    @property
    def texts_per_second(self) -> float:
        return self.num_texts / self.seconds if self.seconds > 0 else float("inf")


def load_corpus(source: str, column: str, split: str = "train") -> Any:
    """A ``datasets.Dataset`` from parquet / JSON Lines file(s) or a folder of them, a folder saved
    with ``save_to_disk``, or a Hub dataset name (online).

    Args:
        source (`str`): parquet / JSON Lines file(s) or folder, a ``save_to_disk`` folder, or a Hub dataset
            name.
        column (`str`): the text column, checked to exist.
        split (`str`, defaults to ``"train"``): the split to read when the source holds several.
    """
    import datasets

    path = Path(source).expanduser()
    if path.is_dir() and (path / "dataset_info.json").is_file() and (path / "state.json").is_file():
        ds = datasets.load_from_disk(str(path))
    elif path.exists():
        files = sorted(p for p in path.rglob("*") if p.suffix in _SUFFIXES) if path.is_dir() else [path]
        kinds = {_SUFFIXES.get(p.suffix) for p in files}
        if not files or None in kinds or len(kinds) > 1:
            raise ValueError(f"{source}: expected parquet (.parquet) or JSON Lines (.jsonl) files, or a folder "
                             "saved with Dataset.save_to_disk")
        ds = datasets.load_dataset(kinds.pop(), data_files=[str(p) for p in files], split="train")
    else:
        try:
            ds = datasets.load_dataset(source, split=split)
        except Exception as err:  # datasets raises many kinds for a missing or unreachable source
            raise ValueError(f"cannot load dataset {source!r} ({type(err).__name__}): pass a parquet or JSON Lines "
                             "file or folder, or a Hub dataset name while online") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise ValueError(f"{source} has splits {sorted(ds)}; pick one with --split")
        ds = ds[split]
    if column not in ds.column_names:
        raise ValueError(f"{source} has no column {column!r}; its columns are {', '.join(ds.column_names)} "
                         "(choose one with --column)")
    return ds


@lru_cache(maxsize=4)
def _tokenizer(name: str | None) -> Any:
    # once per worker process: the tokenizer is loaded by name, never pickled across processes
    if name is None:
        return None
    from .models import load_tokenizer

    return load_tokenizer(name)


def _verify_batch(batch: dict[str, list], column: str, key: str, tokenizer: str | None, alpha: float,
                  max_chars: int) -> dict[str, list]:
    texts = ["" if t is None else str(t) for t in batch[column]]
    results = verify(texts, key, _tokenizer(tokenizer), alpha=alpha, max_chars=max_chars)
    return {name: [getattr(r, name) for r in results] for name in RESULT_COLUMNS}


def result_metadata(key: ICWKey, tokenizer: str | None, alpha: float, source: str, column: str) -> dict[str, str]:
    """What every result row of one key shares (kept once, in the results file's metadata): the key, alpha,
    the statistic, the null and the p-value method, and where the texts came from.

    Args:
        key (`ICWKey`): the key the texts are tested against.
        tokenizer (`str`, *optional*): the tokenizer name (TSP/WIP); a missing asset fails here, once.
        alpha (`float`): significance level of the verdicts.
        source (`str`): the corpus.
        column (`str`): its text column.
    """
    # a probe text only states the statistic, null and method (an empty text would report "nothing to score")
    probe = verify("Apples fall quickly. Bears run home.", key, _tokenizer(tokenizer), alpha=alpha)
    return {"key": key.to_string(), "alpha": str(alpha), "statistic": probe.statistic,
            "null_hypothesis": probe.null_hypothesis, "p_value_method": probe.p_value_method,
            "source": str(source), "column": column}


def default_output(source: str) -> Path:
    """``corpus.parquet`` -> ``corpus.icw-detect.parquet``; a folder ``data/`` -> ``data.icw-detect.parquet``.

    Args:
        source (`str`): the corpus path the results belong to.
    """
    path = Path(source).expanduser()
    if not path.exists():
        raise ValueError(f"{source} is not a local file or folder: name the results file with --output")
    stem = path.name[: -len(path.suffix)] if path.is_file() and path.suffix else path.name
    return path.parent / f"{stem}.icw-detect.parquet"


def detect_dataset(source: str, key: ICWKey | str, column: str = "text", *, id_column: str | None = None,
                   tokenizer: str | None = None, num_proc: int = 1, batch_size: int = 256,
                   alpha: float = DEFAULT_ALPHA, max_chars: int = DEFAULT_MAX_CHARS, split: str = "train",
                   output: str | Path | None = None) -> CorpusResult:
    """Verify every text of ``column`` under one key; write the results as parquet.

    Args:
        source: parquet / JSON Lines file or folder, a ``save_to_disk`` folder, or a Hub dataset name.
        key: the key every text is tested against.
        column: the text column.
        id_column: the column that identifies a row in the output (default ``id`` when present,
            else the row number as ``row``).
        tokenizer: override the key's tokenizer name (TSP/WIP).
        num_proc: worker processes for ``Dataset.map``.
        batch_size: texts per ``verify`` call.
        alpha: significance level of each text's verdict (``p_value <= alpha``).
        max_chars: the longest text verified; a longer one is an error naming its row.
        split: the split to read when ``source`` holds several.
        output: results file (default: next to the input, ``<name>.icw-detect.parquet``).
    """
    import time

    import pyarrow as pa
    import pyarrow.parquet as pq

    key = as_key(key)
    if num_proc < 1 or batch_size < 1:
        raise ValueError("--num-proc and the batch size must be at least 1")
    tokenizer = tokenizer or key.tokenizer if key.family != "sa" else None
    ds = load_corpus(source, column, split)
    if id_column is None:
        id_column = "id" if "id" in ds.column_names else None
    elif id_column not in ds.column_names:
        raise ValueError(f"{source} has no id column {id_column!r}; its columns are {', '.join(ds.column_names)}")
    out_path = Path(output) if output is not None else default_output(source)
    meta = result_metadata(key, tokenizer, alpha, source, column)
    start = time.perf_counter()
    keep = [id_column] if id_column else []
    results = ds.map(_verify_batch, batched=True, batch_size=batch_size, num_proc=num_proc if num_proc > 1 else None,
                     remove_columns=[c for c in ds.column_names if c not in keep], load_from_cache_file=False,
                     fn_kwargs={"column": column, "key": key.to_string(), "tokenizer": tokenizer, "alpha": alpha,
                                "max_chars": max_chars}, desc="icw detect")
    seconds = time.perf_counter() - start
    table = results.data.table if hasattr(results.data, "table") else results.data
    if not id_column:
        table = table.add_column(0, "row", pa.array(range(len(results)), pa.int64()))
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"icw": json.dumps(meta).encode()})
    out_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out_path)
    flagged = int(sum(results["is_watermarked"]))
    return CorpusResult(str(out_path), len(results), flagged, seconds, meta["statistic"], meta["null_hypothesis"],
                        meta["p_value_method"])
