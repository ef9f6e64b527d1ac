"""Build ``src/icw/data/english_initials.json`` from gensim 4.4.0's human English: the distribution ``f_a`` of
the first letter of distinct English words, the reference the WIP verifier's decision statistic is standardized
by. Counted as the verifier counts: per passage, each distinct (case-folded) word once, then summed over passages.

Only these 26 counts ship, never the passages: ``benchmarks/_common.human_passages()``, gensim's 300 + 50 news
documents (``lee_background.cor``, ``lee.cor``, whose licence does not clearly allow redistribution) and the
Wikipedia paragraphs of more than 40 words of its shortened dump. The passages the package ships (the default
corpus of ``icw key calibrate`` and screening) are the reference corpus, each with its licence
(``scripts/make_reference_corpus.py``). Run from the repository root::

    python scripts/make_reference_data.py
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import human_passages  # noqa: E402

DATA = ROOT / "src" / "icw" / "data"
#: A word: ASCII letters not preceded by a letter, digit or apostrophe (as a word-initial token starts).
WORD = re.compile(r"(?<![A-Za-z0-9'])[A-Za-z]+")


def main() -> None:
    passages = human_passages()
    counts: Counter[str] = Counter()
    for _, text in passages:
        counts.update(w[0].upper() for w in {m.group(0).lower() for m in WORD.finditer(text)})
    total = sum(counts.values())
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    # add-one smoothing: a letter never seen (none here) must not get an expectation of zero
    freqs = {c: (counts[c] + 1) / (total + 26) for c in letters}
    meta = {"description": "first-letter distribution of distinct words per passage in human English "
                           "(gensim 4.4.0 test data: lee_background.cor, lee.cor, Wikipedia paragraphs > 40 words)",
            "script": "scripts/make_reference_data.py", "passages": len(passages), "words": total,
            "smoothing": "add-one", "frequencies": freqs}
    (DATA / "english_initials.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    print(f"{len(passages)} passages, {total} distinct words; wrote {DATA}/english_initials.json")


if __name__ == "__main__":
    main()
