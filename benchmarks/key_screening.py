"""Per-key false-positive rates on human text by domain, before and after the default key screen.

For each family, ``--num-keys`` key seeds (from 5,000,000) give two keys each: *before*, the seed's
own draw (``ICWKey.create``, uniform over all keys) and *after*, the key the default screen keeps
(``icw.new_key``: the first draw of the seed's stream whose FPR at alpha 0.01 is at
most 2% on the screening half of every domain of the reference corpus). Each key's FPR at ``--alpha``
is measured on

* the **audit half** of each reference domain (passages the screen never saw);
* two domains **held out of the corpus entirely**, read from the installed gensim (not shipped: their
  licences are unclear): ``news`` (``lee_background.cor`` + ``lee.cor``) and ``forum`` (the Usenet posts of
  ``mini_newsgroup``, headers, quoted lines and signatures removed), cut into 100-400-word passages;
* **leave one domain out**: the screen rerun without domain D (only the other four screening halves),
  measured on *all* of D's passages (both halves: D played no part in choosing the key).

Reported per family and domain: the mean, 90th percentile and max over keys of the per-key FPR, the
share of keys above 2%, the resolution of one passage (1 / n), and the max that sampling noise alone
would show (the median max over the keys of Binomial(n, mean FPR) / n, as if every key had the mean
FPR): with a few hundred passages the max exceeds 2% by chance alone, so read the max beside it.

    python benchmarks/key_screening.py                      # 200 keys per family (the docs' table)
    python benchmarks/key_screening.py --num-keys 30        # faster
"""

from __future__ import annotations

import argparse
import io
import pickle
import re
import sys
import time
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from _common import gensim_test_data, markdown_table  # noqa: E402


class _Bunch(pickle.Unpickler):
    """Unpickles gensim's ``mini_newsgroup`` (a pickled scikit-learn Bunch) as a plain dict, without sklearn."""

    def find_class(self, module: str, name: str):  # noqa: ANN201
        if module.startswith("sklearn"):
            return dict
        return super().find_class(module, name)


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[\"'(]?[A-Z0-9])", text) if s.strip()]


def external_domains() -> dict[str, list[str]]:
    """``{"news": passages, "forum": passages}`` from gensim's test data (never part of the corpus)."""
    from make_reference_corpus import chunk_paragraphs

    data = gensim_test_data()
    docs = [line.strip() for name in ("lee_background.cor", "lee.cor")
            for line in (data / name).read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    news = [p for doc in docs for p in chunk_paragraphs(_sentences(doc))]
    raw = zlib.decompress((data / "mini_newsgroup").read_bytes())
    posts = _Bunch(io.BytesIO(raw), encoding="latin1").load()["data"]
    forum = []
    for post in posts:
        body = post.split("\n\n", 1)[1] if "\n\n" in post else post  # drop the headers
        body = re.split(r"\n--\s*\n", body)[0]  # and the signature
        lines = [ln for ln in body.splitlines() if not ln.lstrip().startswith((">", "|", ":"))
                 and not re.search(r"(writes|wrote):\s*$", ln)]
        paragraphs = [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", "\n".join(lines))]
        forum += chunk_paragraphs([p for p in paragraphs if len(p.split()) >= 5])
    return {"news": news, "forum": forum}


def external_fires(texts: list[str], keys: list, tok, alpha: float) -> np.ndarray:
    """``(K, B)`` verdicts of every key on every text, by the verifier's multi-key path."""
    from icw.multikey import _score_many
    from icw.verification import DEFAULT_NULL_KEYS, DEFAULT_PERMUTATIONS

    out = []
    for start in range(0, len(texts), 200):
        _, p, _, _ = _score_many(texts[start:start + 200], keys, tok, DEFAULT_PERMUTATIONS, DEFAULT_NULL_KEYS,
                                 with_z=False)
        out.append(p <= alpha)
    return np.concatenate(out).T


def noise_max(num_keys: int, n: int, rate: float, reps: int = 2000) -> float:
    """The median max over ``num_keys`` keys of ``Binomial(n, rate) / n``: the max the table would show if every
    key had exactly the mean FPR, from sampling noise alone."""
    draws = np.random.default_rng(0).binomial(n, rate, size=(reps, num_keys))
    return float(np.median(draws.max(1))) / n


def letter_excess(tok) -> np.ndarray:
    """``(N, 26)``: each reference passage's share of distinct word-initial tokens per first letter minus the English
    share ``e_a`` that WIP's statistic subtracts (a WIP key's expected statistic on a domain is its letters' sum)."""
    from icw.reference import _token_ids
    from icw.vocab import vocabulary
    from icw.wip import english_initial_frequencies

    view = vocabulary(tok)
    indptr, ids = _token_ids(tok)
    word = view.is_word[ids]
    row = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    counts = np.zeros((len(indptr) - 1, 26))
    np.add.at(counts, (row[word], view.word_letter[ids][word].astype(np.int64)), 1)
    n = counts.sum(1, keepdims=True)
    return counts / np.maximum(n, 1) - english_initial_frequencies()


def _row(family: str, keys: str, domain: str, fpr: np.ndarray, n: int) -> list:
    return [family.upper(), keys, domain, len(fpr), n, f"{1 / n:.2%}", f"{fpr.mean():.2%}",
            f"{np.quantile(fpr, 0.9):.2%}", f"{fpr.max():.2%}", f"{noise_max(len(fpr), n, fpr.mean()):.2%}",
            f"{np.mean(fpr > 0.02):.0%}"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-keys", type=int, default=200)
    parser.add_argument("--families", default="tsp,wip,sa")
    parser.add_argument("--tokenizer", default="qwen3")
    parser.add_argument("--alpha", type=float, default=0.01)
    args = parser.parse_args(argv)

    from icw import ICWKey
    from icw.models import load_tokenizer
    from icw.screening import (
        DEFAULT_SCREEN,
        SCREENS,
        _labels,
        new_key,
        passes,
        reference_domains,
        reference_fires,
        screen,
    )

    started = time.time()
    tok = load_tokenizer(args.tokenizer)
    spec = SCREENS[DEFAULT_SCREEN]
    domains = reference_domains()
    labels, screening_half = _labels()
    external = external_domains()
    rows, lodo_rows, notes = [], [], []
    for family in [f.strip() for f in args.families.split(",") if f.strip()]:
        ftok = tok if family != "sa" else None
        seeds = range(5_000_000, 5_000_000 + args.num_keys)
        t0 = time.perf_counter()
        screen(family, 1, ftok)  # builds (or reads from $ICW_CACHE/screen) the family's reference tables
        tables_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        before = [ICWKey.create(family, s, ftok) for s in seeds]
        raw_s = (time.perf_counter() - t0) / len(before)
        t0 = time.perf_counter()
        after = [new_key(family, s, ftok) for s in seeds]
        screened_s = (time.perf_counter() - t0) / len(after)
        fires = {"before": np.array([reference_fires(k, ftok, args.alpha) for k in before]),
                 "after": np.array([reference_fires(k, ftok, args.alpha) for k in after])}
        accepted = np.mean([passes(f, spec) for f in np.array([reference_fires(k, ftok, spec.alpha) for k in before])])
        notes.append(f"{family.upper()}: acceptance rate r = {accepted:.2f} (draw-0 keys passing {spec.id}); mean draws "
                     f"tried {np.mean([k.draw + 1 for k in after]):.2f}; key creation {raw_s * 1e3:.1f} ms unscreened, "
                     f"{screened_s * 1e3:.1f} ms screened, once the reference tables are built ({tables_s:.1f} s here)")
        ext = {label: {name: external_fires(texts, keys, ftok, args.alpha) for name, texts in external.items()}
               for label, keys in (("before", before), ("after", after))}
        for d, name in enumerate(domains):
            audit = (labels == d) & ~screening_half
            for label in ("before", "after"):
                rows.append(_row(family, label, f"{name} (audit half)", fires[label][:, audit].mean(1), int(audit.sum())))
        for name, texts in external.items():
            for label in ("before", "after"):
                rows.append(_row(family, label, f"{name} (held out of the corpus)", ext[label][name].mean(1), len(texts)))
        excess = letter_excess(tok) if family == "wip" else None
        for d, name in enumerate(domains):  # leave one domain out: screened on the other four
            others = tuple(x for x in domains if x != name)
            kept = [screen(family, s, ftok, domains=others).key for s in seeds]
            mask = labels == d
            fpr = np.array([reference_fires(k, ftok, args.alpha)[mask].mean() for k in kept])
            if excess is not None:  # why: the key's summed letter excess on the left-out domain predicts its FPR
                mean_excess = excess[mask].mean(0)
                bias = np.array([sum(mean_excess[ord(c) - 65] for c in k.green_letters) for k in kept])
                top = "".join(chr(65 + a) for a in np.argsort(-mean_excess)[:4])
                notes.append(f"WIP, {name} left out: letters most in excess {top}; correlation of a kept key's summed "
                             f"excess with its FPR there {np.corrcoef(bias, fpr)[0, 1]:.2f}")
            lodo_rows.append(_row(family, "after, screened without it", f"{name} (all passages)", fpr, int(mask.sum())))
            lodo_rows.append(_row(family, "before", f"{name} (all passages)", fires["before"][:, mask].mean(1),
                                  int(mask.sum())))
    header = ["family", "keys", "domain", "keys (n)", "passages", "1 passage", "mean FPR", "90th pct", "max",
              "max from noise alone", "share > 2%"]
    print(f"alpha = {args.alpha:g}; tokenizer {args.tokenizer} for TSP and WIP; seeds 5,000,000 + i; "
          f"{spec.describe()}")
    print(markdown_table(header, rows))
    print("\nLeave one domain out (the screen rerun on the other four domains; FPR on all of the left-out domain):\n")
    print(markdown_table(header, lodo_rows))
    print()
    for note in notes:
        print(note)
    print(f"wall time {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
