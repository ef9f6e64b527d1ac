"""Per-key calibration: the false-positive rate of *one* key on human text, and key screening.

The verifiers' p-values are exact on average over keys (TSP, WIP) or secrets (SA): a randomly
drawn key fires on a fraction ``alpha`` of texts independent of it. One fixed key on one kind of
text can still be above or below ``alpha``. :func:`calibrate_keys` measures it: the key's
empirical FPR at ``alpha`` on a corpus of human passages, with a Clopper-Pearson interval
(:func:`clopper_pearson`; the passages are taken as independent draws of the domain).
:func:`screen_key` redraws a seed's key and keeps the first draw whose empirical FPR is at most
``max_fpr`` (screen on one half of a corpus and audit on the other: ``docs/detection-power.md``).

The default corpus is the bundled reference corpus (:mod:`icw.reference`, every passage with its provenance
and licence), all domains pooled: its audit half for :func:`calibrate_keys`, its screening half for
:func:`screen_key`. Calibrate on text like yours with ``corpus=``.

Example:
    >>> from icw import ICWKey
    >>> cal = calibrate_keys([ICWKey.create("sa", seed=1)], corpus=default_corpus()[:200])[0]
    >>> cal.num_texts, 0.0 <= cal.ci[0] <= cal.fpr <= cal.ci[1] <= 1.0
    (200, True)
"""

from __future__ import annotations

import gzip
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
#: Screening gives up after this many rejected seeds (a bound below alpha rejects nearly every key).
MAX_SCREEN_TRIES = 200


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
    name = "reference corpus, audit half (all domains)" if corpus is None else \
        str(corpus) if isinstance(corpus, (str, Path)) else f"{len(corpus)} passages"
    texts = list(default_corpus()) if corpus is None else read_corpus(corpus) if isinstance(corpus, (str, Path)) \
        else _check_texts(list(corpus), 10**9)
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


def screen_key(family: str, seed: int, tokenizer: Any = None, *, max_fpr: float = 0.02, alpha: float = DEFAULT_ALPHA,
               corpus: list[str] | str | Path | None = None, max_tries: int = MAX_SCREEN_TRIES,
               **params: Any) -> tuple[ICWKey, Calibration, list[Calibration]]:
    """Screening on your own corpus: the first draw of the seed's stream (``draw = 0, 1, ...``, as the default
    screen of :func:`icw.screening.screen` redraws) whose empirical FPR at ``alpha`` on ``corpus`` is at most
    ``max_fpr``. The key records its ``draw``, so it verifies anywhere; it names no screen, since the corpus is
    yours, and keys of different seeds never share material.

    Args:
        family (`str`): ``"tsp"``, ``"wip"`` or ``"sa"``.
        seed (`int`): the key seed.
        tokenizer (*optional*): the tokenizer TSP/WIP keys are built for (alias, folder or object).
        max_fpr (`float`, defaults to 0.02): the largest empirical FPR a key may have to be accepted.
        alpha (`float`, defaults to 0.01): the significance level the FPR is measured at.
        corpus (*optional*): human passages, or a corpus file; ``None``: the reference corpus' screening half.
        max_tries (`int`, defaults to 200): draws tried before giving up with an error.
        **params: key parameters passed to :meth:`ICWKey.create` (e.g. ``gamma=``).

    Returns:
        ``(key, its calibration, the calibrations of the draws rejected before it)``.

    Example:
        >>> key, cal, rejected = screen_key("sa", seed=3, max_fpr=0.05, corpus=default_corpus()[:100])
        >>> cal.fpr <= 0.05 and key.seed == 3 and key.draw == len(rejected)
        True
    """
    if not 0.0 < max_fpr <= 1.0:
        raise ValueError(f"max_fpr must lie in (0, 1], got {max_fpr!r}")
    tok = tokenizer
    if family != "sa" and tok is not None and not callable(tok):
        raise TypeError("tokenizer must be a Hugging Face tokenizer")
    texts = list(default_corpus("screen")) if corpus is None else corpus
    base = ICWKey.create(family, seed, tok if family != "sa" else None, **params)
    rejected: list[Calibration] = []
    batch = 8  # calibrate a few draws per pass over the corpus: most keys pass
    for start in range(0, max_tries, batch):
        keys = [base.with_params(draw=draw) for draw in range(start, min(start + batch, max_tries))]
        for key, cal in zip(keys, calibrate_keys(keys, texts, tok, alpha=alpha), strict=True):
            if cal.fpr <= max_fpr:
                return key, cal, rejected
            rejected.append(cal)
    raise ValueError(f"no draw of seed {seed} among {max_tries} has an empirical FPR at most {max_fpr:g} at "
                     f"alpha {alpha:g} on this corpus: raise --max-fpr (it should exceed alpha)")
