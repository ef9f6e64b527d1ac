"""Key handling: a key from the form fields or a pasted key string, what it contains, and the KGW key.

The key fields and the key string box stay in step: a field change rebuilds the key string
(:func:`field_changed`, which keeps a key that already holds the changed field's value), a pasted key string sets the
fields to what it contains when the user leaves the box or presses Enter (:func:`pasted_key_fields`; Gradio's
``input`` event does not fire for a paste), and every key string change (typed, pasted or rebuilt) re-describes
it (:func:`describe_key`).
"""

from __future__ import annotations

import random
from typing import Any

import gradio as gr
from demo_common import UserInputError, get_tokenizer
from transformers import WatermarkingConfig

from icw.keys import FAMILIES, FAMILY_NAMES, ICWKey, ICWKeyError, KeyMismatchError
from icw.screening import new_key
from icw.vocab import vocabulary

FAMILY_CHOICES = [(f"{FAMILY_NAMES[f]} ({f.upper()})", f) for f in FAMILIES]
#: The ranges of the key fields' sliders (a pasted key outside them widens its slider).
GAMMA_RANGE = (0.05, 0.5, 0.05)
NUM_LETTERS_RANGE = (1, 25)
LENGTH_RANGE = (4, 40)
DELTA_HELP = {
    "tsp": "Added to the logits of the green tokens T in answer 3 (0 = the family default).",
    "wip": "Added to the logits of word-initial tokens starting with a green letter in answer 3 (0 = default).",
    "sa": "Added, at each sentence start, to tokens opening the sentence with the secret's next letter "
          "(0 = default).",
}


def build_key(family: str, seed: Any, gamma: float, pool_size: Any, num_letters: Any, length: Any,
              model_name: str) -> ICWKey:
    """A key from the form fields, screened against the reference corpus (``icw.screening``, as ``icw key new``
    does); TSP and WIP keys are built over the model's tokenizer."""
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
        return new_key(family, seed, tokenizer, **params)
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


def key_fpr(key: ICWKey, tokenizer: Any = None, alpha: float = 0.01) -> str:
    """Markdown: the key's calibrated false-positive rate per domain (audit half of the reference corpus, with
    95% Clopper-Pearson intervals), and whether it was screened."""
    from icw.screening import reference_calibration

    cals = reference_calibration(key, tokenizer, alpha=alpha)
    rates = " · ".join(f"{c.domain} {c.fpr:.1%} [{c.ci[0]:.1%}, {c.ci[1]:.1%}]" for c in cals)
    screened = (f"screened by {key.screen}, draw {key.draw}" if key.screen else
                "**not screened**: it may fire more often than alpha on some kinds of text")
    return (f"**False positives of this key** at alpha {alpha:g} on human text, per domain ({screened}; 95% "
            f"Clopper-Pearson intervals on passages never used to choose keys): {rates}.")


def make_key(family: str, seed: Any, gamma: float, pool_size: Any, num_letters: Any, length: Any,
             model_name: str) -> tuple[str, str]:
    """Form fields -> (key string, key material markdown)."""
    try:
        key = build_key(family, seed, gamma, pool_size, num_letters, length, model_name)
        tok = get_tokenizer(model_name) if family == "tsp" else None
        fpr = key_fpr(key, get_tokenizer(model_name) if family != "sa" else None)
        return key.to_string(), key_material(key, tok) + "\n\n" + fpr
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
        return (key_material(key, tok if key.family == "tsp" else None) + "\n\n" + key_fpr(key, tok),
                key.instruction(tok))
    except UserInputError as err:
        return f"**Check the key:** {err}", ""


def fields_match(key_string: str, family: str, seed: Any, gamma: Any, pool_size: Any, num_letters: Any,
                 length: Any) -> bool:
    """Whether ``key_string`` is a key the form fields describe (its family, seed and family parameters)."""
    try:
        key = ICWKey.from_string(key_string)
        if key.family != family or key.seed != int(seed):
            return False
        if family == "tsp":
            return abs(key.gamma - float(gamma)) < 1e-9 and (key.pool_size or 0) == int(pool_size or 0)
        return key.num_letters == int(num_letters) if family == "wip" else key.length == int(length)
    except (ICWKeyError, ValueError, TypeError):
        return False


#: The key fields, in :func:`make_key`'s order, and the family each family-specific field belongs to.
KEY_FIELD_NAMES = ("family", "seed", "gamma", "pool_size", "num_letters", "length")
_FIELD_FAMILY = {"gamma": "tsp", "pool_size": "tsp", "num_letters": "wip", "length": "sa"}


def key_holds(key_string: str, field: str, value: Any) -> bool:
    """Whether the key in the key box already has ``value`` for the key field ``field`` (or does not use that
    field: gamma for a WIP key). A key string that does not parse holds nothing."""
    try:
        key = ICWKey.from_string(key_string)
        if field == "family":
            return key.family == value
        if field == "seed":
            return key.seed == int(value)
        if key.family != _FIELD_FAMILY[field]:
            return True
        if field == "gamma":
            return abs(key.gamma - float(value)) < 1e-9
        if field == "pool_size":
            return (key.pool_size or 0) == int(value or 0)
        return (key.num_letters if field == "num_letters" else key.length) == int(value)
    except (ICWKeyError, ValueError, TypeError):
        return False


def field_changed(field: str):
    """The change handler of key field ``field``: (key string, key material).

    It rebuilds the key from all the fields only when the key box's key differs in THIS field: then the user
    changed it. A field set from a pasted key (:func:`pasted_key_fields`) finds the key already holding its
    value and keeps the paste (which may carry an explicit secret or letters no field describes), even while
    the paste's other fields are still on their way; comparing all fields at once would rebuild the key from
    such a half-updated form."""

    def changed(key_string: str, family: str, seed: Any, gamma: float, pool_size: Any, num_letters: Any,
                length: Any, model_name: str) -> tuple[Any, Any]:
        value = dict(zip(KEY_FIELD_NAMES, (family, seed, gamma, pool_size, num_letters, length), strict=True))[field]
        if key_holds(key_string, field, value):
            return gr.skip(), gr.skip()
        return make_key(family, seed, gamma, pool_size, num_letters, length, model_name)

    changed.__name__ = f"{field}_changed"
    return changed


def pasted_key_fields(key_string: str, family: str, seed: Any, gamma: Any, pool_size: Any, num_letters: Any,
                      length: Any) -> tuple[Any, ...]:
    """The user left the key box (or pressed Enter in it): when it holds a key the fields do not describe, one
    they pasted or typed, set the fields to it (:func:`key_fields`).

    The page calls it on the box's blur and submit events, which a key the app writes never fires: on ``change``
    a rebuilt key arriving after a newer field edit would set that field back. The fields' own change events then
    find a key that holds their values and keep it (:func:`field_changed`), so the paste wins, an explicit secret
    or letter set included."""
    if fields_match(key_string, family, seed, gamma, pool_size, num_letters, length):
        return (gr.skip(),) * 6
    return key_fields(key_string)


def _slider(value: float, low: float, high: float, step: float | None = None) -> Any:
    """A slider set to ``value``, its range widened (and step refined) so the value is kept as it is."""
    update: dict[str, Any] = {"value": value, "minimum": min(low, value), "maximum": max(high, value)}
    if step is not None and abs(round(value / step) * step - value) > 1e-9:
        update["step"] = 0.01
    return gr.update(**update)


def key_fields(key_string: str) -> tuple[Any, ...]:
    """A typed or pasted key string -> (family, seed, gamma, pool_size, num_letters, length) set to what
    the key contains; fields the key does not use, and every field while the string does not parse
    (mid-edit), stay as they are."""
    try:
        key = parse_key(key_string)
    except UserInputError:
        return (gr.skip(),) * 6
    tsp, wip, sa = (key.family == f for f in ("tsp", "wip", "sa"))
    return (key.family, key.seed,
            _slider(key.gamma, *GAMMA_RANGE) if tsp else gr.skip(),
            (key.pool_size or 0) if tsp else gr.skip(),
            _slider(key.num_letters, *NUM_LETTERS_RANGE) if wip else gr.skip(),
            _slider(key.length, *LENGTH_RANGE) if sa else gr.skip())


def random_seed() -> int:
    """The Random key button's new seed."""
    return random.randrange(1_000_000)


def kgw_config(seed: int) -> WatermarkingConfig:
    """transformers' KGW defaults (gamma 0.25, delta 2.0, left-hash of 1 token), hashing key from the seed."""
    return WatermarkingConfig(hashing_key=15485863 + int(seed))
