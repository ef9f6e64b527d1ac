"""Per-key calibration: the false-positive rate of *one* key on human text.

The verifiers' p-values are exact on average over keys (TSP, WIP) or secrets (SA): a randomly
drawn key fires on a fraction ``alpha`` of texts independent of it. One fixed key on one kind of
text can still be above or below ``alpha``. :func:`calibrate_keys` measures it: the key's
empirical FPR at ``alpha`` on a corpus of human passages, with a Clopper-Pearson interval
(:func:`clopper_pearson`; the passages are taken as independent draws of the domain).
Choosing keys by that rate is :mod:`icw.screening`'s job (the default screen ``ref1``, or a screen over
your own corpus, :func:`icw.screening.corpus_screen`), which measures each draw here.

The default corpus is the bundled reference corpus (:mod:`icw.reference`, every passage with its provenance
and licence), its audit half, all domains pooled. Calibrate on text like yours with ``corpus=``.

Example:
    >>> from icw import ICWKey
    >>> cal = calibrate_keys([ICWKey.create("sa", seed=1)], corpus=default_corpus()[:200])[0]
    >>> cal.num_texts, 0.0 <= cal.ci[0] <= cal.fpr <= cal.ci[1] <= 1.0
    (200, True)
"""

from __future__ import annotations

import gzip
import importlib
import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .keys import ICWKey, as_key
from .multikey import _score_many
from .verification import DEFAULT_ALPHA, DEFAULT_NULL_KEYS, DEFAULT_PERMUTATIONS, _check_texts

DEFAULT_CONFIDENCE = 0.95


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The two-sided Clopper-Pearson interval of ``k`` successes in ``n`` trials: the ``(1 - c) / 2`` and
    ``(1 + c) / 2`` quantiles of ``Beta(k, n - k + 1)`` and ``Beta(k + 1, n - k)`` (0 and 1 at the ends).

    Args:
        k (`int`): successes (false positives).
        n (`int`): trials (passages).
        confidence (`float`): the interval's level ``c``.

    Example:
        >>> tuple(round(v, 4) for v in clopper_pearson(0, 100))
        (0.0, 0.0362)
    """
    from scipy.special import betaincinv  # the Beta quantile; lighter to import than scipy.stats

    tail = (1.0 - confidence) / 2
    low = 0.0 if k == 0 else float(betaincinv(k, n - k + 1, tail))
    high = 1.0 if k == n else float(betaincinv(k + 1, n - k, 1 - tail))
    return low, high


@dataclass
class Calibration:
    """The empirical false-positive rate of one key at ``alpha`` on ``num_texts`` human passages.

    ``ci`` is the two-sided Clopper-Pearson (exact binomial) interval at ``confidence``.

    Args:
        key (`str`): the key string that was calibrated.
        alpha (`float`): the significance level each passage was tested at.
        num_texts (`int`): human passages tested.
        num_false_positives (`int`): passages flagged as watermarked (``p_value <= alpha``).
        fpr (`float`): the empirical false-positive rate ``num_false_positives / num_texts``.
        ci (`tuple[float, float]`): the Clopper-Pearson interval of the FPR.
        confidence (`float`): the interval's confidence level.
        corpus (`str`): the corpus' name or path.
    """

    key: str
    alpha: float
    num_texts: int
    num_false_positives: int
    fpr: float
    ci: tuple[float, float]
    confidence: float
    corpus: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@lru_cache(maxsize=2)
def default_corpus(split: str = "audit") -> tuple[str, ...]:
    """The passages of one half of the bundled reference corpus, every domain pooled.

    Args:
        split (`str`, defaults to ``"audit"``): ``"audit"`` (never used to choose a key) or ``"screen"``.
    """
    from .reference import reference_corpus

    if split not in ("audit", "screen"):
        raise ValueError(f"split must be 'audit' or 'screen', got {split!r}")
    return tuple(p.text for p in reference_corpus() if p.split == split)


def read_corpus(path: str | Path) -> list[str]:
    """Passages of a corpus file: JSON Lines with a ``text`` field (``.jsonl``, optionally ``.gz``), or
    plain text with passages separated by blank lines.

    Args:
        path (`str` or `Path`): the corpus file.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such corpus file (JSON Lines with a 'text' field, or plain text with "
                         "passages separated by blank lines)")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            content = handle.read()
    except (UnicodeDecodeError, OSError) as err:
        raise ValueError(f"{path} is not UTF-8 text: {err}") from None
    if ".jsonl" in path.suffixes:
        texts = []
        for number, line in enumerate(content.splitlines(), 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{number}: not JSON ({err.msg})") from None
                if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                    raise ValueError(f"{path}:{number}: expected an object with a string 'text' field")
                texts.append(row["text"])
    else:
        texts = [p.strip() for p in content.replace("\r\n", "\n").split("\n\n") if p.strip()]
    if not texts:
        raise ValueError(f"{path} has no passages")
    return texts


def load_corpus(corpus: list[str] | tuple[str, ...] | str | Path | None, split: str = "audit") -> tuple[list[str], str]:
    """``(passages, name)`` of a corpus given as passages, a file (:func:`read_corpus`) or ``None`` (one half of the
    bundled reference corpus, every domain pooled: :func:`default_corpus`).

    Args:
        corpus: a list of passages, a corpus file, or ``None``.
        split (`str`, defaults to ``"audit"``): the reference corpus' half for ``corpus=None``.
    """
    if corpus is None:
        return list(default_corpus(split)), f"reference corpus, {split} half (all domains)"
    if isinstance(corpus, (str, Path)):
        return read_corpus(corpus), str(corpus)
    texts = _check_texts(list(corpus), 10**9)
    return texts, f"{len(texts)} passages"


def calibrate_keys(keys: ICWKey | str | list[ICWKey | str], corpus: list[str] | str | Path | None = None,
                   tokenizer: Any = None, *, alpha: float = DEFAULT_ALPHA, confidence: float = DEFAULT_CONFIDENCE,
                   num_null_keys: int = DEFAULT_NULL_KEYS) -> list[Calibration]:
    """Each key's empirical FPR at ``alpha`` on ``corpus`` (the reference corpus' audit half by default).

    The keys share one pass over the corpus (one family per call; each text tokenized once). A key
    "fires" on a passage when :func:`icw.verify` would call it watermarked (``p_value <= alpha``).

    Args:
        keys: one key or a list of keys of one family.
        corpus: a list of passages, a corpus file (see :func:`read_corpus`), or None for
            :func:`default_corpus`.
        tokenizer: as in :func:`icw.verify`.
        alpha: the significance level whose false-positive rate is measured.
        confidence: of the Clopper-Pearson interval.
        num_null_keys: SA Monte Carlo size, as in :func:`icw.verify`.
    """
    keys = [as_key(keys)] if isinstance(keys, (ICWKey, str, dict)) else [as_key(k) for k in keys]
    if not keys:
        raise ValueError("no keys to calibrate")
    if not 0.0 < alpha < 1.0 or not 0.0 < confidence < 1.0:
        raise ValueError(f"alpha and confidence must lie strictly between 0 and 1, got {alpha!r} and {confidence!r}")
    if len({k.family for k in keys}) > 1:
        raise ValueError("calibrate the keys of each family separately")
    texts, name = load_corpus(corpus)
    out = []
    fires = np.zeros(len(keys), dtype=np.int64)
    for start in range(0, len(texts), 500):  # bounded memory for large corpora
        _, p, _, _ = _score_many(texts[start:start + 500], keys, tokenizer, DEFAULT_PERMUTATIONS, num_null_keys,
                                 with_z=False)
        fires += (p <= alpha).sum(0)
    for key, k in zip(keys, fires, strict=True):
        out.append(Calibration(key.to_string(), alpha, len(texts), int(k), int(k) / len(texts),
                               clopper_pearson(int(k), len(texts), confidence), confidence, name))
    return out


def __getattr__(name: str) -> Any:
    """``screen_key``, deprecated: it moved to :mod:`icw.screening` (a screen over your corpus); removed in the next
    release."""
    if name == "screen_key":
        return importlib.import_module(".screening", __package__).screen_key
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
