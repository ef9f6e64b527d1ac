"""Verification throughput: icw's batched ``verify`` beside a plain reference and tokenization.

For each family we time, on human texts of exactly 600 Qwen3 tokens (gensim's news and
Wikipedia text, see ``_common.py``), with one shared key (the detector's setting):

* **tokenize**: the batched tokenizer call alone, ``tok(texts, add_special_tokens=False)``;
* **icw**: ``icw.verify(texts, key, tok)`` at its defaults (for SA: ``N = 1000`` permutations
  for z *and* a Monte Carlo p-value over up to ``M = 9,999`` secrets, drawn sequentially until
  the decision at alpha is settled: more work than the reference does); SA is also timed with
  all ``M`` drawn (``sequential=False``) and for z alone (``num_null_keys=1``);
* **reference**: a straightforward implementation of the paper's definitions written here:
  the same batched tokenizer call, then Python sets over token ids (``V_en`` and ``V_en^word``
  derived independently by decoding every id) and the z formula for TSP/WIP; for SA the
  sentence-initial letters (icw's extractor: the statistic is what is compared), a pure-Python
  LCS dynamic program and ``N = 1000`` ``random.shuffle`` permutations.

Before timing, the script checks that both sides compute the same statistic: TSP/WIP ``X``, ``n``
and ``z`` equal (``z`` to 1e-12, i.e. up to float summation order); SA ``X`` equal and ``z``
within Monte-Carlo noise of two independent 1000-permutation estimates.

Targets: SA at ``N = 1000`` at least 500x faster than the reference (issue 25; 100x in issue 2);
TSP and WIP within 1.3x of tokenization alone.

    python benchmarks/verify_speed.py              # 32 texts, 15 repeats (about a minute on 2 cores)
    python benchmarks/verify_speed.py --quick      # seconds
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table, median_time, texts_of_tokens  # noqa: E402

NUM_TOKENS = 600
NUM_PERMUTATIONS = 1000
SA_TARGET = 500.0
TOKENIZE_TARGET = 1.3


# --------------------------------------------------------------------- reference
class ReferenceVerifier:
    """The paper's verifiers, written plainly over Python sets (no icw internals)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        surfaces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))], clean_up_tokenization_spaces=False)
        excluded = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}))
        # V_en: decoded surface is ASCII with at least one letter, minus special/added tokens.
        self.v_en = {i for i, s in enumerate(surfaces)
                     if i not in excluded and s.isascii() and any(c.isalpha() for c in s)}
        # V_en^word: a leading space then a letter; phi(v) is that letter, upper-cased.
        self.phi = {i: surfaces[i][1].upper() for i in self.v_en
                    if len(surfaces[i]) >= 2 and surfaces[i][0] == " " and surfaces[i][1].isalpha()}
        counts = Counter(self.phi.values())
        self.letter_fraction = {a: counts[a] / len(self.phi) for a in counts}

    @staticmethod
    def z(x: int, n: int, p0: float) -> float:
        return 0.0 if n == 0 else (x - n * p0) / math.sqrt(n * p0 * (1 - p0))

    def tsp(self, ids: list[int], green: set[int], gamma: float) -> tuple[int, int, float]:
        unique = set(ids) & self.v_en
        x = len(unique & green)
        return x, len(unique), self.z(x, len(unique), gamma)

    def wip(self, ids: list[int], letters: str) -> tuple[int, int, float]:
        unique = {i for i in set(ids) if i in self.phi}
        x = sum(self.phi[i] in letters for i in unique)
        p0 = sum(self.letter_fraction.get(a, 0.0) for a in letters)
        return x, len(unique), self.z(x, len(unique), p0)

    @staticmethod
    def lcs(a: str, b: str) -> int:
        prev = [0] * (len(b) + 1)
        for ca in a:
            cur = [0]
            for j, cb in enumerate(b):
                cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
            prev = cur
        return prev[-1]

    def sa(self, text: str, secret: str, rng: random.Random, num_permutations: int = NUM_PERMUTATIONS
           ) -> tuple[int, int, float]:
        from icw.text import sentence_initials

        phi = sentence_initials(text)
        if not phi:
            return 0, 0, 0.0
        x = self.lcs(secret, phi)
        letters, null = list(phi), []
        for _ in range(num_permutations):
            rng.shuffle(letters)
            null.append(self.lcs(secret, "".join(letters)))
        sd = statistics.stdev(null)
        return x, len(phi), 0.0 if sd == 0 else (x - statistics.fmean(null)) / sd

    def verify(self, texts: list[str], family: str, key: Any, seed: int = 0) -> list[tuple[int, int, float]]:
        if family == "sa":
            rng = random.Random(seed)
            return [self.sa(t, key.secret_string, rng) for t in texts]
        ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        if family == "tsp":
            green = {int(i) for i in key.token_set(self.tokenizer)}
            return [self.tsp(row, green, key.gamma) for row in ids]
        letters = key.green_letters
        return [self.wip(row, letters) for row in ids]


# ------------------------------------------------------------------------- checks
def check_agreement(ref: ReferenceVerifier, texts: list[str], keys: dict[str, Any], tokenizer: Any) -> dict[str, float]:
    """Raise if icw and the reference disagree; return the largest |z_icw - z_ref| per family."""
    from icw import verify

    worst = {}
    for family, key in keys.items():
        ours = verify(texts, key, tokenizer)
        theirs = ref.verify(texts, family, key, seed=1)
        worst[family] = 0.0
        for i, (r, (x, n, z)) in enumerate(zip(ours, theirs, strict=True)):
            if (r.num_aligned, r.num_tokens_scored) != (x, n):
                raise AssertionError(f"{family} text {i}: icw X={r.num_aligned}, n={r.num_tokens_scored}; "
                                     f"reference X={x}, n={n}")
            if family == "sa":
                # two independent 1000-permutation estimates of (X - mean) / sd differ by about
                # sqrt(2 (1 + z^2 / 2) / N); allow 5 such standard errors
                tol = 5 * math.sqrt(2 * (1 + z * z / 2) / NUM_PERMUTATIONS)
            else:
                tol = 1e-12 * max(1.0, abs(z))
            if abs(r.z_score - z) > tol:
                raise AssertionError(f"{family} text {i}: icw z={r.z_score!r}, reference z={z!r} (tolerance {tol:.2g})")
            worst[family] = max(worst[family], abs(r.z_score - z))
    return worst


# ---------------------------------------------------------------------------- main
def run(num_texts: int, repeats: int, tokenizer_name: str = "qwen3") -> dict[str, dict[str, float]]:
    from icw import ICWKey, verify
    from icw.models import load_tokenizer

    tok = load_tokenizer(tokenizer_name)
    texts = texts_of_tokens(tok, num_texts, NUM_TOKENS)
    keys = {"tsp": ICWKey.create("tsp", seed=11, tokenizer=tok), "wip": ICWKey.create("wip", seed=11, tokenizer=tok),
            "sa": ICWKey.create("sa", seed=11)}
    ref = ReferenceVerifier(tok)
    worst = check_agreement(ref, texts, keys, tok)  # also warms every cache up

    def tokenize() -> Any:
        return tok(texts, add_special_tokens=False)

    timed: dict[tuple[str, str], Any] = {("", "tokenize"): tokenize}  # one measurement shared by TSP and WIP
    for family, key in keys.items():
        timed[(family, "icw")] = lambda key=key: verify(texts, key, tok)
        timed[(family, "reference")] = lambda family=family, key=key: ref.verify(texts, family, key)
    # z alone, as the reference computes it (the p-value needs >= 1 null key)
    timed[("sa", "icw_z_only")] = lambda: verify(texts, keys["sa"], tok, num_null_keys=1)
    timed[("sa", "icw_full_mc")] = lambda: verify(texts, keys["sa"], tok, sequential=False)
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {name: [] for name in timed}
    for _ in range(repeats):  # interleaved, so drift in machine load hits every measurement alike
        for name, fn in timed.items():
            samples[name].append(median_time(fn, 1))
    results: dict[str, dict[str, float]] = {f: {"max_abs_dz": worst[f], "tokenize": math.nan, "tokenize_cpu": math.nan}
                                            for f in keys}
    for (owner, name), values in samples.items():
        for family in [owner] if owner else ["tsp", "wip"]:
            results[family][name] = statistics.median(v[0] for v in values)
            results[family][name + "_cpu"] = statistics.median(v[1] for v in values)
    return results


def report(results: dict[str, dict[str, float]], num_texts: int, repeats: int) -> str:
    def rate(seconds: float) -> str:
        return "-" if math.isnan(seconds) else f"{num_texts / seconds:,.0f}"

    rows = []
    for family, r in results.items():
        vs_tok = "-" if math.isnan(r["tokenize"]) else (f"{r['icw'] / r['tokenize']:.2f}x / "
                                                         f"{r['icw_cpu'] / r['tokenize_cpu']:.2f}x")
        rows.append([family, rate(r["tokenize"]), rate(r["icw"]), rate(r["reference"]),
                     f"{r['reference'] / r['icw']:.1f}x / {r['reference_cpu'] / r['icw_cpu']:.1f}x", vs_tok,
                     f"{r['max_abs_dz']:.2g}"])
    table = markdown_table(["family", "tokenize only (texts/s)", "icw verify (texts/s)", "reference (texts/s)",
                            "icw speed-up vs reference (wall / CPU)", "icw time / tokenize time (wall / CPU)",
                            "max abs(z_icw - z_ref)"], rows)
    sa = results["sa"]
    lines = [f"{num_texts} human texts of {NUM_TOKENS} Qwen3 tokens, one shared key per family, median of {repeats} interleaved repeats "
             f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)",
             "", table, "",
             f"SA, z only (num_null_keys=1) as the reference computes: {num_texts / sa['icw_z_only']:,.0f} texts/s, "
             f"{sa['reference'] / sa['icw_z_only']:.0f}x the reference",
             f"SA, all 9,999 null secrets drawn (sequential=False): {num_texts / sa['icw_full_mc']:,.0f} texts/s, "
             f"{sa['reference'] / sa['icw_full_mc']:.0f}x the reference", "Targets:"]
    sa_ratio = sa["reference"] / sa["icw"]
    lines.append(f"  SA (N=1000) >= {SA_TARGET:.0f}x faster than the reference: {sa_ratio:.0f}x wall, "
                 f"{sa['reference_cpu'] / sa['icw_cpu']:.0f}x CPU -> {'met' if sa_ratio >= SA_TARGET else 'MISSED'}")
    for family in ("tsp", "wip"):
        r = results[family]
        ratio = r["icw"] / r["tokenize"]
        lines.append(f"  {family.upper()} within {TOKENIZE_TARGET}x of tokenization alone: {ratio:.2f}x wall, "
                     f"{r['icw_cpu'] / r['tokenize_cpu']:.2f}x CPU -> {'met' if ratio <= TOKENIZE_TARGET else 'MISSED'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-texts", type=int, default=32, help="number of 600-token human texts")
    parser.add_argument("--repeats", type=int, default=15, help="timed repeats per measurement (median reported)")
    parser.add_argument("--quick", action="store_true", help="4 texts, 2 repeats: a smoke run")
    args = parser.parse_args(argv)
    num_texts, repeats = (4, 2) if args.quick else (args.num_texts, args.repeats)
    if num_texts < 1 or repeats < 1:
        parser.error("--num-texts and --repeats must be positive")
    results = run(num_texts, repeats)
    print(report(results, num_texts, repeats))
    return results


if __name__ == "__main__":
    main()
