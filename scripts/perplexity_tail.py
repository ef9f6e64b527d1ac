"""How many of a stage's instructed answers are far less fluent than the base model's, and how many verdicts they carry.

A median perplexity ratio (``icw bench compare``) hides a tail: a model can keep its median while a share of its
answers turn to gibberish that the verifier still flags (a TSP answer made of green word pieces). Per family, this
prints the base run's median perplexity, then per stage the answers whose perplexity exceeds ``--times`` x that
median (the base run's own count first, as the null), and how many of the stage's watermarked verdicts are among them.
The runs are ``icw bench run`` folders that measured perplexity (``--ppl_models``); the first is the base.

    .venv/bin/python scripts/perplexity_tail.py ~/.cache/icw/runs/speedrun/eval/{base,sdlp,grpo}
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from icw.bench.compare import scored_answers


def instructed_answers(run_dir: Path) -> dict[tuple[str, str], tuple[float, bool]]:
    """(family, question id) -> (perplexity, watermarked verdict) of a run's unattacked instructed answers."""
    records, ppl = scored_answers(run_dir)
    return {(family, qid): (ppl[family, qid, role], bool(record["is_watermarked"]))
            for (family, qid, role), record in records.items() if role == "positive" and (family, qid, role) in ppl}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="icw bench run folders, the base model's first")
    parser.add_argument("--times", type=float, default=3.0, help="the threshold, a multiple of the base's median")
    args = parser.parse_args()
    stages = {run.name: instructed_answers(run.expanduser()) for run in args.runs}
    base = next(iter(stages.values()))
    print(f"| family | base median PPL | stage | answers over {args.times:g}x it | watermarked among them |")
    print("|---|---|---|---|---|")
    for family in sorted({family for family, _ in base}):
        median = statistics.median(ppl for (fam, _), (ppl, _) in base.items() if fam == family)
        for name, answers in stages.items():
            rows = [(ppl, flagged) for (fam, _), (ppl, flagged) in answers.items() if fam == family]
            tail = [flagged for ppl, flagged in rows if ppl > args.times * median]
            print(f"| {family} | {median:.2f} | {name} | {len(tail)} of {len(rows)} | "
                  f"{sum(tail)} of {sum(flagged for _, flagged in rows)} |")


if __name__ == "__main__":
    main()
