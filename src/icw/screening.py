"""Key screening against a multi-domain reference corpus, and per-key false-positive figures.

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

Every decision is the verifier's own, computed from per-passage thresholds (:mod:`icw.reference`).

Example:
    >>> key = new_key("sa", seed=7)
    >>> key.screen, key.draw >= 0
    ('ref1', True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .calibration import clopper_pearson
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


@dataclass(frozen=True)
class Screen:
    """A key screen: keep the first draw whose empirical FPR at ``alpha`` is at most ``max_fpr`` on the
    screening half of every domain of the reference corpus.

    Args:
        id (`str`): the name keys record (``screen=ref1``).
        alpha (`float`): the significance level whose false-positive rate is screened.
        max_fpr (`float`): the largest empirical FPR a key may have on any domain's screening half.
        split (`str`): the half of the corpus screened on.
        max_draws (`int`): draws tried before giving up with an error.
        corpus (`str`): the reference corpus file (in ``icw/data``).
        corpus_sha256 (`str`): the prefix of its SHA-256 that the screen id pins: another corpus is another screen.
    """

    id: str
    alpha: float
    max_fpr: float
    split: str = "screen"
    max_draws: int = 200
    corpus: str = "reference_corpus.jsonl.gz"
    corpus_sha256: str = ""

    def describe(self) -> str:
        return (f"screen {self.id}: empirical FPR at alpha {self.alpha:g} at most {self.max_fpr:g} on the {self.split} "
                f"half of each of the {len(reference_domains())} domains of {self.corpus} "
                f"({', '.join(reference_domains())})")


#: The screens keys may record; ``ref1`` is the default (:func:`new_key`, ``icw key new``).
SCREENS = {"ref1": Screen("ref1", alpha=0.01, max_fpr=0.02, corpus_sha256="d9473dd76760c74f")}
DEFAULT_SCREEN = "ref1"


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
        if fires[mask].sum() > screen.max_fpr * mask.sum() + 1e-9:
            return False
    return True


@dataclass
class ScreenResult:
    """A screened key and how it was found.

    Args:
        key (`ICWKey`): the first draw that passed, recording ``draw`` and ``screen``.
        screen (`Screen`): the screen it passed.
        rejected (`list[int]`): the draws rejected before it.
        screen_calibration (`list[DomainCalibration]`): its FPR on each domain's screening half.
    """

    key: ICWKey
    screen: Screen
    rejected: list[int] = field(default_factory=list)
    screen_calibration: list[DomainCalibration] = field(default_factory=list)


def screen(family: str, seed: int | None, tokenizer: Any = None, *, screen: bool | str | Screen = True,
           domains: tuple[str, ...] | None = None, **params: Any) -> ScreenResult:
    """The first draw of the seed's stream (``draw = 0, 1, ...``) whose key passes ``screen``.

    Args:
        family (`str`): ``"tsp"``, ``"wip"`` or ``"sa"``.
        seed (`int`): the key seed.
        tokenizer: the tokenizer TSP/WIP keys are built for (object or name).
        screen: ``True`` (the default screen), a screen id or a :class:`Screen`.
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
    if spec.corpus_sha256 and not _corpus_sha().startswith(spec.corpus_sha256):
        raise ICWKeyError(f"screen {spec.id} pins reference corpus {spec.corpus_sha256}, but the bundled "
                          f"{spec.corpus} is {_corpus_sha()[:16]}: a changed corpus needs a new screen id")
    if seed is None or params.get("letters") is not None or params.get("secret") is not None:
        raise ICWKeyError("only seeded keys can be screened (their material is redrawn until it passes); "
                          "check a key with explicit material with icw key calibrate")
    tok = resolve_tokenizer(tokenizer) if fam != "sa" and tokenizer is not None else None
    base = ICWKey.create(fam, seed, tok, **params)
    rejected: list[int] = []
    for draw in range(spec.max_draws):
        key = ICWKey(**{**base.to_dict(), "draw": draw, "screen": spec.id})
        fires = reference_fires(key, tok, spec.alpha)
        if passes(fires, spec, domains):
            cal = reference_calibration(key, tok, split=spec.split, alpha=spec.alpha, fires=fires)
            return ScreenResult(key, spec, rejected, cal)
        rejected.append(draw)
    raise ICWKeyError(f"no draw of seed {seed} among {spec.max_draws} passes {spec.id} for this {fam} key "
                      "configuration: its parameters make most keys fire too often")


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
    screened keys.

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
    passed = sum(passes(reference_fires(ICWKey.create(family, 3_000_000_000 + i, tok, **params), tok, spec.alpha), spec)
                 for i in range(num_keys))
    return int(passed), num_keys
