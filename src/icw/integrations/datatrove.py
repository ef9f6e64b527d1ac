"""ICW detection as datatrove pipeline steps: verify every document of a corpus on any datatrove executor.

A platform screening submissions or a dataset builder filtering a crawl reads its documents with any
datatrove reader (``JsonlReader``, ``ParquetReader``, ``HuggingFaceDatasetReader``, ...) and adds one of
these steps; the executor (``LocalPipelineExecutor``, ``SlurmPipelineExecutor``, ``RayPipelineExecutor``)
shards the input files over tasks, and datatrove's ``completions/`` folder lets a rerun skip the tasks
that finished (a task that died is redone as a whole; its writers reopen their per-rank files, so no
document is written twice).

* :class:`ICWDetector` writes the verdict into each document's metadata and passes every document on.
* With ``document_keys=`` (a manifest's keys, :mod:`icw.documents`) instead of ``keys=``, each document is
  verified under the key of the document id in its ``document_id`` metadata: the responses a third party
  screens (:mod:`icw.response_screen`) on a cluster; the correction over all of them comes after.
* :class:`ICWFilter` does the same, then drops the watermarked documents (or keeps only them, with
  ``keep_watermarked=True``); the documents it drops go to its ``exclusion_writer``, as with any
  datatrove filter.

Both verify ``batch_size`` documents per :func:`icw.verify` call (or per :func:`icw.verify_keys` call
for a list of keys, with Holm's family-wise error control), and load the tokenizer once per worker
process. The metadata fields, prefixed by ``metadata_prefix`` (``icw_`` by default, so they cannot
collide with a corpus's own columns):

* ``z_score``, ``p_value``, ``is_watermarked`` (``p_value <= alpha``), ``num_tokens_scored``,
  ``num_aligned`` (one key) and ``note`` (``""`` when there is none; every field keeps one type, as a
  parquet writer needs);
* ``key``: the key tested (with a list of keys, the one with the smallest p-value), and ``fired``: the
  keys whose Holm-adjusted p-value is at most ``alpha``, space-separated (a list of keys only);
* ``statistic``, ``null_hypothesis`` and ``p_value_method``: what was counted and what ``p_value``
  means. With a list of keys, ``p_value`` is the smallest Holm-adjusted p-value: the family-wise
  p-value, at most ``alpha`` exactly when a key fires.

A document that cannot be scored does not stop its task: a blank text gets :func:`icw.verify`'s note
(``empty text: nothing to score``, ``p_value`` 1), and a text longer than ``max_chars`` is not scored
(``p_value`` 1, a note saying to raise ``max_chars``). datatrove's readers already skip documents
without any text. A malformed key fails when the step is built, before any task starts.

This module needs the ``datatrove`` extra (``pip install icw[datatrove]``); ``import icw`` never
imports it.

Example:
    >>> from datatrove.executor import LocalPipelineExecutor
    >>> from datatrove.pipeline.readers import JsonlReader
    >>> from datatrove.pipeline.writers import JsonlWriter
    >>> from icw.integrations.datatrove import ICWDetector
    >>> LocalPipelineExecutor([JsonlReader("corpus/"), ICWDetector("icw:sa:seed=1,length=18"),
    ...                        JsonlWriter("scored/")], tasks=4, logging_dir="logs/icw").run()  # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    from datatrove.data import Document, DocumentsPipeline
    from datatrove.pipeline.base import PipelineStep
    from datatrove.pipeline.filters.base_filter import BaseFilter
    from datatrove.pipeline.writers.disk_base import DiskWriter
    from datatrove.utils.batching import batched
except ImportError as err:  # an optional extra: one line that says what to install
    raise ImportError(f"icw's datatrove steps need the datatrove extra: pip install 'icw[datatrove]' "
                      f"(cannot import {(err.name or 'datatrove').split('.')[0]})") from None

from ..corpus import RESULT_COLUMNS, CorpusResult, default_output, result_metadata
from ..keys import ICWKey, as_key
from ..verification import DEFAULT_ALPHA, DEFAULT_MAX_CHARS, verify

__all__ = ["ICWDetector", "ICWFilter", "detect_files"]


class _ICWScoring:
    """The scoring shared by both steps. Keys are kept as strings: a step is pickled to every worker
    (and written to the executor's JSON), so it carries no parsed key caches and no tokenizer."""

    def _setup(self, keys: ICWKey | str | Sequence[ICWKey | str] | None, tokenizer: Any, alpha: float, max_chars: int,
               batch_size: int, metadata_prefix: str, document_keys: Mapping[str, ICWKey | str] | None = None,
               document_field: str = "document_id") -> None:
        if keys is None and document_keys is None:
            raise ValueError("keys= is required: one key (a key object or its string), or a list of keys; or "
                             "document_keys=, one key per document id (a manifest's)")
        if keys is not None and document_keys is not None:
            raise ValueError("pass keys= (the same for every document) or document_keys= (one per document), not both")
        # one key per document (icw.documents' manifest): doc.metadata[document_field] names the document
        self.document_keys = None if document_keys is None else {str(d): as_key(k).to_string()
                                                                  for d, k in document_keys.items()}
        self.document_field = document_field
        self.multi_key = keys is not None and not isinstance(keys, (ICWKey, str, dict))
        parsed = ([as_key(k) for k in self.document_keys.values()] if self.document_keys is not None else
                  [as_key(k) for k in keys] if self.multi_key else [as_key(keys)])  # a malformed key fails here
        if not parsed:
            raise ValueError("keys= is an empty list: pass at least one key")
        families = {k.family for k in parsed}
        if len(families) > 1 and self.document_keys is None:
            raise ValueError(f"keys of several families ({', '.join(sorted(families))}): use one step per family")
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"max_chars must be a positive integer, got {max_chars!r}")
        self.keys = [k.to_string() for k in parsed]
        self.family = parsed[0].family
        # TSP/WIP: the key's own tokenizer name unless overridden; SA needs none
        self.tokenizer = None if self.family == "sa" else (tokenizer if tokenizer is not None else parsed[0].tokenizer)
        if self.document_keys is not None:
            self.tokenizer = tokenizer  # None: each key's own, loaded once per process
        self.alpha, self.max_chars, self.batch_size, self.prefix = alpha, max_chars, batch_size, metadata_prefix

    def _tokenizer(self) -> Any:
        if self.tokenizer is None or not isinstance(self.tokenizer, str):
            return self.tokenizer
        from ..corpus import _tokenizer  # cached per process: each worker loads it once, for all its tasks

        return _tokenizer(self.tokenizer)

    def _score(self, docs: list[Document]) -> list[bool]:
        """Write the verdicts into ``doc.metadata``; return ``is_watermarked`` per document."""
        texts = [d.text if isinstance(d.text, str) else "" if d.text is None else str(d.text) for d in docs]
        keys = [self.keys[0]] * len(docs)
        if self.document_keys is not None:
            keys = [self.document_keys.get(str(d.metadata.get(self.document_field))) for d in docs]
        fits = [i for i, t in enumerate(texts) if len(t) <= self.max_chars and keys[i] is not None]
        rows: list[dict[str, Any]] = [self._too_long(len(t)) if keys[i] is not None else
                                      self._unknown(docs[i].metadata.get(self.document_field))
                                      for i, t in enumerate(texts)]
        if fits:
            batch = [texts[i] for i in fits]
            scored = self._verify_many(batch) if self.multi_key else self._verify_one(batch, [keys[i] for i in fits])
            for i, row in zip(fits, scored, strict=True):
                rows[i] = row
        for doc, row in zip(docs, rows, strict=True):
            doc.metadata.update({self.prefix + name: value for name, value in row.items()})
            self.stat_update("watermarked" if row["is_watermarked"] else "not_watermarked")
            if row["num_tokens_scored"] == 0:
                self.stat_update("nothing_scored")
        return [row["is_watermarked"] for row in rows]

    def _verify_one(self, texts: list[str], keys: list[str]) -> list[dict[str, Any]]:
        results = verify(texts, keys, self._tokenizer(), alpha=self.alpha, max_chars=self.max_chars)
        return [{"key": r.key, "z_score": r.z_score, "p_value": r.p_value, "is_watermarked": r.is_watermarked,
                 "num_tokens_scored": r.num_tokens_scored, "num_aligned": r.num_aligned, "note": r.note or "",
                 "statistic": r.statistic, "null_hypothesis": r.null_hypothesis, "p_value_method": r.p_value_method}
                for r in results]

    def _verify_many(self, texts: list[str]) -> list[dict[str, Any]]:
        from ..multikey import verify_keys

        results = verify_keys(texts, self.keys, self._tokenizer(), alpha=self.alpha, max_chars=self.max_chars)
        rows = []
        for r in results:
            best = int(r.p_values.argmin())
            rows.append({"key": r.keys[best], "fired": " ".join(r.keys[k] for k in r.fired),
                         "z_score": float(r.z_scores[best]), "p_value": float(r.adjusted_p_values.min()),
                         "is_watermarked": r.is_watermarked, "num_tokens_scored": r.num_tokens_scored,
                         "note": r.note or "", "statistic": r.statistic, "null_hypothesis": r.null_hypothesis,
                         "p_value_method": f"{r.p_value_method}; {r.correction}"})
        return rows

    def _too_long(self, length: int) -> dict[str, Any]:
        # the same fields and types as a scored row, with verify's convention for "nothing scored"
        row: dict[str, Any] = {"key": self.keys[0], "z_score": 0.0, "p_value": 1.0, "is_watermarked": False,
                               "num_tokens_scored": 0, "num_aligned": 0,
                               "note": f"not scored: {length:,} characters, more than max_chars={self.max_chars:,} "
                                       "(raise max_chars, or split the document into passages)",
                               "statistic": "", "null_hypothesis": "", "p_value_method": "not scored"}
        if self.multi_key:
            row.pop("num_aligned")
            row["fired"] = ""
        return row

    def _unknown(self, document_id: Any) -> dict[str, Any]:
        return {**self._too_long(0), "note": f"not scored: no key for document id {document_id!r} "
                f"(metadata field {self.document_field!r})"}


class ICWDetector(_ICWScoring, PipelineStep):
    """Verify each document under an ICW key and write the verdict into ``doc.metadata``; every
    document is passed on (see the module docstring for the fields).

    Args:
        keys (`ICWKey`, `str` or `list`): the key every document is tested against (:func:`icw.verify`),
            or a list of keys of one family (e.g. one per user of a platform), each document then
            tested against all of them with Holm's family-wise error control at ``alpha``
            (:func:`icw.verify_keys`).
        tokenizer (`str`, *optional*): the tokenizer name or folder for TSP/WIP keys (default: the
            key's own); loaded once per worker process.
        alpha (`float`, defaults to 0.01): significance level of ``is_watermarked``.
        max_chars (`int`, defaults to 100,000): longer documents are not scored (a note says so).
        batch_size (`int`, defaults to 256): documents per verify call.
        metadata_prefix (`str`, defaults to ``"icw_"``): prefix of the metadata fields.
        document_keys (`Mapping[str, str]`, *optional*): instead of ``keys``, one key per document id (a
            manifest's, :func:`icw.documents.read_manifest`): each document (a response to screen) is verified
            under the key of the id in its ``document_field`` metadata; an id without a key is not scored (a
            note says so). The Holm or BH decision over all of them is :func:`icw.response_screen.adjust`'s.
        document_field (`str`, defaults to ``"document_id"``): the metadata field naming a document's id.

    Example:
        >>> from datatrove.data import Document
        >>> step = ICWDetector("icw:sa:seed=3,secret=ABC")
        >>> doc = next(step.run([Document("Apples fall. Bears run. Cats sleep.", id="a")]))
        >>> doc.metadata["icw_num_aligned"], doc.metadata["icw_p_value"] < 0.05
        (3, True)
    """

    name = "ICW detect"
    type = "🔍 - DETECTOR"

    def __init__(self, keys: ICWKey | str | Sequence[ICWKey | str] | None = None, *, tokenizer: str | None = None,
                 alpha: float = DEFAULT_ALPHA, max_chars: int = DEFAULT_MAX_CHARS, batch_size: int = 256,
                 metadata_prefix: str = "icw_", document_keys: Mapping[str, ICWKey | str] | None = None,
                 document_field: str = "document_id") -> None:
        super().__init__()
        self._setup(keys, tokenizer, alpha, max_chars, batch_size, metadata_prefix, document_keys, document_field)

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for batch in batched(data or (), self.batch_size):
            self.stat_update("batches")
            with self.track_time("batch"):
                self._score(batch)
            for doc in batch:
                if isinstance(doc.text, str):  # a hand-made Document may lack text; readers never yield one
                    self.update_doc_stats(doc)
                yield doc


class ICWFilter(_ICWScoring, BaseFilter):
    """Verify each document like :class:`ICWDetector`, then drop the watermarked ones (a dataset
    builder cleaning a crawl), or keep only them with ``keep_watermarked=True`` (a platform collecting
    flagged submissions for review). The dropped documents, verdict included, go to
    ``exclusion_writer`` when one is given, with ``filter_reason`` ``icw_watermarked`` or
    ``icw_not_watermarked``. A document that could not be scored counts as not watermarked.

    Args:
        keys, tokenizer, alpha, max_chars, batch_size, metadata_prefix, document_keys, document_field: as in
            :class:`ICWDetector`.
        keep_watermarked (`bool`, defaults to `False`): keep the watermarked documents instead of dropping them.
        exclusion_writer (`DiskWriter`, *optional*): where the dropped documents are written.

    Example:
        >>> from datatrove.data import Document
        >>> docs = [Document("Apples fall. Bears run. Cats sleep.", id="a"), Document("Some plain words.", id="b")]
        >>> [d.id for d in ICWFilter("icw:sa:seed=3,secret=ABC", alpha=0.05).run(docs)]
        ['b']
    """

    name = "ICW filter"

    def __init__(self, keys: ICWKey | str | Sequence[ICWKey | str] | None = None, *, keep_watermarked: bool = False,
                 exclusion_writer: DiskWriter | None = None, tokenizer: str | None = None, alpha: float = DEFAULT_ALPHA, max_chars: int = DEFAULT_MAX_CHARS,
                 batch_size: int = 256, metadata_prefix: str = "icw_", document_keys: Mapping[str, ICWKey | str] | None = None,
                 document_field: str = "document_id") -> None:
        super().__init__(exclusion_writer=exclusion_writer, batch_size=batch_size)
        self._setup(keys, tokenizer, alpha, max_chars, batch_size, metadata_prefix, document_keys, document_field)
        self.keep_watermarked = keep_watermarked

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        return self.filter_batch([doc])[0]

    def filter_batch(self, batch: list[Document]) -> list[bool | tuple[bool, str]]:
        reason = "icw_not_watermarked" if self.keep_watermarked else "icw_watermarked"
        return [True if flagged == self.keep_watermarked else (False, reason) for flagged in self._score(batch)]


_READABLE = {".parquet": "parquet", ".jsonl": "jsonl", ".gz": "jsonl"}  # .jsonl.gz: JsonlReader infers gzip


def _result_row(writer: DiskWriter, doc: Document) -> dict[str, Any]:
    # a ParquetWriter adapter (bound to the writer): the id and icw's result fields, as detect_dataset writes them
    return {"id": str(doc.id), **{name: doc.metadata["icw_" + name] for name in RESULT_COLUMNS}}


def _input_files(source: Path) -> tuple[str, str, str]:
    """(reader kind, data folder, glob) of a parquet / JSON Lines file or of a folder of them."""
    if not source.exists():
        raise ValueError(f"{source} does not exist: --executor local reads local parquet or JSON Lines files "
                         "(for a Hub dataset, use datatrove's HuggingFaceDatasetReader in Python)")
    files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
    files = [p for p in files if p.name.endswith((".parquet", ".jsonl", ".jsonl.gz"))]
    kinds = {_READABLE[p.suffix] for p in files}
    if len(kinds) != 1:
        raise ValueError(f"{source}: expected parquet (.parquet) or JSON Lines (.jsonl, .jsonl.gz) files of one "
                         f"kind, found {'both kinds' if kinds else 'none'}")
    if source.is_file():
        return kinds.pop(), str(source.parent), source.name
    kind = kinds.pop()
    return kind, str(source), "**/*.parquet" if kind == "parquet" else "**/*.jsonl*"


def detect_files(source: str | Path, key: ICWKey | str, column: str = "text", *, id_column: str | None = None,
                 tokenizer: str | None = None, tasks: int = 1, workers: int = 1, batch_size: int = 256,
                 alpha: float = DEFAULT_ALPHA, max_chars: int = DEFAULT_MAX_CHARS, output: str | Path | None = None,
                 logging_dir: str | Path | None = None) -> CorpusResult:
    """Verify every text of parquet / JSON Lines files on a datatrove ``LocalPipelineExecutor``
    (``icw detect --dataset ... --executor local``): reader -> :class:`ICWDetector` -> ``ParquetWriter``.

    datatrove shares the files out among ``tasks`` (``workers`` run at once; a file is never split, so
    more tasks than files leaves some idle). The results are one parquet file per task in ``output``:
    ``id`` (the ``id_column``, or datatrove's ``<file>/<row>`` when the input has none) and the columns of
    ``icw.corpus.RESULT_COLUMNS``, with the key, statistic, null and p-value method in each file's
    metadata, as :func:`icw.corpus.detect_dataset` writes them. Killed and rerun with the same
    arguments, it resumes: the tasks recorded as finished in ``logging_dir`` are skipped and the others
    redone whole (their files rewritten, so no row is written twice). A rerun into the same logging
    folder with another key, input or setting is refused, since datatrove would skip every finished
    task and leave the old results in place.

    Args:
        source: a parquet / JSON Lines file, or a folder of them (searched recursively).
        key: the key every text is tested against.
        column: the text column.
        id_column: the column naming each row (default ``id``).
        tokenizer: override the key's tokenizer name (TSP/WIP).
        tasks: datatrove tasks.
        workers: tasks run at once (processes).
        batch_size: texts per ``verify`` call.
        alpha: significance level of each text's verdict.
        max_chars: longer texts are not scored (p-value 1, a note says so).
        output: the results folder (default ``<input>.icw-detect/`` next to the input).
        logging_dir: datatrove's logging folder (default ``<output>.logs``).

    Returns:
        `icw.corpus.CorpusResult`: where the results went, how many texts, how many flagged.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader, ParquetReader
    from datatrove.pipeline.writers import ParquetWriter

    if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1 or isinstance(workers, bool) \
            or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"tasks and workers must be positive integers, got {tasks!r} and {workers!r}")
    key = as_key(key)
    path = Path(source).expanduser()
    kind, folder, glob = _input_files(path)
    out = Path(output) if output is not None else default_output(str(path)).with_suffix("")
    logs = Path(logging_dir) if logging_dir is not None else out.with_name(out.name + ".logs")
    step = ICWDetector(key, tokenizer=tokenizer, alpha=alpha, max_chars=max_chars, batch_size=batch_size)
    meta = result_metadata(key, step.tokenizer, alpha, str(path), column)
    # everything that changes the results; a rerun must match it to resume
    run = {**meta, "source": str(path.resolve()), "id_column": id_column or "id", "tokenizer": step.tokenizer,
           "max_chars": max_chars, "tasks": tasks, "output": str(out.resolve())}
    manifest = logs / "icw-run.json"
    if manifest.exists():
        before = json.loads(manifest.read_text())
        changed = sorted(k for k in run.keys() | before.keys() if run.get(k) != before.get(k))
        if changed:
            raise ValueError(f"{logs} records another run (it differs in {', '.join(changed)}); a rerun there would "
                             "skip its finished tasks and keep their results: pass another --logging-dir and --output, "
                             "or delete both to start over")
    elif out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} already holds files that no run in {logs} wrote: pass another --output, or empty it")
    else:
        logs.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps(run, indent=1))
    schema = pa.schema([("id", pa.string()), ("z_score", pa.float64()), ("p_value", pa.float64()),
                        ("is_watermarked", pa.bool_()), ("num_tokens_scored", pa.int64()),
                        ("num_aligned", pa.int64()), ("note", pa.string())], metadata={"icw": json.dumps(meta)})
    reader = (ParquetReader if kind == "parquet" else JsonlReader)(
        folder, glob_pattern=glob, text_key=column, id_key=id_column or "id")
    writer = ParquetWriter(str(out), adapter=_result_row, schema=schema)
    start = time.perf_counter()
    LocalPipelineExecutor([reader, step, writer], tasks=tasks, workers=min(workers, tasks),
                          logging_dir=str(logs)).run()
    seconds = time.perf_counter() - start
    flags = pq.ParquetDataset(str(out)).read(columns=["is_watermarked"]).column(0) if out.exists() else pa.array([])
    return CorpusResult(str(out), len(flags), int(sum(flags.to_pylist())), seconds, meta["statistic"],
                        meta["null_hypothesis"], meta["p_value_method"])
