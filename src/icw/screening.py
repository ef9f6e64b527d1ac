"""Key screening against a multi-domain reference corpus (or your own), and per-key false-positive figures.

The verifiers' p-values are exact over keys: for a text independent of the key, a key drawn uniformly
from all keys of its family fires with probability at most ``alpha``. One fixed key on one kind of
text can still fire more often: a WIP key whose letters are over-represented in licence text, a TSP
green list rich in a domain's jargon. The *per-key FPR* of a key ``k`` on a domain ``d`` is
``FPR_d(k) = P_{y ~ d}(p(y, k) <= alpha)``; its mean over uniform keys is at most ``alpha``, its
spread is what this module bounds.

**Screening.** A screen (:data:`SCREENS`) holds a reference corpus of human English in several
domains (``icw/data/reference_corpus.jsonl.gz``, built by ``scripts/make_reference_corpus.py``),
split into a *screening* half and an *audit* half. :func:`screen` draws the key's material from the
seed's stream, ``draw = 0, 1, 2, ...`` (:class:`~icw.keys.ICWKey`'s ``draw``), and keeps the first
draw whose empirical FPR at ``alpha`` is at most ``max_fpr`` on the screening half of *every* domain.
The key records ``draw`` and the screen's id; the audit half is never used to choose a key, so the
figures :func:`reference_calibration` reports on it are honest estimates for the key that was kept.

**What the p-values then mean.** Draws are i.i.d. uniform over all keys, so the kept key is uniform
over the set ``A`` of keys that pass the screen, a fraction ``r`` of all keys (the acceptance rate,
:func:`acceptance_rate`). The verifier's p-value ``p(y, k)`` is still computed over *all* keys: for a
text ``y`` independent of the key, ``P_{K ~ A}(p(y, K) <= u) <= P_{K ~ all}(p(y, K) <= u) / r <= u / r``.
So for a screened key ``p`` remains exactly the over-all-keys p-value, and it is a valid p-value under
the screened-key null up to the factor ``1 / r`` (``min(1, p / r)`` is valid); the per-key figures
(:func:`reference_calibration`, ``icw key calibrate``) are a separate, empirical statement: the
fraction of human passages of each domain on which *this* key fires, with a Clopper-Pearson interval.

**Your own corpus.** :func:`corpus_screen` builds a screen over your passages (all of them pooled): the same
redraws within the seed's stream, each draw's FPR measured by :func:`icw.calibration.calibrate_keys`. Its id,
``corpus-`` and 12 hex digits of a digest of the passages, ``alpha`` and ``max_fpr``, is what the key records;
:func:`acceptance_rate` measures its ``r``, which the bound above needs (``icw key new --max-fpr`` prints both).
The reference corpus' audit half then still reports the kept key's FPR per domain, on passages that did not choose it.

Every decision on the reference corpus is the verifier's own, computed from per-passage thresholds
(:mod:`icw.reference`); on your corpus it is :func:`icw.verify`'s.

Example:
    >>> key = new_key("sa", seed=7)
    >>> key.screen, key.draw >= 0
    ('ref1', True)
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .calibration import Calibration, calibrate_keys, clopper_pearson, load_corpus
from .keys import ICWKey, ICWKeyError, check_family
from .reference import (  # noqa: F401  (re-exported: the corpus and its decisions are part of this API)
    REFERENCE_CORPUS,
    ReferencePassage,
    _corpus_sha,
    _labels,
    reference_corpus,
    reference_domains,
    reference_fires,
)
from .verification import DEFAULT_ALPHA


@dataclass(frozen=True)
class Screen:
    """A key screen: keep the first draw whose empirical FPR at ``alpha`` is at most ``max_fpr`` on the
    screening half of every domain of the reference corpus, or on all of your corpus (``texts``,
    :func:`corpus_screen`).

    Args:
        id (`str`): the name keys record (``screen=ref1``).
        alpha (`float`): the significance level whose false-positive rate is screened.
        max_fpr (`float`): the largest empirical FPR a key may have on any domain's screening half.
        split (`str`): the half of the corpus screened on.
        max_draws (`int`): draws tried before giving up with an error.
        corpus (`str`): the reference corpus file (in ``icw/data``), or your corpus' path or description.
        corpus_sha256 (`str`): the prefix of its SHA-256 that the screen id pins: another corpus is another screen.
        texts (`tuple[str, ...]`, *optional*): your corpus' passages, screened pooled (``split`` is then ``"all"``);
            ``None``: the reference corpus, per domain.
    """

    id: str
    alpha: float
    max_fpr: float
    split: str = "screen"
    max_draws: int = 200
    corpus: str = "reference_corpus.jsonl.gz"
    corpus_sha256: str = ""
    texts: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    def describe(self) -> str:
        """One line: what the screen checks, on which passages."""
        if self.texts is not None:
            return (f"screen {self.id}: empirical FPR at alpha {self.alpha:g} at most {self.max_fpr:g} on the "
                    f"{len(self.texts)} passages of {self.corpus}")
        return (f"screen {self.id}: empirical FPR at alpha {self.alpha:g} at most {self.max_fpr:g} on the {self.split} "
                f"half of each of the {len(reference_domains())} domains of {self.corpus} "
                f"({', '.join(reference_domains())})")


#: The screens keys may record; ``ref1`` is the default (:func:`new_key`, ``icw key new``).
SCREENS = {"ref1": Screen("ref1", alpha=0.01, max_fpr=0.02, corpus_sha256="d9473dd76760c74f")}
DEFAULT_SCREEN = "ref1"
#: Uniform keys ``icw key new --max-fpr`` tries to measure a corpus screen's acceptance rate (its interval is printed).
CORPUS_ACCEPTANCE_KEYS = 100


def corpus_screen(corpus: list[str] | tuple[str, ...] | str | Path | None = None, *, max_fpr: float = 0.02,
                  alpha: float = DEFAULT_ALPHA, max_draws: int = 200) -> Screen:
    """A screen over your own corpus: a draw passes when its empirical FPR at ``alpha`` on all of ``corpus`` is at
    most ``max_fpr``. Its id, ``corpus-<12 hex digits>``, digests the passages, ``alpha`` and ``max_fpr``: the same
    corpus and bounds give the same id (and, for a seed, the same key), another corpus another id.

    Args:
        corpus: human passages, a corpus file (:func:`icw.calibration.read_corpus`), or ``None``: the reference
            corpus' screening half, every domain pooled.
        max_fpr (`float`, defaults to 0.02): the largest empirical FPR a key may have to be kept.
        alpha (`float`, defaults to 0.01): the significance level the FPR is measured at.
        max_draws (`int`, defaults to 200): draws tried before giving up with an error.

    Example:
        >>> spec = corpus_screen(["Bright blue birds began building big nests."] * 3, max_fpr=0.5)
        >>> spec.id.startswith("corpus-"), spec.split, len(spec.texts)
        (True, 'all', 3)
    """
    if not 0.0 < max_fpr <= 1.0:
        raise ValueError(f"max_fpr must lie in (0, 1], got {max_fpr!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    texts, name = load_corpus(corpus, split="screen")
    sha = hashlib.sha256("\x00".join(texts).encode("utf-8", "surrogatepass")).hexdigest()
    digest = hashlib.sha256(json.dumps([sha, alpha, max_fpr]).encode()).hexdigest()
    return Screen(f"corpus-{digest[:12]}", alpha, max_fpr, split="all", max_draws=max_draws, corpus=name,
                  corpus_sha256=sha[:16], texts=tuple(texts))


def get_screen(screen: bool | str | Screen) -> Screen:
    """The :class:`Screen` for ``True`` (the default), an id or a :class:`Screen`.

    Args:
        screen: ``True``, a screen id (e.g. ``"ref1"``) or a :class:`Screen`.
    """
    if isinstance(screen, Screen):
        return screen
    name = DEFAULT_SCREEN if screen is True else screen
    if name not in SCREENS:
        raise ICWKeyError(f"unknown screen {name!r}; known: {', '.join(SCREENS)}")
    return SCREENS[name]


@dataclass
class DomainCalibration:
    """A key's empirical FPR at ``alpha`` on one domain's half of the reference corpus.

    Args:
        domain (`str`): the domain.
        split (`str`): ``"screen"`` or ``"audit"``.
        num_texts (`int`): passages tested.
        num_false_positives (`int`): passages the key fires on.
        fpr (`float`): ``num_false_positives / num_texts``.
        ci (`tuple[float, float]`): the two-sided Clopper-Pearson interval at ``confidence``.
        alpha (`float`): the significance level.
        confidence (`float`): the interval's level.
    """

    domain: str
    split: str
    num_texts: int
    num_false_positives: int
    fpr: float
    ci: tuple[float, float]
    alpha: float
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def reference_calibration(key: ICWKey, tokenizer: Any = None, *, split: str = "audit", alpha: float = 0.01,
                          confidence: float = 0.95, fires: np.ndarray | None = None) -> list[DomainCalibration]:
    """The key's empirical FPR at ``alpha`` on each domain's ``split`` half of the reference corpus.

    The audit half (the default) never chose the key: its figures are unbiased for a screened key.

    Args:
        key (`ICWKey`): the key.
        tokenizer: as in :func:`reference_fires`.
        split (`str`): ``"audit"``, ``"screen"`` or ``"all"``.
        alpha (`float`): the significance level.
        confidence (`float`): of the Clopper-Pearson intervals.
        fires (`np.ndarray`, *optional*): :func:`reference_fires`'s output, if already computed.
    """
    if split not in ("audit", "screen", "all"):
        raise ValueError(f"split must be 'audit', 'screen' or 'all', got {split!r}")
    fires = reference_fires(key, tokenizer, alpha) if fires is None else fires
    domains, splits = _labels()
    out = []
    for d, name in enumerate(reference_domains()):
        mask = (domains == d) & (True if split == "all" else splits == (split == "screen"))
        n, k = int(mask.sum()), int(fires[mask].sum())
        out.append(DomainCalibration(name, split, n, k, k / n, clopper_pearson(k, n, confidence), alpha, confidence))
    return out


def passes(fires: np.ndarray, screen: Screen, domains: tuple[str, ...] | None = None) -> bool:
    """Whether a key with these reference decisions passes ``screen``: at most ``max_fpr`` of each domain's
    screening passages fire.

    Args:
        fires (`np.ndarray`): the key's :func:`reference_fires` at the screen's alpha.
        screen (`Screen`): the screen.
        domains (`tuple[str, ...]`, *optional*): only these domains (leave-one-domain-out audits).
    """
    labels, splits = _labels()
    names = reference_domains()
    half = splits == (screen.split == "screen")
    for d, name in enumerate(names):
        if domains is not None and name not in domains:
            continue
        mask = half & (labels == d)
        if not _within(int(fires[mask].sum()), int(mask.sum()), screen.max_fpr):
            return False
    return True


def _within(fired: int, num_texts: int, max_fpr: float) -> bool:
    """Whether ``fired`` of ``num_texts`` passages is an empirical FPR of at most ``max_fpr``."""
    return fired <= max_fpr * num_texts + 1e-9


def _judge(keys: list[ICWKey], tokenizer: Any, spec: Screen,
           domains: tuple[str, ...] | None = None) -> list[tuple[bool, list[DomainCalibration]]]:
    """Whether each key passes ``spec``, with its FPR on the passages screened (per domain, or your corpus pooled).

    Args:
        keys (`list[ICWKey]`): keys of one family and tokenizer.
        tokenizer: the tokenizer object (TSP, WIP) or ``None``.
        spec (`Screen`): the screen.
        domains (`tuple[str, ...]`, *optional*): as in :func:`passes` (reference screens only).
    """
    if spec.texts is None:
        out = []
        for key in keys:
            fires = reference_fires(key, tokenizer, spec.alpha)
            out.append((passes(fires, spec, domains),
                        reference_calibration(key, tokenizer, split=spec.split, alpha=spec.alpha, fires=fires)))
        return out
    return [(_within(c.num_false_positives, c.num_texts, spec.max_fpr),
             [DomainCalibration(spec.corpus, spec.split, c.num_texts, c.num_false_positives, c.fpr, c.ci, c.alpha,
                                c.confidence)])
            for c in calibrate_keys(keys, list(spec.texts), tokenizer, alpha=spec.alpha)]


@dataclass
class ScreenResult:
    """A screened key and how it was found.

    Args:
        key (`ICWKey`): the first draw that passed, recording ``draw`` and ``screen``.
        screen (`Screen`): the screen it passed.
        rejected (`list[int]`): the draws rejected before it.
        screen_calibration (`list[DomainCalibration]`): its FPR on each domain's screening half (on your corpus,
            pooled, for a :func:`corpus_screen`).
        rejected_calibration (`list[list[DomainCalibration]]`): the same for each rejected draw.
    """

    key: ICWKey
    screen: Screen
    rejected: list[int] = field(default_factory=list)
    screen_calibration: list[DomainCalibration] = field(default_factory=list)
    rejected_calibration: list[list[DomainCalibration]] = field(default_factory=list)


def screen(family: str, seed: int | None, tokenizer: Any = None, *, screen: bool | str | Screen = True,
           domains: tuple[str, ...] | None = None, **params: Any) -> ScreenResult:
    """The first draw of the seed's stream (``draw = 0, 1, ...``) whose key passes ``screen``.

    Args:
        family (`str`): ``"tsp"``, ``"wip"`` or ``"sa"``.
        seed (`int`): the key seed.
        tokenizer: the tokenizer TSP/WIP keys are built for (object or name).
        screen: ``True`` (the default screen), a screen id or a :class:`Screen` (e.g. :func:`corpus_screen`'s).
        domains (`tuple[str, ...]`, *optional*): screen on these domains only (leave-one-domain-out audits).
        **params: key parameters (``gamma``, ``pool_size``, ``num_letters``, ``length``).

    Example:
        >>> result = screen("sa", seed=3)
        >>> result.key.draw == len(result.rejected), result.key.screen
        (True, 'ref1')
    """
    from .models import resolve_tokenizer

    spec = get_screen(screen)
    fam = check_family(family)
    if spec.texts is None and spec.corpus_sha256 and not _corpus_sha().startswith(spec.corpus_sha256):
        raise ICWKeyError(f"screen {spec.id} pins reference corpus {spec.corpus_sha256}, but the bundled "
                          f"{spec.corpus} is {_corpus_sha()[:16]}: a changed corpus needs a new screen id")
    if seed is None or params.get("letters") is not None or params.get("secret") is not None:
        raise ICWKeyError("only seeded keys can be screened (their material is redrawn until it passes); "
                          "check a key with explicit material with icw key calibrate")
    tok = resolve_tokenizer(tokenizer) if fam != "sa" and tokenizer is not None else None
    base = ICWKey.create(fam, seed, tok, **params)
    rejected: list[int] = []
    rejected_cals: list[list[DomainCalibration]] = []
    batch = 1 if spec.texts is None else 8  # one pass over your corpus scores a few draws: most keys pass
    for start in range(0, spec.max_draws, batch):
        keys = [ICWKey(**{**base.to_dict(), "draw": draw, "screen": spec.id})
                for draw in range(start, min(start + batch, spec.max_draws))]
        for key, (ok, cal) in zip(keys, _judge(keys, tok, spec, domains), strict=True):
            if ok:
                return ScreenResult(key, spec, rejected, cal, rejected_cals)
            rejected.append(key.draw)
            rejected_cals.append(cal)
    raise ICWKeyError(f"no draw of seed {seed} among {spec.max_draws} passes {spec.id} for this {fam} key "
                      "configuration: its parameters make most keys fire too often"
                      + (" (raise --max-fpr: it should exceed alpha)" if spec.texts is not None else ""))


_screen = screen  # new_key's own ``screen`` argument shadows the function


def new_key(family: str, seed: int, tokenizer: Any = None, *, screen: bool | str | Screen | None = True,
            **params: Any) -> ICWKey:
    """A new key, screened by default: the first draw of the seed's stream that passes ``screen`` (:func:`screen`),
    recording ``draw`` and ``screen``; what ``icw key new`` and the demo Space hand out. ``screen=None`` (or
    ``False``) gives the seed's own draw, :meth:`ICWKey.create`'s, uniform over all keys.

    Args:
        family (`str`): ``"tsp"``, ``"wip"`` or ``"sa"``.
        seed (`int`): the key seed.
        tokenizer: the tokenizer TSP/WIP keys are built for (object or name).
        screen: ``True`` (the default screen, ``ref1``), a screen id, a :class:`Screen`, or ``None``.
        **params: key parameters (``gamma``, ``pool_size``, ``num_letters``, ``length``).

    Example:
        >>> from icw import new_key
        >>> new_key("sa", seed=42).to_string()
        'icw:sa:seed=42,length=18,screen=ref1'
    """
    if not screen:
        return ICWKey.create(family, seed, tokenizer, **params)
    return _screen(family, seed, tokenizer, screen=screen, **params).key


def acceptance_rate(family: str, tokenizer: Any = None, *, screen: bool | str | Screen = True, num_keys: int = 400,
                    **params: Any) -> tuple[int, int]:
    """``(passed, tried)``: how many of ``num_keys`` uniform keys (seeds from 3,000,000,000, draw 0) pass the
    screen; ``passed / tried`` estimates the acceptance rate ``r`` in the bound ``P(p <= u) <= u / r`` for
    screened keys (``min(1, p / r)`` is then a valid p-value; :func:`p_value_bound` says so in words).

    Args:
        family (`str`): the family.
        tokenizer: the tokenizer (TSP, WIP).
        screen: as in :func:`screen`.
        num_keys (`int`): keys tried.
        **params: key parameters.
    """
    from .models import resolve_tokenizer

    spec = get_screen(screen)
    tok = resolve_tokenizer(tokenizer) if family != "sa" and tokenizer is not None else None
    keys = [ICWKey.create(family, 3_000_000_000 + i, tok, **params) for i in range(num_keys)]
    passed = sum(ok for ok, _ in _judge(keys, tok, spec))
    return int(passed), num_keys


def p_value_bound(spec: Screen, passed: int, tried: int, confidence: float = 0.95) -> str:
    """One line: the screen's measured acceptance rate ``r`` (with its Clopper-Pearson interval) and what it does to
    a screened key's p-value, ``min(1, p / r)`` (``docs/statistics.md``).

    Args:
        spec (`Screen`): the screen.
        passed (`int`): uniform keys that passed it (:func:`acceptance_rate`).
        tried (`int`): uniform keys tried.
        confidence (`float`, defaults to 0.95): of the interval.

    Example:
        >>> p_value_bound(SCREENS["ref1"], 93, 100)[:41]
        'screen ref1 accepts r = 0.93 [0.86, 0.97]'
    """
    if not passed:
        return (f"screen {spec.id} accepted none of {tried} uniform keys: its acceptance rate r is below "
                f"{clopper_pearson(0, tried, confidence)[1]:.2g}, so p / r bounds nothing useful; raise max_fpr")
    r = passed / tried
    low, high = clopper_pearson(passed, tried, confidence)
    return (f"screen {spec.id} accepts r = {r:.2f} [{low:.2f}, {high:.2f}] of uniform keys ({passed} of {tried}); "
            f"a key it chose has valid p-values min(1, p / r) = min(1, {1 / r:.2f} p), min(1, {1 / low:.2f} p) at "
            f"the interval's low end (docs/statistics.md)")


def screen_key(family: str, seed: int, tokenizer: Any = None, *, max_fpr: float = 0.02, alpha: float = DEFAULT_ALPHA,
               corpus: list[str] | str | Path | None = None, max_tries: int = 200,
               **params: Any) -> tuple[ICWKey, Calibration, list[Calibration]]:
    """Deprecated (removed in the next release; also importable from :mod:`icw.calibration`, its old home):
    ``screen(family, seed, tokenizer, screen=corpus_screen(corpus, max_fpr=max_fpr, alpha=alpha))``, whose key
    records the screen's id.

    Args:
        family (`str`): ``"tsp"``, ``"wip"`` or ``"sa"``.
        seed (`int`): the key seed.
        tokenizer (*optional*): the tokenizer TSP/WIP keys are built for.
        max_fpr (`float`, defaults to 0.02): as in :func:`corpus_screen`.
        alpha (`float`, defaults to 0.01): as in :func:`corpus_screen`.
        corpus (*optional*): as in :func:`corpus_screen`.
        max_tries (`int`, defaults to 200): draws tried before giving up.
        **params: key parameters.

    Returns:
        ``(key, its calibration on the corpus, the calibrations of the draws rejected before it)``.
    """
    warnings.warn("icw.calibration.screen_key is deprecated and will be removed in the next release: use "
                  "icw.screening.screen(family, seed, tokenizer, screen=corpus_screen(corpus, max_fpr=..., "
                  "alpha=...)), whose key records the screen", DeprecationWarning, stacklevel=2)
    result = _screen(family, seed, tokenizer, screen=corpus_screen(corpus, max_fpr=max_fpr, alpha=alpha,
                                                                   max_draws=max_tries), **params)

    def calibration(draw: int, cal: DomainCalibration) -> Calibration:
        key = result.key.with_params(draw=draw).to_string()
        return Calibration(key, cal.alpha, cal.num_texts, cal.num_false_positives, cal.fpr, cal.ci, cal.confidence,
                           cal.domain)

    return (result.key, calibration(result.key.draw, result.screen_calibration[0]),
            [calibration(d, c[0]) for d, c in zip(result.rejected, result.rejected_calibration, strict=True)])
