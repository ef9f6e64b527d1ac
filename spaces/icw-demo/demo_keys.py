"""Key handling: a key from the form fields or a pasted key string, what it contains, and the KGW key.

The key fields and the key string box stay in step: every field change rebuilds the key string
(:func:`make_key`), and every key string change (typed, pasted or rebuilt) re-describes it
(:func:`describe_key`).
"""

from __future__ import annotations

import random
from typing import Any

from demo_common import UserInputError, get_tokenizer
from transformers import WatermarkingConfig

from icw.keys import FAMILIES, FAMILY_NAMES, ICWKey, ICWKeyError, KeyMismatchError
from icw.vocab import vocabulary

FAMILY_CHOICES = [(f"{FAMILY_NAMES[f]} ({f.upper()})", f) for f in FAMILIES]
DELTA_HELP = {
    "tsp": "Added to the logits of the green tokens T in answer 3 (0 = the family default).",
    "wip": "Added to the logits of word-initial tokens starting with a green letter in answer 3 (0 = default).",
    "sa": "Added, at each sentence start, to tokens opening the sentence with the secret's next letter "
          "(0 = default).",
}


def build_key(family: str, seed: Any, gamma: float, pool_size: Any, num_letters: Any, length: Any,
              model_name: str) -> ICWKey:
    """A key from the form fields; TSP and WIP keys are built over the model's tokenizer."""
    if family not in FAMILIES:
        raise UserInputError(f"Choose a watermark family ({', '.join(FAMILIES)}).")
    try:
        seed = int(seed)
    except (TypeError, ValueError):
        raise UserInputError("The seed must be a whole number, e.g. 42 (or click Random key).") from None
    params: dict[str, Any] = {}
    if family == "tsp":
        params["gamma"] = float(gamma)
        params["pool_size"] = int(pool_size) if pool_size not in (None, "", 0) else None
    elif family == "wip":
        params["num_letters"] = int(num_letters)
    else:
        params["length"] = int(length)
    tokenizer = get_tokenizer(model_name) if family != "sa" else None
    try:
        return ICWKey.create(family, seed, tokenizer, **params)
    except ICWKeyError as err:
        raise UserInputError(str(err)) from None


def parse_key(key_string: str) -> ICWKey:
    if not key_string or not key_string.strip():
        raise UserInputError("The key string is empty: build a key with the fields above or paste one "
                             "(it looks like icw:wip:seed=7,tokenizer=smollm2,vocab=...).")
    try:
        return ICWKey.from_string(key_string)
    except (ICWKeyError, ValueError, TypeError) as err:
        raise UserInputError(f"Malformed key string: {err}") from None


def check_key_tokenizer(key: ICWKey, tokenizer: Any, tab: str = "generate") -> None:
    """A TSP/WIP key made for another tokenizer: say how to fix it with the controls of ``tab``."""
    if key.family == "sa":
        return
    try:
        key.check_tokenizer(tokenizer)
    except KeyMismatchError:
        name = vocabulary(tokenizer).name
        fix = (f"clear the Key string box so a key is built for this model from the fields above, or pick a model "
               f"with the {key.tokenizer!r} tokenizer in the Model menu" if tab == "generate" else
               f"choose “the key's own tokenizer” (or {key.tokenizer!r}) in the Tokenizer menu")
        raise UserInputError(
            f"This {key.family.upper()} key was made for the {key.tokenizer!r} tokenizer, but the text is scored "
            f"with {name!r}. Token-based keys only work with the tokenizer they were made for: {fix}."
        ) from None


def key_material(key: ICWKey, tokenizer: Any = None) -> str:
    """Markdown summary of what a key contains, for people, not programs."""
    if key.family == "sa":
        return (f"**Secret** `{key.secret_string}` ({len(key.secret_string)} letters): sentence initials should "
                "spell it, in order.")
    if key.family == "wip":
        return (f"**Green letters** `{' '.join(key.green_letters)}` · **red letters** `{' '.join(key.red_letters)}`: "
                "words should start with green letters.")
    pool = "all English tokens (V_en)" if key.pool_size is None else f"the {key.pool_size} lowest-id English tokens"
    line = f"**gamma = {key.gamma}**: the green set T is a random {key.gamma:.0%} of {pool}"
    if tokenizer is not None:
        surfaces = vocabulary(tokenizer).surfaces
        green = key.token_set(tokenizer)
        sample = ", ".join(f"`{surfaces[i].strip() or surfaces[i]}`" for i in green[:12])
        line += f" ({len(green):,} tokens, e.g. {sample}, …)"
    return line + "."


def make_key(family: str, seed: Any, gamma: float, pool_size: Any, num_letters: Any, length: Any,
             model_name: str) -> tuple[str, str]:
    """Form fields -> (key string, key material markdown)."""
    try:
        key = build_key(family, seed, gamma, pool_size, num_letters, length, model_name)
        tok = get_tokenizer(model_name) if family == "tsp" else None
        return key.to_string(), key_material(key, tok)
    except UserInputError as err:
        return "", f"**Check the key:** {err}"


def describe_key(key_string: str, model_name: str) -> tuple[str, str]:
    """(key material, rendered instruction) for a typed or pasted key string; never raises,
    since the user may be mid-edit."""
    try:
        key = parse_key(key_string)
        tok = None
        if key.family != "sa":
            tok = get_tokenizer(model_name)
            check_key_tokenizer(key, tok)
        return key_material(key, tok if key.family == "tsp" else None), key.instruction(tok)
    except UserInputError as err:
        return f"**Check the key:** {err}", ""


def random_seed() -> int:
    """The Random key button's new seed."""
    return random.randrange(1_000_000)


def kgw_config(seed: int) -> WatermarkingConfig:
    """transformers' KGW defaults (gamma 0.25, delta 2.0, left-hash of 1 token), hashing key from the seed."""
    return WatermarkingConfig(hashing_key=15485863 + int(seed))
