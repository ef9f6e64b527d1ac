"""English vocabulary views of a Hugging Face tokenizer.

Every family works over the English sub-vocabulary (paper, Appendix A):

* ``V_en``: tokens whose decoded surface is ASCII and contains at least one letter, minus
  special and added tokens;
* ``V_en^word``: the subset whose surface is a space followed by an ASCII letter
  (word-initial subwords), with ``phi(v)`` its upper-cased first letter.

A view is computed once per tokenizer (a few seconds for a 150k vocabulary), cached in memory and
on disk (``$ICW_CACHE/vocab``, keyed by a hash of the tokenizer's content), so a new process reads
it back in a few hundredths of a second.
Byte-level BPE (GPT-2, Qwen, SmolLM) and SentencePiece-style tokenizers (word starts
marked with U+2581) are supported.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import weakref
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#: Stand-in for any non-ASCII byte or character in a token surface: neither a letter nor
#: whitespace, so the sentence automaton treats it like any other symbol.
NON_ASCII = "\x80"
_ASCII_WS = " \t\n\r\x0b\x0c"
_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _byte_level_alphabet() -> dict[str, int]:
    """Inverse of the byte-to-printable-character table used by byte-level BPE."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


_BYTE_LEVEL = _byte_level_alphabet()


def _ascii_surface(raw: bytes | str) -> str:
    """Map a token's bytes (or text) to ASCII, every other byte/char becoming NON_ASCII."""
    if isinstance(raw, bytes):
        return "".join(chr(b) if b < 128 else NON_ASCII for b in raw)
    return "".join(c if ord(c) < 128 else NON_ASCII for c in raw)


class UnsupportedTokenizerError(ValueError):
    """A tokenizer whose decoder icw cannot map to token surfaces (e.g. WordPiece)."""


def _decoder_kind(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise TypeError(
            f"{type(tokenizer).__name__} is not a fast (tokenizers-backed) tokenizer; "
            "load it with AutoTokenizer.from_pretrained(...) so icw can read its vocabulary."
        )
    decoder = json.loads(backend.to_str()).get("decoder")
    spec = json.dumps(decoder)
    if '"ByteLevel"' in spec:
        return "byte_level"
    if '"Metaspace"' in spec or "\\u2581" in spec or "\u2581" in spec:
        return "metaspace"
    kind = decoder.get("type") if isinstance(decoder, dict) else None
    raise UnsupportedTokenizerError(
        f"tokenizer {tokenizer_name(tokenizer)!r} has a {kind or 'missing'} decoder; icw supports byte-level BPE "
        "tokenizers (GPT-2, Qwen, SmolLM, Llama 3) and SentencePiece-style ones (Metaspace or byte fallback: "
        "Llama 2, Mistral, T5), not WordPiece (BERT) or others. Use a tokenizer of the model that writes the text."
    )


def _surfaces(tokenizer, tokens: list[str], skipped: set[int]) -> list[str]:
    kind = _decoder_kind(tokenizer)
    out = []
    for i, tok in enumerate(tokens):
        if i in skipped or tok is None:
            out.append("")
        elif kind == "byte_level":
            out.append(_ascii_surface(bytes(_BYTE_LEVEL.get(c, 0x80) for c in tok)))
        else:
            m = _BYTE_FALLBACK.match(tok)
            out.append(_ascii_surface(bytes([int(m.group(1), 16)])) if m else _ascii_surface(tok.replace("\u2581", " ")))
    return out


@dataclass(eq=False)
class VocabularyView:
    """Per-token facts the keys, verifiers and logits processors need.

    Args:
        name: a short name for the tokenizer (the alias of an embedded one, else its path).
        fingerprint: 12 hex digits of SHA-256 over the token strings; keys record it so a
            detector can refuse a tokenizer the key was not built for.
        surfaces: decoded surface of every id, non-ASCII bytes mapped to ``NON_ASCII`` and
            special tokens mapped to ``""`` (they are skipped when text is decoded).
        is_en, is_word: boolean masks of ``V_en`` and ``V_en^word`` over the vocabulary.
        word_letter: ``phi(v)`` as 0-25 for word-initial tokens, -1 elsewhere.
        lead_letter: 0-25 when the surface, after leading ASCII whitespace, starts with a
            letter (the tokens that can open a sentence with that letter), else -1.
        lead_space: the surface starts with ASCII whitespace.
    """

    name: str
    fingerprint: str
    surfaces: list[str] = field(repr=False)
    is_en: np.ndarray = field(repr=False)
    is_word: np.ndarray = field(repr=False)
    word_letter: np.ndarray = field(repr=False)
    lead_letter: np.ndarray = field(repr=False)
    lead_space: np.ndarray = field(repr=False)

    @property
    def size(self) -> int:
        return len(self.surfaces)

    @cached_property
    def v_en(self) -> np.ndarray:
        """Ids of ``V_en``, ascending."""
        return np.flatnonzero(self.is_en)

    @cached_property
    def v_en_word(self) -> np.ndarray:
        """Ids of ``V_en^word``, ascending."""
        return np.flatnonzero(self.is_word)

    @cached_property
    def letter_fractions(self) -> np.ndarray:
        """``f_alpha``: the share of ``V_en^word`` whose first letter is each of A-Z."""
        counts = np.bincount(self.word_letter[self.is_word], minlength=26).astype(np.float64)
        return counts / counts.sum()

    def summary(self) -> dict:
        return {"tokenizer": self.name, "fingerprint": self.fingerprint, "vocab_size": self.size,
                "v_en": int(self.is_en.sum()), "v_en_word": int(self.is_word.sum())}


def tokenizer_name(tokenizer) -> str:
    """The embedded alias (``qwen3``, ``gpt2``, ``smollm2``) if icw loaded it, else its path or id.

    Args:
        tokenizer: a Hugging Face tokenizer.
    """
    return getattr(tokenizer, "icw_alias", None) or str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)


def special_ids(tokenizer) -> set[int]:
    """Ids that ``decode(..., skip_special_tokens=True)`` drops: ``all_special_ids`` and every added
    token marked ``special`` (SmolLM2's ``<filename>``, ``<gh_stars>``, ... are special added tokens
    that ``all_special_ids`` does not list).

    Args:
        tokenizer: a Hugging Face tokenizer.
    """
    ids = {int(i) for i in tokenizer.all_special_ids}
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return ids | {int(i) for i, token in decoder.items() if getattr(token, "special", False)}


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def vocabulary(tokenizer) -> VocabularyView:
    """Return the (cached) :class:`VocabularyView` of a fast tokenizer.

    Args:
        tokenizer: a fast Hugging Face tokenizer (BPE or SentencePiece).

    Example:
        >>> from icw.models import load_tokenizer
        >>> view = vocabulary(load_tokenizer("qwen3"))
        >>> len(view.v_en), len(view.v_en_word)
        (88492, 41547)
    """
    if isinstance(tokenizer, VocabularyView):
        return tokenizer
    if isinstance(tokenizer, str):
        from .models import resolve_tokenizer

        tokenizer = resolve_tokenizer(tokenizer)
    try:
        return _CACHE[tokenizer]
    except (KeyError, TypeError):
        pass
    key = _content_key(tokenizer)
    view = _load_cached(key, tokenizer) if key else None
    if view is None:
        view = _compute_view(tokenizer)
        if key:
            _store_cached(key, view)
    with contextlib.suppress(TypeError):  # tokenizers that cannot be weakly referenced are not cached
        _CACHE[tokenizer] = view
    return view


def _compute_view(tokenizer) -> VocabularyView:
    size = len(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
    special = special_ids(tokenizer)
    added = {int(i) for i in getattr(tokenizer, "added_tokens_decoder", {})}
    # Special tokens vanish from decoded text; added non-special tokens (e.g. "<think>") stay.
    surfaces = _surfaces(tokenizer, tokens, special)
    for i in added - special:
        surfaces[i] = _ascii_surface(str(tokenizer.added_tokens_decoder[i]))

    is_en = np.zeros(size, dtype=bool)
    is_word = np.zeros(size, dtype=bool)
    word_letter = np.full(size, -1, dtype=np.int8)
    lead_letter = np.full(size, -1, dtype=np.int8)
    lead_space = np.zeros(size, dtype=bool)
    for i, s in enumerate(surfaces):
        if not s:
            continue
        lead_space[i] = s[0] in _ASCII_WS
        stripped = s.lstrip(_ASCII_WS)
        if stripped and stripped[0].isascii() and stripped[0].isalpha():
            lead_letter[i] = ord(stripped[0].upper()) - 65
        if i in added or i in special or NON_ASCII in s or not any(c.isalpha() for c in s):
            continue
        is_en[i] = True
        if len(s) >= 2 and s[0] == " " and s[1].isalpha():
            is_word[i] = True
            word_letter[i] = ord(s[1].upper()) - 65

    from .models import tokenizer_fingerprint

    return VocabularyView(tokenizer_name(tokenizer), tokenizer_fingerprint(tokenizer, tokens), surfaces, is_en, is_word, word_letter, lead_letter,
                          lead_space)


# ----------------------------------------------------------------------------- disk cache
#: Bump when :class:`VocabularyView` or its derivation changes: older cache files are then ignored.
CACHE_FORMAT = 1
_ARRAYS = ("is_en", "is_word", "word_letter", "lead_letter", "lead_space")


def vocab_cache_dir() -> Path:
    """Where views are cached between processes: ``$ICW_CACHE/vocab`` (default ``~/.cache/icw/vocab``);
    ``ICW_VOCAB_CACHE=0`` turns the disk cache off."""
    from .models import cache_dir

    return cache_dir() / "vocab"


def _content_key(tokenizer) -> str | None:
    """SHA-256 of everything a view is derived from: the backend's full serialization (vocabulary, merges,
    added tokens, decoder), the special ids, the size and :data:`CACHE_FORMAT`. A tokenizer that changes
    in any of these gets a new key, so a stale view is never read. ``None``: not cacheable."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or os.environ.get("ICW_VOCAB_CACHE", "1") == "0":
        return None
    try:
        head = json.dumps([CACHE_FORMAT, len(tokenizer), sorted(special_ids(tokenizer)),
                           sorted(int(i) for i in getattr(tokenizer, "added_tokens_decoder", {}))])
        return hashlib.sha256(head.encode() + b"\0" + backend.to_str().encode("utf-8", "surrogatepass")).hexdigest()
    except Exception:  # an exotic tokenizer: compute its view every time rather than fail
        return None


def _load_cached(key: str, tokenizer) -> VocabularyView | None:
    path = vocab_cache_dir() / f"{key}.npz"
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in _ARRAYS}
            lengths, digest = data["lengths"], str(data["fingerprint"])
            joined = data["joined"].tobytes().decode("latin-1")  # surfaces are ASCII plus NON_ASCII
    except Exception:  # missing, or unreadable (truncated, not a zip...): computed again and rewritten
        return None
    if len(lengths) != len(tokenizer) or int(lengths.sum()) != len(joined):
        return None
    ends = np.cumsum(lengths).tolist()
    surfaces = [joined[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    return VocabularyView(tokenizer_name(tokenizer), digest, surfaces, **arrays)


def _store_cached(key: str, view: VocabularyView) -> None:
    """Write to a temporary file, then rename: a concurrent reader sees the old file or the whole new one."""
    folder = vocab_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{key[:12]}-", suffix=".npz")
        with os.fdopen(fd, "wb") as handle:
            joined = np.frombuffer("".join(view.surfaces).encode("latin-1"), dtype=np.uint8)
            np.savez(handle, joined=joined, fingerprint=np.array(view.fingerprint),
                     lengths=np.array([len(x) for x in view.surfaces], dtype=np.int32),
                     **{name: getattr(view, name) for name in _ARRAYS})
        os.replace(tmp, folder / f"{key}.npz")
    except (OSError, ValueError):  # a read-only or full disk: the view still works, it is only not cached
        with contextlib.suppress(OSError, UnboundLocalError):
            os.unlink(tmp)
