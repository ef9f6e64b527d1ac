"""Corpus detection throughput: ``icw detect --dataset`` with 1 and 2 worker processes.

Human-written passages (gensim's Lee corpus and Wikipedia sample, repeated to ``--num-texts``)
are written to a parquet file; :func:`icw.corpus.detect_dataset` then verifies them under one
key per family, side by side with ``num_proc`` = 1 and 2 (median of ``--repeats``), and the
table gives texts/s and the 2-process speed-up. Worker start-up (each worker loads the
tokenizer once) is included, as a user would see it.

    OMP_NUM_THREADS=1 python benchmarks/corpus_throughput.py              # 4,000 texts
    python benchmarks/corpus_throughput.py --quick                        # smoke run
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import apply_quick, corpus_parser, human_texts, markdown_table, median_time  # noqa: E402


def main(argv: list[str] | None = None) -> list[dict]:
    args = apply_quick(corpus_parser(__doc__.split("\n\n")[0], 4000, ["tsp", "wip", "sa"], "wip").parse_args(argv))

    import datasets

    from icw.corpus import detect_dataset
    from icw.keys import ICWKey
    from icw.models import load_tokenizer

    texts = human_texts(args.num_texts)
    tok = load_tokenizer(args.tokenizer)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.parquet"
        datasets.Dataset.from_dict({"id": [f"t{i}" for i in range(len(texts))], "text": texts}).to_parquet(str(corpus))
        for family in args.families:
            key = ICWKey.create(family, 1, tok if family != "sa" else None)
            speed = {}
            for procs in (1, 2):
                seconds, _ = median_time(lambda p=procs, k=key: detect_dataset(
                    str(corpus), k, num_proc=p, batch_size=args.batch_size, output=Path(tmp) / "out.parquet"),
                    args.repeats)
                speed[procs] = len(texts) / seconds
            rows.append({"family": family, "texts": len(texts), "one": speed[1], "two": speed[2]})
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{len(texts):,} human-written passages, {args.tokenizer} tokenizer, batch size {args.batch_size}, median of "
          f"{args.repeats}; {os.cpu_count()} CPUs, load average {load:.1f}")
    print(markdown_table(["family", "texts", "texts/s, 1 process", "texts/s, 2 processes", "speed-up"],
                         [[r["family"], r["texts"], f"{r['one']:.0f}", f"{r['two']:.0f}", f"{r['two'] / r['one']:.2f}x"]
                          for r in rows]))
    return rows


if __name__ == "__main__":
    main()
