"""Watermark keys: instantiation from seeds, serialization and instruction templates.

One :class:`ICWKey` drives everything: it renders the instruction shown to an LLM, builds
the logit bias that imitates that instruction, and parameterizes the verifier.

Key material is a deterministic function of ``(family, seed, parameters, tokenizer)``
(paper, Appendix C). Randomness comes from NumPy's PCG64 bit generator seeded through
``SeedSequence([family_code, seed])``, whose raw output NumPy keeps stable across versions
and platforms; subsets are the smallest raw draws, so no ``hash()`` or global RNG is used.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Any
from urllib.parse import quote

import numpy as np

from .keystring import PREFIX as _PREFIX
from .keystring import KeyStringError, parse_json_key, parse_key_string
from .templates import MATERIAL_FIELD as _MATERIAL_FIELD
from .templates import TEMPLATES
from .vocab import ALPHABET, VocabularyView, vocabulary

FAMILIES = ("tsp", "wip", "sa")
FAMILY_NAMES = {"tsp": "Token-Set Preference", "wip": "Word-Initial Preference", "sa": "Sentence Acrostic"}
#: The SA letter pool: the alphabet minus J, K, Q, V, X, Z (rare word-initial letters).
SA_POOL = "ABCDEFGHILMNOPRSTUWY"
#: Logit-bias strengths used for cold-start synthesis (paper Appendix A; SA from training).
DEFAULT_DELTA = {"tsp": 3.0, "wip": 3.0, "sa": 8.0}
#: Key seeds are per query; evaluation (ICWBench test rows) draws from ``[TEST_SEED_START, TRAIN_SEED_START)``
#: and training (ICWBench train rows, cold-start synthesis) from ``TRAIN_SEED_START`` up, so the pools are disjoint.
TEST_SEED_START = 0
TRAIN_SEED_START = 1_000_000
_FAMILY_CODE = {"tsp": 1, "wip": 2, "sa": 3}



class ICWKeyError(ValueError):
    """A key string, key parameter or family is invalid."""


class KeyMismatchError(ValueError):
    """A key is used with a tokenizer other than the one it was built for."""


def check_family(family: str) -> str:
    """The canonical (lower-case) family name, or :class:`ICWKeyError` naming the valid ones.

    Args:
        family (`str`): ``"tsp"``, ``"wip"`` or ``"sa"``, in any case and with surrounding spaces.
    """
    fam = str(family).strip().lower()
    if fam not in FAMILIES:
        raise ICWKeyError(f"unknown ICW family {family!r}; choose one of {', '.join(FAMILIES)}")
    return fam


#: No tokenizer has more tokens than this; a larger TSP pool_size is a typo, not a pool.
MAX_POOL_SIZE = 10_000_000
#: The most redraws a key may record (a screen gives up long before).
MAX_DRAW = 1_000_000
_SCREEN_ID = re.compile(r"[a-z][a-z0-9.-]{0,31}")


def _whole(name: str, value: Any, low: int, high: int) -> int:
    """``value`` as an int if it is a whole number in ``[low, high]`` (floats like 18.0 allowed)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ICWKeyError(f"key field {name} must be a whole number, got {value!r:.60}")
    if isinstance(value, (float, np.floating)) and not (math.isfinite(value) and float(value).is_integer()):
        raise ICWKeyError(f"key field {name} must be a whole number, got {value!r}")
    if not low <= value <= high:
        raise ICWKeyError(f"key field {name} must be between {low:,} and {high:,}, got {value!r:.60}")
    return int(value)


def _letters(name: str, value: Any) -> str:
    """Upper-cased ASCII letters; checked before upper-casing (``"straße".upper()`` is ``"STRASSE"``)."""
    if not isinstance(value, str) or not value.isascii() or not value.isalpha():
        raise ICWKeyError(f"key field {name} must be ASCII letters A-Z, got {value!r:.60}")
    return value.upper()


def _raw(family: str, seed: int, n: int, draw: int = 0) -> np.ndarray:
    """``n`` raw 64-bit draws of the PCG64 stream of ``(family, seed)``, or of ``(family, seed, draw)`` for ``draw > 0``."""
    entropy = [_FAMILY_CODE[family], int(seed)] + ([int(draw)] if draw else [])
    return np.random.PCG64(np.random.SeedSequence(entropy)).random_raw(n)


def _smallest(raw: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k smallest raw draws: a uniform random k-subset."""
    return np.argsort(raw, kind="stable")[:k]


#: Family-specific key fields and their defaults: a key of another family must leave them alone, so
#: that a parameter given to the wrong family is an error, not silently ignored.
_FAMILY_PARAMS = {"tsp": {"gamma": 0.2, "pool_size": None}, "wip": {"num_letters": 13, "letters": None},
                  "sa": {"length": 18, "secret": None}}


@dataclass(frozen=True)
class ICWKey:
    """A watermark key of one family.

    Args:
        family: ``"tsp"``, ``"wip"`` or ``"sa"``.
        seed: non-negative integer the material is drawn from (optional when ``letters`` or
            ``secret`` is given explicitly).
        gamma: TSP green-list fraction ``|T| = floor(gamma |P|)``.
        pool_size: TSP candidate pool ``P``: the ``pool_size`` lowest-id tokens of ``V_en``
            (BPE ids roughly follow merge frequency), for models whose context cannot hold a
            list of ~17,700 tokens. ``None`` means ``P = V_en``, as in the paper.
        num_letters: WIP green-letter count ``|L|`` (13 of 26 in the paper).
        length: SA secret length ``|S|`` (18 for evaluation, 18-20 for synthesis).
        letters: explicit WIP letters instead of a seeded draw.
        secret: explicit SA secret instead of a seeded draw.
        tokenizer: name of the tokenizer the key was built for (TSP and WIP).
        vocab: fingerprint of that tokenizer's vocabulary (see :class:`~icw.vocab.VocabularyView`).
        draw: which draw of the seed's stream the material comes from (0, as every key before screening, or
            ``k``: ``SeedSequence([family, seed, k])``, chosen by a screen).
        screen: the id of the screen the key passed (:mod:`icw.screening`), or ``None``: unscreened.

    Build keys with :meth:`create`, which fills in the tokenizer fields, or screened with :func:`icw.new_key`.

    Example:
        >>> key = ICWKey.create("sa", seed=7)
        >>> key.to_string()
        'icw:sa:seed=7,length=18'
        >>> ICWKey.from_string(key.to_string()) == key
        True
    """

    family: str
    seed: int | None = None
    gamma: float = 0.2
    pool_size: int | None = None
    num_letters: int = 13
    length: int = 18
    letters: str | None = None
    secret: str | None = None
    tokenizer: str | None = None
    vocab: str | None = None
    draw: int = 0
    screen: str | None = None
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "family", check_family(self.family))
        self._check_seed()
        self._refuse_other_families_params()
        if self.family == "tsp":
            self._normalize_tsp()
        elif self.family == "wip":
            self._normalize_wip()
        else:
            self._normalize_sa()
        self._check_tokenizer_fields()
        self._check_screen_fields()
        self._check_complete()

    # ------------------------------------------------------------------ validation
    def _set(self, name: str, value: Any) -> None:
        """Set a field of this frozen key (normalization in ``__post_init__`` only)."""
        object.__setattr__(self, name, value)

    def _check_seed(self) -> None:
        """``seed`` is None or a non-negative integer; NumPy integers become ``int``."""
        if self.seed is None:
            return
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ICWKeyError(f"seed must be a non-negative integer, got {self.seed!r:.60}")
        self._set("seed", int(self.seed))

    def _refuse_other_families_params(self) -> None:
        """Parameters of the other families keep their defaults: given to the wrong family, they are an error."""
        fam = self.family
        for owner, defaults in _FAMILY_PARAMS.items():
            for attr, default in defaults.items():
                if owner != fam and getattr(self, attr) != default:
                    raise ICWKeyError(f"{attr} is a {owner.upper()} key parameter, not a {fam.upper()} one "
                                      f"(got {attr}={getattr(self, attr)!r})")

    def _normalize_tsp(self) -> None:
        """TSP: ``gamma`` a float strictly between 0 and 1; ``pool_size`` None or a whole number in range."""
        gamma = self.gamma
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.number)) or not 0.0 < gamma < 1.0:
            raise ICWKeyError(f"TSP gamma must be a number strictly between 0 and 1, got {gamma!r:.60}")
        self._set("gamma", float(gamma))
        if self.pool_size is not None:
            self._set("pool_size", _whole("pool_size", self.pool_size, 10, MAX_POOL_SIZE))

    def _normalize_wip(self) -> None:
        """WIP: explicit ``letters`` upper-cased, sorted and distinct, and ``num_letters`` their count (1-25)."""
        if self.letters is not None:
            letters = "".join(sorted(set(_letters("letters", self.letters))))
            if len(letters) >= 26:
                raise ICWKeyError(f"WIP letters must be 1-25 distinct letters A-Z, got {self.letters!r:.60}")
            self._set("letters", letters)
            if self.num_letters not in (13, len(letters)):  # 13: the default, i.e. not given
                raise ICWKeyError(f"WIP num_letters={self.num_letters!r} contradicts letters={self.letters!r}")
        count = len(self.letters) if self.letters else self.num_letters
        self._set("num_letters", _whole("num_letters", count, 1, 25))

    def _normalize_sa(self) -> None:
        """SA: an explicit ``secret`` upper-cased (1-63 letters), and ``length`` its length (1-63)."""
        if self.secret is not None:
            secret = _letters("secret", self.secret)
            if not 1 <= len(secret) <= 63:
                raise ICWKeyError(f"SA secret must be 1-63 letters A-Z, got {self.secret!r:.80}")
            self._set("secret", secret)
            if self.length not in (18, len(secret)):  # 18: the default, i.e. not given
                raise ICWKeyError(f"SA length={self.length!r} contradicts secret={self.secret!r}")
        self._set("length", _whole("length", len(self.secret) if self.secret else self.length, 1, 63))

    def _check_tokenizer_fields(self) -> None:
        """``tokenizer`` and ``vocab`` are None or strings."""
        for name in ("tokenizer", "vocab"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise ICWKeyError(f"key field {name} must be a string, got {getattr(self, name)!r:.60}")

    def _check_screen_fields(self) -> None:
        """``draw`` a whole number (0 for explicit material) and ``screen`` None or a short id."""
        self._set("draw", _whole("draw", self.draw, 0, MAX_DRAW))
        if (self.letters or self.secret) and (self.draw or self.screen is not None):
            raise ICWKeyError("a key with explicit material (letters or secret) has no draws to screen")
        if self.screen is not None and not (isinstance(self.screen, str) and _SCREEN_ID.fullmatch(self.screen)):
            raise ICWKeyError(f"key field screen must be a screen id like 'ref1', got {self.screen!r:.60}")

    def _check_complete(self) -> None:
        """The key has its material's source (a seed, or explicit letters or secret) and, for TSP and WIP,
        its tokenizer."""
        fam = self.family
        explicit = self.letters if fam == "wip" else self.secret if fam == "sa" else None
        if self.seed is None and explicit is None:
            raise ICWKeyError(f"a {fam} key needs a seed" + (" or explicit material" if fam != "tsp" else ""))
        if fam in ("tsp", "wip") and not (self.tokenizer and self.vocab):
            raise ICWKeyError(f"a {fam} key needs the tokenizer it is used with: "
                              "build it with ICWKey.create(..., tokenizer=...)")

    # ----------------------------------------------------------------- construction
    @classmethod
    def create(cls, family: str, seed: int | None = None, tokenizer: Any = None, **params: Any) -> ICWKey:
        """Instantiate a key; ``tokenizer`` (an HF tokenizer) is required for TSP and WIP. This is the seed's own
        draw, uniform over all keys; :func:`icw.new_key` (``icw key new``) screens it (:mod:`icw.screening`)."""
        fam = check_family(family)
        if tokenizer is not None:
            view = vocabulary(tokenizer)
            params.update(tokenizer=view.name, vocab=view.fingerprint)
        elif fam in ("tsp", "wip"):
            raise ICWKeyError(f"a {fam} key is defined over a tokenizer's vocabulary: pass tokenizer=...")
        key = cls(fam, seed, **params)
        if fam == "tsp" and key.pool_size is not None:
            key.candidate_pool(tokenizer)  # a pool larger than V_en is refused now, not at first use
        return key

    # ------------------------------------------------------------------- material
    @property
    def green_letters(self) -> str:
        """WIP: the in-key letters ``L``, alphabetical."""
        self._need("wip")
        if self.letters is not None:
            return self.letters
        if "L" not in self._cache:  # read per text by the verifier: draw it once
            idx = _smallest(_raw("wip", self.seed, 26, self.draw), self.num_letters)
            self._cache["L"] = "".join(sorted(ALPHABET[i] for i in idx))
        return self._cache["L"]

    @property
    def red_letters(self) -> str:
        """WIP: the letters not in the key."""
        green = set(self.green_letters)
        return "".join(c for c in ALPHABET if c not in green)

    @property
    def secret_string(self) -> str:
        """SA: the secret ``S``."""
        self._need("sa")
        if self.secret is not None:
            return self.secret
        if "S" not in self._cache:
            raw = _raw("sa", self.seed, self.length, self.draw)
            self._cache["S"] = "".join(SA_POOL[int(r % len(SA_POOL))] for r in raw)
        return self._cache["S"]

    def check_tokenizer(self, tokenizer: Any) -> VocabularyView:
        """Return the tokenizer's vocabulary view, or raise if the key was built for another."""
        view = vocabulary(tokenizer)
        if self.vocab is not None and view.fingerprint != self.vocab:
            raise KeyMismatchError(
                f"this {self.family} key was built for tokenizer {self.tokenizer!r} (vocabulary {self.vocab}), "
                f"but the tokenizer given is {view.name!r} (vocabulary {view.fingerprint}). "
                f"Detect with the tokenizer the key was made with (icw.models.load_tokenizer({self.tokenizer!r}) "
                "or AutoTokenizer.from_pretrained of that model)."
            )
        return view

    def candidate_pool(self, tokenizer: Any) -> np.ndarray:
        """TSP: the candidate pool ``P`` (token ids, ascending)."""
        self._need("tsp")
        v_en = self.check_tokenizer(tokenizer).v_en
        if self.pool_size is not None and self.pool_size > len(v_en):
            raise ICWKeyError(f"TSP pool_size={self.pool_size:,} exceeds the {len(v_en):,} English tokens (V_en) of "
                              f"tokenizer {self.tokenizer!r}; choose at most {len(v_en):,}")
        return v_en if self.pool_size is None else v_en[: self.pool_size]

    def token_set(self, tokenizer: Any) -> np.ndarray:
        """TSP: the green token ids ``T``, ascending."""
        if "T" not in self._cache:
            pool = self.candidate_pool(tokenizer)
            size = math.floor(self.gamma * len(pool))
            self._cache["T"] = np.sort(pool[_smallest(_raw("tsp", self.seed, len(pool), self.draw), size)])
        else:
            self.check_tokenizer(tokenizer)
        return self._cache["T"]

    def _need(self, family: str) -> None:
        """Refuse to give material of another family than this key's."""
        if self.family != family:
            raise ICWKeyError(f"this is a {self.family} key, not a {family} key")

    # ------------------------------------------------------------- instructions
    def instruction(self, tokenizer: Any = None, template: str | None = None) -> str:
        """Render the ICW instruction; the paper's template unless ``template`` is given.

        Custom templates use ``str.format`` fields: ``{green_tokens}`` (TSP, joined with
        ``|``), ``{green_letters}``/``{red_letters}`` (WIP, comma-separated) and ``{secret}``.
        """
        template = TEMPLATES[self.family] if template is None else template
        if _MATERIAL_FIELD[self.family] not in template:
            raise ICWKeyError(f"a {self.family} template must contain {_MATERIAL_FIELD[self.family]}")
        fields: dict[str, Any] = {"gamma": self.gamma}
        if self.family == "tsp":
            if tokenizer is None:
                raise ICWKeyError("rendering a TSP instruction lists tokens: pass the tokenizer")
            surfaces = vocabulary(tokenizer).surfaces
            fields["green_tokens"] = "|".join(surfaces[i] for i in self.token_set(tokenizer))
        elif self.family == "wip":
            fields.update(green_letters=", ".join(self.green_letters), red_letters=", ".join(self.red_letters))
        else:
            fields["secret"] = self.secret_string
        try:
            return template.format(**fields)
        except (KeyError, IndexError, ValueError) as err:
            raise ICWKeyError(f"template has an unknown or malformed field: {err}") from None

    def prompt(self, query: str, tokenizer: Any = None, template: str | None = None) -> str:
        """The instructed query: the instruction prepended to the user's query."""
        return f"{self.instruction(tokenizer, template)}\n\n{query}"

    def describe(self) -> str:
        """A one-line human summary of the key material."""
        if self.family == "tsp":
            pool = "V_en" if self.pool_size is None else f"the {self.pool_size} lowest-id V_en tokens"
            return f"TSP: gamma={self.gamma} of {pool} ({self.tokenizer})"
        if self.family == "wip":
            return f"WIP: green letters {self.green_letters}"
        return f"SA: secret {self.secret_string}"

    # ------------------------------------------------------------ serialization
    def to_dict(self) -> dict[str, Any]:
        """The fields that define this key (defaults of other families omitted)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "_cache"}
        out = {"family": self.family, "seed": self.seed}
        out.update({k: data[k] for k in _FAMILY_PARAMS[self.family] if data[k] is not None})
        if self.family in ("wip", "sa") and out.get("letters" if self.family == "wip" else "secret"):
            out.pop("num_letters" if self.family == "wip" else "length", None)
        if self.seed is None:
            out.pop("seed")
        out.update({k: data[k] for k in ("tokenizer", "vocab") if data[k] is not None})
        # the screen record comes last, and only when there is one: older key strings are unchanged
        out.update({k: v for k, v in (("draw", self.draw), ("screen", self.screen)) if v})
        return out

    def to_json(self) -> str:
        """The :meth:`to_dict` fields as a JSON object (sorted keys)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_string(self) -> str:
        """``icw:<family>:name=value,...``; share it with anyone who should detect."""
        if "string" not in self._cache:  # results quote their key: build the string once
            parts = [f"{k}={quote(str(v), safe='')}" for k, v in self.to_dict().items() if k != "family"]
            self._cache["string"] = f"{_PREFIX}:{self.family}:{','.join(parts)}"
        return self._cache["string"]

    def __str__(self) -> str:
        return self.to_string()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ICWKey:
        """Build a key from :meth:`to_dict` output; unknown fields are refused."""
        if not isinstance(data, dict) or "family" not in data:
            raise ICWKeyError("a key needs at least a 'family' field")
        allowed = {f.name for f in fields(cls)} - {"_cache"}
        unknown = set(data) - allowed
        if unknown:
            raise ICWKeyError(f"unknown key field(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
        if data.get("draw") and data.get("screen") is None:  # `icw key new --max-fpr` before it named its screen
            warnings.warn("a key with a draw but no screen is deprecated (support ends in the next release): it "
                          "verifies as before; `icw key new --max-fpr ... --corpus ...` with the same seed, corpus "
                          "and bounds gives the same key with its screen id", DeprecationWarning, stacklevel=3)
        return cls(**data)

    @classmethod
    def from_string(cls, text: str) -> ICWKey:
        """Parse :meth:`to_string` or :meth:`to_json` output."""
        if isinstance(text, ICWKey):
            return text
        if not isinstance(text, str) or not text.strip():
            raise ICWKeyError(f"a key must be a non-empty string like 'icw:sa:seed=7,length=18', got {text!r}")
        text = text.strip()
        try:
            data = parse_json_key(text) if text.startswith("{") else parse_key_string(text)
        except KeyStringError as err:
            raise ICWKeyError(str(err)) from None
        return cls.from_dict(data)

    def with_params(self, **changes: Any) -> ICWKey:
        """A copy with some fields changed (validated like a new key)."""
        return replace(self, **changes)


def as_key(key: ICWKey | str | dict) -> ICWKey:
    """Accept a key object, its string or JSON form, or its dict.

    Args:
        key (`ICWKey`, `str` or `dict`): a key object, its string or JSON form, or its dict.
    """
    if isinstance(key, ICWKey):
        return key
    if isinstance(key, dict):
        return ICWKey.from_dict(key)
    return ICWKey.from_string(key)


def as_keys(keys: Any, n: int) -> list[ICWKey]:
    """One key per item: a single key is shared, a sequence must have ``n`` entries.

    Args:
        keys: one key (shared by every item) or a sequence of ``n`` keys, each in any form :func:`as_key`
            accepts.
        n (`int`): the number of items (texts) that need a key.
    """
    if keys is None:
        raise ICWKeyError("a key is required (an ICWKey, its string form, or one per text)")
    if isinstance(keys, (ICWKey, str, dict)):
        return [as_key(keys)] * n
    keys = list(keys)
    if len(keys) != n:
        raise ValueError(f"got {len(keys)} keys for {n} texts: pass one key, or one key per text")
    return [as_key(k) for k in keys]


@lru_cache(maxsize=512)
def scored_mask(key: ICWKey, view: VocabularyView) -> np.ndarray:
    """Tokens the verifier scores: TSP's pool ``P`` or WIP's ``V_en^word`` (boolean, vocab-sized)."""
    if key.family == "tsp":
        mask = np.zeros(view.size, dtype=bool)
        mask[key.candidate_pool(view)] = True
        return mask
    key.check_tokenizer(view)
    return view.is_word


@lru_cache(maxsize=512)
def green_mask(key: ICWKey, view: VocabularyView) -> np.ndarray:
    """Tokens the key favours: TSP's ``T``, or WIP's word-initial tokens with ``phi(v)`` in ``L``."""
    if key.family == "tsp":
        mask = np.zeros(view.size, dtype=bool)
        mask[key.token_set(view)] = True
        return mask
    key.check_tokenizer(view)
    letters = np.zeros(27, dtype=bool)  # index 26 (= -1) stays False for non-word tokens
    letters[[ord(c) - 65 for c in key.green_letters]] = True
    return letters[view.word_letter.astype(np.int64)] & view.is_word
