"""Peak memory of ``icw detect`` by input size and family (issue 12, item 6).

For each family and input size, the script writes a text of that many bytes (gensim's human
news and Wikipedia text, see ``_common.py``, joined by blank lines and repeated as needed),
runs ``python -m icw.cli detect --key KEY --max-chars N FILE`` in a fresh subprocess, and
reads the child's peak resident set size (``ru_maxrss`` from ``os.wait4``). A ``0 MB`` row
(an empty text) gives the cost of starting Python and importing icw, torch and transformers;
the ``over baseline`` column subtracts it.

SA's verification keeps the sentence-initial letters, a (1000, 256) block of shuffles for the
permutation null and the (26, 9999) masks of the key null, so beyond the text itself and its
letters its memory does not grow with the text. Before (issue 12.6) the permutation null held
all 1000 shuffles of the whole text: 1.17 GB for 2 MB, 3 GB for 6 MB.

    .venv/bin/python benchmarks/detect_memory.py                  # 0.1, 1 and 10 MB, three families
    .venv/bin/python benchmarks/detect_memory.py --quick          # 0.01 MB, seconds
    .venv/bin/python benchmarks/detect_memory.py --sizes 2 --families sa --src ../other-checkout/src
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import human_passages, markdown_table  # noqa: E402

FAMILIES = ("tsp", "wip", "sa")


def human_text(num_bytes: int) -> str:
    """Human English of exactly ``num_bytes`` UTF-8 bytes (ASCII-safe cut)."""
    passages = [t for _, t in human_passages()]
    block = "\n\n".join(passages).encode("utf-8")
    data = (block + b"\n\n") * (num_bytes // (len(block) + 2) + 1)
    return data[:num_bytes].decode("utf-8", errors="ignore")


def peak_rss(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run ``argv``; return its peak RSS in MB, its wall time in seconds and its stdout."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:5])} ... failed ({proc.returncode}): {err.read().decode()[-500:]}")
        return usage.ru_maxrss / 1024, wall, out.read().decode()  # ru_maxrss is in KiB on Linux


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.1, 1.0, 10.0], help="input sizes in MB (10^6 bytes)")
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--tokenizer", default="qwen3", help="tokenizer of the TSP/WIP keys")
    parser.add_argument("--quick", action="store_true", help="0.01 MB only")
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1] / "src",
                        help="the icw sources to run (another checkout's src/, to compare versions)")
    args = parser.parse_args(argv)
    sizes = [0.01] if args.quick else args.sizes

    from icw import ICWKey
    from icw.models import load_tokenizer

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(args.src), os.environ.get("PYTHONPATH")]))}
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            key = ICWKey.create(family, seed=1, tokenizer=None if family == "sa" else load_tokenizer(args.tokenizer)).to_string()
            baseline = None
            for size in [0.0, *sizes]:
                text = human_text(int(size * 1e6)) if size else ""
                path = Path(tmp) / f"{family}-{size}.txt"
                path.write_text(text, encoding="utf-8")
                cmd = [sys.executable, "-m", "icw.cli", "detect", "--key", key, "--max-chars", str(len(text) + 1), str(path)]
                rss, wall, out = peak_rss(cmd, env)
                result = json.loads(out.splitlines()[0])
                baseline = rss if baseline is None else baseline
                rows.append({"family": family, "mb": size, "chars": len(text), "scored": result["num_tokens_scored"],
                             "rss_mb": rss, "over_baseline_mb": rss - baseline, "wall_s": wall})
                print(f"{family} {size} MB: {rss:.0f} MB peak RSS, {wall:.1f} s", file=sys.stderr, flush=True)
    print(markdown_table(
        ["family", "input (MB)", "characters", "units scored", "peak RSS (MB)", "over baseline (MB)", "wall (s)"],
        [[r["family"], r["mb"], f"{r['chars']:,}", f"{r['scored']:,}", f"{r['rss_mb']:.0f}", f"{r['over_baseline_mb']:.0f}",
          f"{r['wall_s']:.1f}"] for r in rows]))
    return rows


if __name__ == "__main__":
    main()
