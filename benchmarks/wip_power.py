"""Power of the WIP verifier's key-null tests on logit-biased SmolLM2 answers.

Every test here compares the answer's key with random 13-letter keys on the *same* text, so each
is exact under the key-null whatever the text's letter frequencies; they differ only in the
statistic that ranks the keys. For ``num_answers`` logit-biased SmolLM2-135M-Instruct answers
(fresh keys, ``max_new_tokens`` new tokens, delta 3) the table gives the verdict rate at alpha:

* ``X``: green word-initial tokens (the test before issue 11): exact dynamic program;
* ``paper z``: the paper's z (p0 from the vocabulary's letter fractions, so it depends on the key);
* ``English z``: the same z with p0 = sum of English word-initial frequencies of the key's letters
  (``icw/data/english_initials.json``);
* ``D = X - n p0_en``: the excess over the English expectation, a sum of per-letter scores;
* ``S``: the standardized sum ``sum_{a in L} (c_a - n f_a) / sqrt(n f_a)``;
* ``icw``: what :func:`icw.verify` decides (its ``statistic`` and ``p_value_method`` are printed).

The non-additive statistics are evaluated by a Monte Carlo over ``--mc-keys`` random keys
(p = (k + 1) / (M + 1)); the library's own test is exact. Human passages give the false-positive
side. Measured on a loaded 2-core CPU machine (shared by 8 jobs); generation dominates.

    python benchmarks/wip_power.py                      # 60 answers of 200 new tokens
    python benchmarks/wip_power.py --num-answers 20     # faster
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import biased_answers, human_passages, markdown_table, rate_with_ci, truncate_tokens  # noqa: E402


def random_key_masks(num: int, num_letters: int = 13, seed: int = 0) -> np.ndarray:
    """``(num, 26)`` indicator rows of uniformly random ``num_letters``-letter keys."""
    rng = np.random.default_rng(seed)
    order = np.argsort(rng.random((num, 26)), axis=1)[:, :num_letters]
    masks = np.zeros((num, 26), dtype=bool)
    np.put_along_axis(masks, order, True, axis=1)
    return masks


def candidate_statistics(counts: np.ndarray, masks: np.ndarray, vocab_f: np.ndarray, english_f: np.ndarray
                         ) -> dict[str, np.ndarray]:
    """Each candidate statistic of one text (26 letter counts) under each key row of ``masks``."""
    m = masks.astype(np.float64)
    n = counts.sum()
    x = m @ counts
    if n == 0:
        zero = np.zeros(len(masks))
        return {"X": x, "paper z": zero, "English z": zero, "D = X - n p0_en": zero, "S": zero}
    p_vocab, p_en = m @ vocab_f, m @ english_f
    expected = n * english_f
    return {"X": x,
            "paper z": (x - n * p_vocab) / np.sqrt(n * p_vocab * (1 - p_vocab)),
            "English z": (x - n * p_en) / np.sqrt(n * p_en * (1 - p_en)),
            "D = X - n p0_en": x - n * p_en,
            "S": m @ ((counts - expected) / np.sqrt(expected))}


def monte_carlo_p_values(counts: np.ndarray, key_mask: np.ndarray, null_masks: np.ndarray, vocab_f: np.ndarray,
                         english_f: np.ndarray) -> dict[str, float]:
    observed = candidate_statistics(counts, key_mask[None, :], vocab_f, english_f)
    null = candidate_statistics(counts, null_masks, vocab_f, english_f)
    return {name: (int((null[name] >= observed[name][0] - 1e-9).sum()) + 1) / (len(null_masks) + 1)
            for name in observed}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-answers", type=int, default=60)
    parser.add_argument("--max-new-tokens", type=int, default=200)
    parser.add_argument("--num-human", type=int, default=1000, help="human passages for the false-positive side")
    parser.add_argument("--mc-keys", type=int, default=20000, help="random keys of the Monte Carlo p-values")
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--cache", default=None, help="JSON Lines file to keep the generated answers in")
    parser.add_argument("--screen", action="store_true", help="screened keys (icw.new_key, the "
                        "default of icw key new) for the answers and the human passages")
    args = parser.parse_args(argv)

    from icw import ICWKey, new_key, verify
    from icw.models import load_tokenizer
    from icw.verification import english_initial_frequencies, wip_letter_counts

    tok = load_tokenizer("smollm2")
    answers = biased_answers("wip", args.num_answers, args.max_new_tokens, args.cache, screen=args.screen)
    answers = [(k, truncate_tokens(tok, a, args.max_new_tokens)) for k, a in answers]  # a cache may hold longer ones
    keys = [ICWKey.from_string(k) for k, _ in answers]
    rng = np.random.default_rng(1)
    humans = [t for _, t in human_passages()]
    humans = [humans[i] for i in rng.permutation(len(humans))[: args.num_human]]
    human_keys = [new_key("wip", 4_000_000 + i, tok, screen=args.screen) for i in range(len(humans))]
    from icw.vocab import vocabulary

    vocab_f, english_f = vocabulary(tok).letter_fractions, english_initial_frequencies()
    null_masks = random_key_masks(args.mc_keys)
    rows = []
    for label, texts, kk in (("biased answers", [a for _, a in answers], keys), ("human text", humans, human_keys)):
        counts = wip_letter_counts(texts, tok)
        masks = np.zeros((len(kk), 26), dtype=bool)
        for i, key in enumerate(kk):
            masks[i, [ord(c) - 65 for c in key.green_letters]] = True
        mc = [monte_carlo_p_values(c, m, null_masks, vocab_f, english_f) for c, m in zip(counts, masks, strict=True)]
        results = verify(texts, kk, tok, alpha=args.alpha)
        for name in mc[0]:
            hits = sum(p[name] <= args.alpha for p in mc)
            rows.append([label, name, f"Monte Carlo, {args.mc_keys:,} keys", len(texts), rate_with_ci(hits, len(texts))])
        rows.append([label, f"icw.verify: {results[0].statistic.split(':')[0]}", results[0].p_value_method.split(" (")[0],
                     len(texts), rate_with_ci(sum(r.is_watermarked for r in results), len(texts))])
        if label == "biased answers":
            z = np.mean([r.z_score for r in results])
            n = np.median([r.num_tokens_scored for r in results])
    print(f"WIP, SmolLM2-135M-Instruct logit-biased answers (delta 3, fresh keys), {args.num_answers} answers of "
          f"{args.max_new_tokens} new tokens: mean paper z {z:.2f}, median {n:g} word-initial tokens scored; "
          f"{len(humans)} human passages; alpha = {args.alpha:g}")
    print(markdown_table(["texts", "statistic ranking the keys", "p-value", "n", f"verdict rate at {args.alpha:g} [95% CI]"],
                         rows))
    if not math.isfinite(z):
        raise SystemExit("no answers scored")


if __name__ == "__main__":
    main()
