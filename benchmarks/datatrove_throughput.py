"""Corpus detection throughput through datatrove: the ICW step vs ``detect_dataset`` vs one ``icw.verify`` call.

Human-written passages (gensim's Lee corpus and Wikipedia sample, repeated to ``--num-texts``) are
written as 4 parquet shards; the same files are then verified under one key per family, side by
side in one run (median of ``--repeats``):

* ``icw.verify``: one call over all texts in this process, tokenizer already loaded (the floor);
* ``detect_dataset``: ``datasets.map`` with 1 and 2 processes (``icw detect --dataset --num-proc``);
* ``datatrove``: ``ParquetReader -> ICWDetector -> ParquetWriter`` on a ``LocalPipelineExecutor``
  with 1 and 2 tasks (one worker per task; a fresh logging folder each run, so no task is skipped).

Worker start-up (each worker process loads the tokenizer once) and reading/writing parquet are
included, as a user would see them; the table gives documents/s and the ratios. The same paths
on one document per file measure that fixed start-up cost, and the last column is the rate once
it is paid: ``texts / (seconds - start-up seconds)``.

    OMP_NUM_THREADS=1 python benchmarks/datatrove_throughput.py          # 10,000 texts, WIP and SA
    python benchmarks/datatrove_throughput.py --quick                    # smoke run
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import apply_quick, corpus_parser, human_texts, markdown_table, median_time  # noqa: E402

SHARDS = 4
PATHS = {("verify", 1): "icw.verify, one call", ("detect_dataset", 1): "detect_dataset, 1 process",
         ("detect_dataset", 2): "detect_dataset, 2 processes", ("datatrove", 1): "datatrove, 1 task",
         ("datatrove", 2): "datatrove, 2 tasks"}


@contextlib.contextmanager
def quiet_stderr(logs: Path):
    """datatrove logs every task to stderr (and to ``logs/``): silence the terminal at the file-descriptor
    level, so worker processes are quiet too, and show the task logs' tail if the run fails."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    except BaseException:
        os.dup2(saved, 2)
        for log in sorted(logs.glob("**/task_*.log")):
            print(f"--- {log}\n{log.read_text(errors='replace')[-2000:]}", file=sys.stderr)
        raise
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def run_datatrove(corpus: Path, work: Path, key: str, tasks: int, batch_size: int) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.writers import ParquetWriter

    from icw.integrations.datatrove import ICWDetector

    run = Path(tempfile.mkdtemp(dir=work))  # a fresh logging folder: completed tasks would be skipped
    pipeline = [ParquetReader(str(corpus)), ICWDetector(key, batch_size=batch_size), ParquetWriter(str(run / "out"))]
    with quiet_stderr(run / "logs"):
        LocalPipelineExecutor(pipeline, tasks=tasks, workers=tasks, logging_dir=str(run / "logs")).run()
    written = sum(1 for _ in (run / "out").glob("*.parquet"))
    if written != tasks:
        raise RuntimeError(f"expected {tasks} output files, found {written} in {run / 'out'}")


def main(argv: list[str] | None = None) -> list[dict]:
    args = apply_quick(corpus_parser(__doc__.split("\n\n")[0], 10000, ["wip", "sa"], "sa").parse_args(argv))

    import pyarrow as pa
    import pyarrow.parquet as pq

    from icw import verify
    from icw.corpus import detect_dataset
    from icw.keys import ICWKey
    from icw.models import load_tokenizer

    texts = human_texts(args.num_texts)
    tok = load_tokenizer(args.tokenizer)

    def write(folder: Path, docs: list[str]) -> Path:
        folder.mkdir()
        for s in range(SHARDS):  # datatrove shares files out among tasks: 4 files feed 1 or 2 tasks
            pq.write_table(pa.table({"id": [f"t{i}" for i in range(s, len(docs), SHARDS)], "text": docs[s::SHARDS]}),
                           folder / f"part-{s}.parquet")
        return folder

    def seconds(corpus: Path, docs: list[str], key: str, family_tok, work: Path) -> dict:
        out = {("verify", 1): median_time(lambda: verify(docs, key, family_tok), args.repeats)[0]}
        for n in (1, 2):
            out["detect_dataset", n] = median_time(lambda n=n: detect_dataset(
                str(corpus), key, num_proc=n, batch_size=args.batch_size, output=work / "detect.parquet"),
                args.repeats)[0]
            out["datatrove", n] = median_time(lambda n=n: run_datatrove(corpus, work, key, n, args.batch_size),
                                              args.repeats)[0]
        return out

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        corpus, tiny = write(Path(tmp) / "corpus", texts), write(Path(tmp) / "tiny", texts[:SHARDS])
        for family in args.families:
            family_tok = tok if family != "sa" else None
            key = ICWKey.create(family, 1, family_tok).to_string()
            full = seconds(corpus, texts, key, family_tok, work)
            fixed = seconds(tiny, texts[:SHARDS], key, family_tok, work)  # start-up: one document per file
            rows.append({"family": family, "texts": len(texts), "seconds": full, "startup": fixed,
                         "speed": {p: len(texts) / t for p, t in full.items()}})
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{len(texts):,} human-written passages in {SHARDS} parquet files, {args.tokenizer} tokenizer, batch size "
          f"{args.batch_size}, median of {args.repeats}; {os.cpu_count()} CPUs, load average {load:.1f}")
    table = []
    for r in rows:
        s, t0 = r["speed"], r["startup"]
        for (path, n), label in PATHS.items():
            vs_map = f"{s[path, n] / s['detect_dataset', n]:.2f}x" if path == "datatrove" else ""
            net = r["texts"] / max(r["seconds"][path, n] - t0[path, n], 1e-9)
            table.append([r["family"], label, f"{s[path, n]:.0f}", f"{s[path, n] / s['verify', 1]:.2f}x", vs_map,
                          f"{t0[path, n]:.1f}", f"{net:.0f}"])
    print(markdown_table(["family", "path", "docs/s", "vs verify floor", "datatrove vs detect_dataset",
                          "start-up s (4 docs)", "docs/s after start-up"], table))
    for r in rows:
        s = r["speed"]
        print(f"{r['family']}: datatrove 2 tasks / 1 task {s['datatrove', 2] / s['datatrove', 1]:.2f}x; "
              f"detect_dataset 2 processes / 1 {s['detect_dataset', 2] / s['detect_dataset', 1]:.2f}x")
    return rows


if __name__ == "__main__":
    main()
