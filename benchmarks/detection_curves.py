"""Tokens-to-detection curves: the verdict rate at alpha per family as a function of answer length.

Positives: logit-biased SmolLM2-135M-Instruct answers (fresh keys, default deltas) truncated after
50, 100, 200 and 400 tokens (an answer that ended earlier is kept whole, and the table gives the
median length actually scored). Negatives: human passages (gensim's news and Wikipedia, joined
and cut to the same token counts) under fresh keys. The verdict is ``p_value <= alpha`` of
:func:`icw.verify` (exact for TSP and WIP, Monte Carlo for SA). Writes a markdown table and a PNG.
Measured on a loaded 2-core CPU machine shared by 8 jobs: generation dominates, so sizes are options.

    python benchmarks/detection_curves.py --out docs/detection_curves.png
    python benchmarks/detection_curves.py --num-answers 20 --lengths 50,100,200 --out curves.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import biased_answers, markdown_table, rate_with_ci, texts_of_tokens, truncate_tokens  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-answers", type=int, default=60, help="biased answers per family")
    parser.add_argument("--num-human", type=int, default=200, help="human texts per family and length")
    parser.add_argument("--lengths", default="50,100,200,400", help="comma-separated token counts")
    parser.add_argument("--families", default="tsp,wip,sa")
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--cache", default=None, help="JSON Lines file to keep the generated answers in")
    parser.add_argument("--out", default="detection_curves.png", help="the PNG plot")
    args = parser.parse_args(argv)
    lengths = [int(v) for v in args.lengths.split(",")]
    families = [f.strip() for f in args.families.split(",") if f.strip()]

    from icw import ICWKey, verify
    from icw.models import load_tokenizer

    tok = load_tokenizer("smollm2")
    rows, curves = [], {}
    for family in families:
        answers = biased_answers(family, args.num_answers, max(lengths), args.cache)
        keys = [ICWKey.from_string(k) for k, _ in answers]
        curves[family] = ([], [])
        for length in lengths:
            texts = [truncate_tokens(tok, a, length) for _, a in answers]
            scored = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
            tp = sum(r.is_watermarked for r in verify(texts, keys, tok if family != "sa" else None, alpha=args.alpha))
            humans = texts_of_tokens(tok, args.num_human, length)
            human_keys = [ICWKey.create(family, seed=6_000_000 + i, tokenizer=tok if family != "sa" else None)
                          for i in range(len(humans))]
            fp = sum(r.is_watermarked for r in verify(humans, human_keys, tok if family != "sa" else None,
                                                      alpha=args.alpha))
            curves[family][0].append(tp / len(texts))
            curves[family][1].append(fp / len(humans))
            rows.append([family.upper(), length, f"{np.median(scored):g}", len(texts), rate_with_ci(tp, len(texts)),
                         len(humans), rate_with_ci(fp, len(humans))])
    print(f"SmolLM2-135M-Instruct, logit bias (default deltas), alpha = {args.alpha:g}")
    print(markdown_table(["family", "tokens", "median answer tokens", "answers", f"verdict rate (TPR) at {args.alpha:g} [95% CI]",
                          "human texts", "verdict rate on human text (FPR) [95% CI]"], rows))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for family, (tpr, fpr) in curves.items():
        line = ax.plot(lengths, tpr, marker="o", label=f"{family.upper()} biased answers")[0]
        ax.plot(lengths, fpr, marker="x", linestyle=":", color=line.get_color(), label=f"{family.upper()} human text")
    ax.axhline(args.alpha, color="grey", linewidth=0.8, linestyle="--")
    ax.set(xscale="log", xticks=lengths, xlabel="answer length (tokens)", ylabel=f"verdict rate at alpha = {args.alpha:g}",
           ylim=(-0.02, 1.02), title="Tokens to detection (SmolLM2-135M, logit bias)")
    ax.set_xticklabels([str(v) for v in lengths])
    ax.minorticks_off()
    ax.legend(fontsize=7, loc="center right")
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
