"""Per-key false-positive rates on human text, before and after key screening.

For each family, ``--num-keys`` random keys (seeds from 5,000,000) are calibrated on one half of
the bundled human passages (``icw.calibration.default_corpus()``, shuffled, split in two); keys
whose empirical FPR at alpha exceeds ``--max-fpr`` there are rejected, as ``icw key new --max-fpr``
does. The table gives the spread of the per-key FPR measured on the *other* half (so the
selection does not flatter the kept keys): all keys vs the kept ones. Measured on a loaded 2-core
machine shared by 8 jobs.

    python benchmarks/key_screening.py                   # 100 keys per family
    python benchmarks/key_screening.py --num-keys 30     # faster
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-keys", type=int, default=100)
    parser.add_argument("--families", default="tsp,wip,sa")
    parser.add_argument("--tokenizer", default="qwen3")
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--max-fpr", type=float, default=0.02)
    args = parser.parse_args(argv)

    from icw import ICWKey
    from icw.calibration import calibrate_keys, default_corpus
    from icw.models import load_tokenizer

    tok = load_tokenizer(args.tokenizer)
    passages = list(default_corpus())
    order = np.random.default_rng(0).permutation(len(passages))
    screen = [passages[i] for i in order[: len(order) // 2]]
    audit = [passages[i] for i in order[len(order) // 2:]]
    rows = []
    for family in [f.strip() for f in args.families.split(",") if f.strip()]:
        keys = [ICWKey.create(family, seed=5_000_000 + i, tokenizer=tok if family != "sa" else None)
                for i in range(args.num_keys)]
        on_screen = np.array([c.fpr for c in calibrate_keys(keys, screen, tok, alpha=args.alpha)])
        on_audit = np.array([c.fpr for c in calibrate_keys(keys, audit, tok, alpha=args.alpha)])
        kept = on_screen <= args.max_fpr
        for label, fpr in (("all keys", on_audit), (f"kept (screen FPR <= {args.max_fpr:g})", on_audit[kept])):
            rows.append([family.upper(), label, len(fpr), f"{np.mean(fpr):.2%}", f"{np.median(fpr):.2%}",
                         f"{np.quantile(fpr, 0.9):.2%}" if len(fpr) else "-", f"{fpr.max():.2%}" if len(fpr) else "-",
                         f"{np.mean(fpr > args.max_fpr):.0%}" if len(fpr) else "-"])
    print(f"{len(screen)} screening passages, {len(audit)} audit passages (bundled human English); alpha = "
          f"{args.alpha:g}; tokenizer {args.tokenizer} for TSP and WIP")
    print(markdown_table(["family", "keys", "n", "mean FPR (audit half)", "median", "90th percentile", "max",
                          f"share above {args.max_fpr:g}"], rows))


if __name__ == "__main__":
    main()
