"""Start-up of ``icw detect``: one short text under a WIP key with the Qwen3 tokenizer (issue 25).

Two measurements, each in fresh processes, cold (an empty icw cache: the English vocabulary
view of the tokenizer is computed and written) and warm (the view is read back from the cache):

* **end to end**: the wall time of the real command, ``echo TEXT | icw detect --key KEY``;
* **phases**: the same work in one fresh interpreter, timed phase by phase: ``import icw.cli``,
  loading the tokenizer, the vocabulary view, and the detection itself (verify and print).

Each is the median of ``--runs`` runs. Target: within 2 s warm on an idle machine.

    python benchmarks/cli_startup.py            # 5 runs of each (about a minute)
    python benchmarks/cli_startup.py --quick    # 1 run of each: a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table  # noqa: E402

TEXT = "Some text to check. It was written by a person, or perhaps by a model.\n"
TARGET_S = 2.0
PHASES = ("import", "tokenizer", "vocab", "detect")
# Runs in a fresh interpreter: argv = key, text file, output file for the phase timings.
PHASE_SCRIPT = """
import contextlib, io, json, sys, time
t0 = time.perf_counter()
from icw.cli import main
t1 = time.perf_counter()
from icw.keys import ICWKey
from icw.models import load_tokenizer
tok = load_tokenizer(ICWKey.from_string(sys.argv[1]).tokenizer)
t2 = time.perf_counter()
from icw.vocab import vocabulary
vocabulary(tok)
t3 = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    status = main(["detect", "--key", sys.argv[1], sys.argv[2]])
t4 = time.perf_counter()
json.dump({"import": t1 - t0, "tokenizer": t2 - t1, "vocab": t3 - t2, "detect": t4 - t3, "status": status},
          open(sys.argv[3], "w"))
"""


def icw_command() -> list[str]:
    """The installed ``icw`` script beside this interpreter (``python -m icw.cli`` if there is none)."""
    script = Path(sys.executable).parent / "icw"
    return [str(script)] if script.exists() else [sys.executable, "-m", "icw.cli"]


def make_key() -> str:
    from icw import ICWKey

    return ICWKey.create("wip", seed=1, tokenizer="qwen3").to_string()


def end_to_end(key: str, cache: str) -> float:
    env = {**os.environ, "ICW_CACHE": cache}
    start = time.perf_counter()
    done = subprocess.run([*icw_command(), "detect", "--key", key], input=TEXT, capture_output=True, text=True,
                          env=env, timeout=300)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"icw detect failed: {done.stderr[-2000:]}")
    return elapsed


def phases(key: str, cache: str, workdir: Path) -> dict[str, float]:
    text, out = workdir / "text.txt", workdir / "phases.json"
    text.write_text(TEXT, encoding="utf-8")
    env = {**os.environ, "ICW_CACHE": cache}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PHASE_SCRIPT, key, str(text), str(out)], capture_output=True,
                          text=True, env=env, timeout=300)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"the phase run failed: {done.stderr[-2000:]}")
    timings = json.loads(out.read_text())
    timings["interpreter"] = elapsed - sum(timings[p] for p in PHASES)  # Python start-up and exit
    timings["total"] = elapsed
    return timings


def run(runs: int) -> dict[str, dict[str, float]]:
    key = make_key()
    results: dict[str, dict[str, list[float]]] = {"cold": {}, "warm": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        warm = str(tmp_path / "warm-cache")
        end_to_end(key, warm)  # fills the warm cache
        for i in range(runs):  # interleaved, so drift in machine load hits cold and warm alike
            for state in ("cold", "warm"):
                cache = str(tmp_path / f"cold-{i}-{len(results[state])}") if state == "cold" else warm
                results[state].setdefault("end to end", []).append(end_to_end(key, cache))
                cache = str(tmp_path / f"cold-phases-{i}") if state == "cold" else warm
                for name, value in phases(key, cache, tmp_path).items():
                    results[state].setdefault(name, []).append(value)
    return {state: {name: statistics.median(values) for name, values in r.items()} for state, r in results.items()}


def report(results: dict[str, dict[str, float]], runs: int) -> str:
    columns = ["end to end", "interpreter", *PHASES, "total"]
    rows = [[state, *(f"{r[c]:.2f}" for c in columns)] for state, r in results.items()]
    table = markdown_table(["cache", "`icw detect` end to end (s)", "interpreter start/exit (s)", "import icw.cli (s)",
                            "load tokenizer (s)", "vocabulary view (s)", "detect (s)", "phases run total (s)"], rows)
    warm = results["warm"]["end to end"]
    return "\n".join([
        f"`echo TEXT | icw detect --key KEY` (WIP, Qwen3 tokenizer), median of {runs} runs "
        f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)", "", table, "",
        f"Target: warm start-up within {TARGET_S:.0f} s: {warm:.2f} s -> {'met' if warm <= TARGET_S else 'MISSED'}"])


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each measurement (median reported)")
    parser.add_argument("--quick", action="store_true", help="1 run of each: a smoke run")
    args = parser.parse_args(argv)
    runs = 1 if args.quick else args.runs
    if runs < 1:
        parser.error("--runs must be positive")
    results = run(runs)
    print(report(results, runs))
    return results


if __name__ == "__main__":
    main()
