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

SA is also timed **through the command line**, the way most people run it: ``icw detect --jsonl
--key KEY FILE`` on 2,000 texts of six Wikipedia paragraphs each (one JSON line per text), with
start-up excluded: ``icw.cli.main`` is called in this process (imports done), its output going to a
file, so reading, verifying, serializing and writing every text are timed. As a cross-check the
same command runs in fresh processes on all texts and on one, and the difference is divided by the
texts in between. The same texts are timed through ``icw.verify`` in-process, and the reference on
an evenly spaced sample of them (per-text time). The command line's rows must equal ``icw.verify``'s
on every text, and it must print one stderr line for the corpus, not one per text.

Targets: SA at ``N = 1000`` at least 500x faster than the reference (issue 25; 100x in issue 2),
in-process and through the command line (issue 71); TSP and WIP within 1.3x of tokenization alone.

    python benchmarks/verify_speed.py              # 32 + 2,000 texts, 15 repeats (a few minutes on 2 cores)
    python benchmarks/verify_speed.py --quick      # seconds
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table, median_time, texts_of_tokens, wikipedia_paragraphs  # noqa: E402

NUM_TOKENS = 600
NUM_PERMUTATIONS = 1000
SA_TARGET = 500.0
TOKENIZE_TARGET = 1.3
CLI_TEXTS = 2000
CLI_PARAGRAPHS = 6
CLI_REFERENCE_TEXTS = 100
SA_KEY = "icw:sa:seed=11,length=18"


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

    @staticmethod
    def sa(text: str, secret: str, rng: random.Random, num_permutations: int = NUM_PERMUTATIONS
           ) -> tuple[int, int, float]:
        from icw.text import sentence_initials

        phi = sentence_initials(text)
        if not phi:
            return 0, 0, 0.0
        x = ReferenceVerifier.lcs(secret, phi)
        letters, null = list(phi), []
        for _ in range(num_permutations):
            rng.shuffle(letters)
            null.append(ReferenceVerifier.lcs(secret, "".join(letters)))
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


# ------------------------------------------------------------------ command line
def paragraph_texts(num_texts: int, paragraphs: int = CLI_PARAGRAPHS) -> list[str]:
    """``num_texts`` texts of ``paragraphs`` consecutive Wikipedia paragraphs joined by blank lines
    (gensim's human text, see ``_common.py``; cycling through the paragraphs)."""
    source = wikipedia_paragraphs()
    return ["\n\n".join(source[(i * paragraphs + j) % len(source)] for j in range(paragraphs))
            for i in range(num_texts)]


def detect_in_process(path: str, out_path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """``icw detect --jsonl --key SA_KEY path`` through ``icw.cli.main`` in this process (start-up excluded),
    stdout to ``out_path``; returns the rows it wrote and its stderr lines."""
    from icw.cli import main

    err = io.StringIO()
    with open(out_path, "w", encoding="utf-8") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["detect", "--jsonl", "--key", SA_KEY, path])
    if status != 0:
        raise RuntimeError(f"icw detect failed ({status}): {err.getvalue()[-500:]}")
    with open(out_path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh], err.getvalue().splitlines()


def detect_subprocess(path: str) -> float:
    """Wall seconds of ``python -m icw.cli detect --jsonl --key SA_KEY path`` in a fresh process."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "icw.cli", "detect", "--jsonl", "--key", SA_KEY, path], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def run_cli(num_texts: int, repeats: int, reference_texts: int) -> dict[str, float]:
    """SA on ``num_texts`` six-paragraph texts: in-process ``verify``, the command line, the reference."""
    from icw import ICWKey, verify

    texts = paragraph_texts(num_texts)
    stride = max(1, num_texts // reference_texts)
    sample = texts[::stride][:reference_texts]
    secret = ICWKey.from_string(SA_KEY).secret_string
    with tempfile.TemporaryDirectory() as tmp:
        path, one, out = (os.path.join(tmp, name) for name in ("texts.jsonl", "one.jsonl", "out.jsonl"))
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"text": t}) + "\n" for t in texts)
        with open(one, "w", encoding="utf-8") as fh:
            fh.write(json.dumps({"text": texts[0]}) + "\n")
        # the same statistic on every text: the command line's rows are verify's, X is the reference's
        rows, stderr = detect_in_process(path, out)
        ours = verify(texts, SA_KEY)
        for i, (row, r) in enumerate(zip(rows, ours, strict=True)):
            if {k: v for k, v in row.items() if k != "source"} != r.to_dict():
                raise AssertionError(f"text {i}: icw detect printed {row}, icw.verify gives {r.to_dict()}")
        for i in range(0, len(sample) * stride, stride):
            x, n, _ = ReferenceVerifier.sa(texts[i], secret, random.Random(i), num_permutations=2)  # X and n only
            if (x, n) != (ours[i].num_aligned, ours[i].num_tokens_scored):
                raise AssertionError(f"text {i}: icw X={ours[i].num_aligned}, n={ours[i].num_tokens_scored}; "
                                     f"reference X={x}, n={n}")
        timed = {"verify": lambda: verify(texts, SA_KEY), "cli": lambda: detect_in_process(path, out),
                 "reference": lambda: [ReferenceVerifier.sa(t, secret, random.Random(0)) for t in sample],
                 "process_all": lambda: detect_subprocess(path), "process_one": lambda: detect_subprocess(one)}
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in timed}
        for r in range(repeats):  # interleaved, so drift in machine load hits every measurement alike
            for name, fn in timed.items():
                if name == "reference" and r >= max(1, repeats // 5):
                    continue  # the slow reference: a fifth of the repeats
                samples[name].append(median_time(fn, 1))
    got = {name: statistics.median(v[0] for v in values) for name, values in samples.items()}
    got.update({name + "_cpu": statistics.median(v[1] for v in values) for name, values in samples.items()})
    per_text = {"verify": num_texts, "cli": num_texts, "reference": len(sample)}
    for name, count in per_text.items():
        got[name], got[name + "_cpu"] = got[name] / count, got[name + "_cpu"] / count
    got["process"] = (got.pop("process_all") - got["process_one"]) / max(1, num_texts - 1)
    got.pop("process_all_cpu"), got.pop("process_one_cpu")  # a child's CPU time is not this process's
    got["stderr_lines"] = len(stderr)
    got["sentences"] = statistics.median(r.num_tokens_scored for r in ours)
    return got


def report_cli(r: dict[str, float], num_texts: int, repeats: int) -> str:
    def row(name: str, seconds: float, cpu: float | None) -> list[str]:
        ratio = f"{r['reference'] / seconds:.0f}x" + (f" / {r['reference_cpu'] / cpu:.0f}x" if cpu else " / -")
        return [name, f"{1 / seconds:,.0f}", f"{seconds * 1e3:.3f}", ratio]

    rows = [row("`icw.verify` in-process", r["verify"], r["verify_cpu"]),
            row("`icw detect --jsonl`, start-up excluded (`icw.cli.main` in-process)", r["cli"], r["cli_cpu"]),
            row("`icw detect --jsonl` in fresh processes, (all - one text) / texts", r["process"], None),
            ["reference (plain Python, N = 1000)", f"{1 / r['reference']:,.0f}", f"{r['reference'] * 1e3:.1f}", "1x"]]
    table = markdown_table(["SA path", "texts/s", "ms per text", "speed-up vs reference (wall / CPU)"], rows)
    ratio = r["reference"] / r["cli"]
    return "\n".join([
        f"SA through the command line: {num_texts:,} texts of {CLI_PARAGRAPHS} Wikipedia paragraphs (median "
        f"{r['sentences']:.0f} sentences), one key, median of {repeats} interleaved repeats (reference: per text, on "
        f"an evenly spaced sample; start-up of a fresh `icw detect` on one text {r['process_one']:.2f} s)",
        "", table, "",
        f"stderr of `icw detect --jsonl` on the {num_texts:,} texts: {r['stderr_lines']:.0f} line(s)",
        f"  SA through `icw detect` >= {SA_TARGET:.0f}x faster than the reference: {ratio:.0f}x wall, "
        f"{r['reference_cpu'] / r['cli_cpu']:.0f}x CPU -> {'met' if ratio >= SA_TARGET else 'MISSED'}"])


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
    parser.add_argument("--cli-texts", type=int, default=CLI_TEXTS, help="six-paragraph texts for the command line")
    parser.add_argument("--cli-reference-texts", type=int, default=CLI_REFERENCE_TEXTS,
                        help="of which the reference verifies an evenly spaced sample of this many")
    parser.add_argument("--quick", action="store_true", help="4 + 40 texts, 2 repeats: a smoke run")
    args = parser.parse_args(argv)
    num_texts, repeats = (4, 2) if args.quick else (args.num_texts, args.repeats)
    cli_texts, reference_texts = (40, 4) if args.quick else (args.cli_texts, args.cli_reference_texts)
    if min(num_texts, repeats, cli_texts, reference_texts) < 1:
        parser.error("--num-texts, --repeats, --cli-texts and --cli-reference-texts must be positive")
    results = run(num_texts, repeats)
    results["sa_cli"] = run_cli(cli_texts, repeats, min(reference_texts, cli_texts))
    print(report({f: results[f] for f in ("tsp", "wip", "sa")}, num_texts, repeats))
    print()
    print(report_cli(results["sa_cli"], cli_texts, repeats))
    return results


if __name__ == "__main__":
    main()
