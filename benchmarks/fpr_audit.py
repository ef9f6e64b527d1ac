"""False-positive audit of the three verifiers on human-written text.

Every test pairs a fresh random key with a human passage (gensim's news documents and
Wikipedia paragraphs, see ``_common.py``), so every test is a draw under the null
hypothesis. With the default of one passage per key, the passages within a (family,
tokenizer) cell are all distinct and the keys independent, so the tests are independent
and the number of false positives is exactly Binomial(tests, FPR).

Per (family, tokenizer) the table reports the number of tests, the FPR of the exact
p-values at ``alpha`` (1 %), the FPR of the paper's rule ``z > 2.326``, and the 99 % upper
binomial quantile of the FPR when the true rate is exactly ``alpha``
(``binom.ppf(0.99, tests, alpha) / tests``): an observed exact-p FPR at or below it is
consistent with a valid level-``alpha`` test. SA does not depend on a tokenizer and runs once.

Audit keys come from a seed pool disjoint from the seeds used elsewhere (benchmarks and
training draw small seeds; the audit draws from ``[2e9, 2e9 + 1e8)``).

    python benchmarks/fpr_audit.py            # 4,000 tests per cell, a few minutes on 2 cores
    python benchmarks/fpr_audit.py --quick    # seconds
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import human_passages, markdown_table  # noqa: E402

SEED_POOL = range(2_000_000_000, 2_100_000_000)
Z_THRESHOLD = 2.326  # the paper's one-sided 1 % normal threshold
CHUNK = 200


def audit_seeds(num_keys: int, family: str, seed: int) -> list[int]:
    """Distinct key seeds from :data:`SEED_POOL` (a different draw per family)."""
    return random.Random(f"{seed}:{family}").sample(SEED_POOL, num_keys)


def run_cell(family: str, tokenizer_name: str | None, num_keys: int, passages_per_key: int, alpha: float,
             seed: int, progress: bool = True, join: int = 1) -> dict[str, Any]:
    """Run the tests of one (family, tokenizer) cell; return the per-test p-values and z-scores."""
    from tqdm.auto import tqdm

    from icw import ICWKey, verify
    from icw.models import load_tokenizer

    tok = load_tokenizer(tokenizer_name) if tokenizer_name else None
    passages = [t for _, t in human_passages()]
    random.Random(f"{seed}:passages").shuffle(passages)
    if join > 1:  # longer test texts: more sentences for SA, more tokens for TSP/WIP
        passages = ["\n\n".join(passages[i:i + join]) for i in range(0, len(passages) - join + 1, join)]
    seeds = audit_seeds(num_keys, family, seed)
    pairs = [(s, passages[(i * passages_per_key + j) % len(passages)])
             for i, s in enumerate(seeds) for j in range(passages_per_key)]
    p_values: list[float] = []
    z_scores: list[float] = []
    scored: list[int] = []
    label = f"{family}/{tokenizer_name or 'any'}"
    for start in tqdm(range(0, len(pairs), CHUNK), desc=label, unit="chunk", disable=not progress, leave=False):
        chunk = pairs[start:start + CHUNK]
        keys = [ICWKey.create(family, seed=s, tokenizer=tok) for s, _ in chunk]
        results = verify([t for _, t in chunk], keys, tok, alpha=alpha)
        p_values += [r.p_value for r in results]
        z_scores += [r.z_score for r in results]
        scored += [r.num_tokens_scored for r in results]
    return {"family": family, "tokenizer": tokenizer_name or "any (tokenizer-free)", "keys": num_keys,
            "tests": len(pairs), "p_values": p_values, "z_scores": z_scores,
            "median_scored": statistics.median(scored), "distinct_passages": len(pairs) <= len(passages)}


def summarize(cell: dict[str, Any], alpha: float) -> dict[str, Any]:
    from scipy.stats import binom

    n = cell["tests"]
    fp_exact = sum(p <= alpha for p in cell["p_values"])
    fp_z = sum(z > Z_THRESHOLD for z in cell["z_scores"])
    bound = float(binom.ppf(0.99, n, alpha)) / n
    return {**{k: v for k, v in cell.items() if k not in ("p_values", "z_scores")},
            "fpr_exact": fp_exact / n, "fp_exact": fp_exact, "fpr_z": fp_z / n, "fp_z": fp_z, "bound": bound,
            "within": fp_exact / n <= bound}


def report(rows: list[dict[str, Any]], alpha: float) -> str:
    body = [[r["family"], r["tokenizer"], r["tests"], r["keys"], f"{r['median_scored']:g}",
             f"{r['fpr_exact']:.2%} ({r['fp_exact']})", f"{r['fpr_z']:.2%} ({r['fp_z']})", f"{r['bound']:.2%}",
             "yes" if r["within"] else "NO"] for r in rows]
    header = ["family", "tokenizer", "tests", "keys", "median units scored", f"FPR exact p <= {alpha:g}",
              f"FPR z > {Z_THRESHOLD}", f"99% binomial bound at FPR = {alpha:g}", "exact p within bound"]
    lines = [markdown_table(header, body)]
    if not all(r["distinct_passages"] for r in rows):
        lines.append("note: more tests than passages, so passages were reused and tests are not independent")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-keys", type=int, default=4000, help="random keys per (family, tokenizer)")
    parser.add_argument("--passages-per-key", type=int, default=1,
                        help="human passages tested with each key (1 keeps every test independent)")
    parser.add_argument("--tokenizers", default="qwen3,gpt2", help="comma-separated tokenizers for TSP and WIP")
    parser.add_argument("--families", default="tsp,wip,sa", help="comma-separated families")
    parser.add_argument("--join", type=int, default=1,
                        help="join this many shuffled passages into one test text (longer texts; fewer distinct ones)")
    parser.add_argument("--alpha", type=float, default=0.01, help="significance level of the exact p-values")
    parser.add_argument("--seed", type=int, default=0, help="seed of the audit's key and passage draws")
    parser.add_argument("--quick", action="store_true", help="30 keys per cell: a smoke run")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    args = parser.parse_args(argv)
    num_keys = 30 if args.quick else args.num_keys
    if min(num_keys, args.passages_per_key, args.join) < 1 or not 0 < args.alpha < 1:
        parser.error("--num-keys, --passages-per-key and --join must be positive and 0 < --alpha < 1")
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    tokenizers = [t.strip() for t in args.tokenizers.split(",") if t.strip()]
    unknown = set(families) - {"tsp", "wip", "sa"}
    if unknown or not families or not tokenizers:
        parser.error(f"--families takes tsp, wip, sa (got {args.families!r}); --tokenizers must not be empty")
    rows = []
    for family in families:
        for tokenizer in ([None] if family == "sa" else tokenizers):
            cell = run_cell(family, tokenizer, num_keys, args.passages_per_key, args.alpha, args.seed,
                            progress=not args.no_progress, join=args.join)
            rows.append(summarize(cell, args.alpha))
    print(f"Human passages: {len(human_passages())} (gensim 4.4.0 test data); "
          f"{args.join} passage(s) per test text; {args.passages_per_key} test text(s) per key; alpha = {args.alpha:g}")
    print(report(rows, args.alpha))
    print(f"'exact p within bound': the exact-p FPR is at most the 99% quantile of Binomial(tests, {args.alpha:g}) / tests")
    return rows


if __name__ == "__main__":
    main()
