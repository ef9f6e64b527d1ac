"""Detection and highlighting: verdicts, highlighted answers, the KGW detector, re-judging, attacks and the Detect tab."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import gradio as gr
import torch
from demo_common import (
    KGW_TITLE,
    MAX_TEXT_CHARS,
    MODE_TITLES,
    NO_TRAINED_MODEL,
    UserInputError,
    cap,
    friendly,
    get_model,
    get_tokenizer,
    parse_alpha,
    parse_int,
)
from demo_keys import check_key_tokenizer, kgw_config, parse_key
from scipy.stats import norm
from transformers import WatermarkDetector

from icw.keys import ICWKey
from icw.verification import DEFAULT_ALPHA, verify

ATTACK_NAMES = ("deletion", "synonym")
#: Legend colours per family: green = counted and key-aligned, red/grey = counted, not aligned.
COLORS = {"tsp": {"green token": "#22c55e", "other token": "#d1d5db"},
          "wip": {"green initial": "#22c55e", "red initial": "#fca5a5"},
          "sa": {"matched initial": "#22c55e", "unmatched initial": "#fca5a5"}}
HIGHLIGHT_HELP = {
    "tsp": "only English tokens of the key's candidate pool are eligible (each distinct token counts once, "
           "repeats are shown but not recounted); green = eligible token in the green set T; grey = eligible, "
           "not in T; unhighlighted text (punctuation, numbers, tokens outside the pool) is not scored",
    "wip": "only word-initial English tokens are eligible (each distinct one counts once); green = word starting "
           "with a green letter; red = word starting with a red letter; the rest is not scored",
    "sa": "only sentence initials are eligible; green = initial matched to the secret (longest common "
          "subsequence); red = unmatched initial; the rest is not scored",
}
KGW_OFF = "*KGW baseline off (tick “KGW baseline column” to compare).*"


# ------------------------------------------------------------------------------ rendering
def highlight_help(key: ICWKey | str) -> str:
    """What the highlights of ``key``'s family mean (TSP: which tokens were eligible under this key)."""
    family = key if isinstance(key, str) else key.family
    text = HIGHLIGHT_HELP[family]
    if not isinstance(key, str) and family == "tsp":
        pool = "all English tokens (V_en)" if key.pool_size is None else f"the {key.pool_size} lowest-id English tokens"
        text = text.replace("English tokens of the key's candidate pool", f"tokens among {pool}")
    return text


def format_p(p: float) -> str:
    """A p-value as people read it: 0.73, 0.012, 3.3e-05."""
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


def unscored(text: str) -> list[tuple[str, None]]:
    """``text`` as unlabelled word-sized pieces: they wrap like prose, where one long piece would break mid-word."""
    return [(word, None) for word in re.findall(r"\s*\S+|\s+", text)]


def highlighted(text: str, result: Any) -> gr.HighlightedText:
    """A ``gr.HighlightedText`` update: the text cut into (span, label) pairs (the verifier's
    counted units carry their label, the text between them ``None``) and the family's legend."""
    pieces: list[tuple[str, str | None]] = []
    pos = 0
    for h in sorted(result.highlights or [], key=lambda h: h.start):
        if h.start < pos:  # overlapping offsets (rare byte-level merges): keep the first
            continue
        end = h.end
        if result.family == "sa":  # show the whole first word, not only its letter
            end = re.match(r"\w*", text[h.end :]).end() + h.end
        pieces += unscored(text[pos : h.start])
        pieces.append((text[h.start : end], h.label))
        pos = end
    pieces += unscored(text[pos:])
    return gr.HighlightedText(value=pieces, color_map=COLORS[result.family])


def verdict_markdown(result: Any) -> str:
    if result.num_tokens_scored == 0:
        return f"**Nothing to score**: {result.note}. Write or paste a longer English text."
    verdict = "**Watermarked**" if result.is_watermarked else "**Not watermarked**"
    unit = {"tsp": "distinct English tokens", "wip": "distinct word-initial tokens", "sa": "sentence initials"}
    hit = {"tsp": "in the green set", "wip": "with a green initial", "sa": "matched to the secret"}
    lines = [
        f"### z = {result.z_score:.2f} · p = {format_p(result.p_value)}",
        f"{verdict} (p ≤ {result.alpha:g} means watermarked)",
        f"{result.num_aligned} of {result.num_tokens_scored} {unit[result.family]} {hit[result.family]} "
        f"(expected {result.null_mean:.1f} ± {result.null_sd:.1f} without the key)",
    ]
    disagreement = z_disagreement(result)
    if disagreement:
        lines.append(disagreement)
    if result.note:
        lines.append(f"*Note: {result.note}.*")
    return "\n\n".join(lines)


def z_disagreement(result: Any) -> str | None:
    """One sentence when the verdict (from the exact p-value) differs from what z alone suggests."""
    cut = float(norm.isf(result.alpha))
    if (result.z_score > cut) == bool(result.is_watermarked):
        return None
    side = "above" if result.z_score > cut else "below"
    return (f"*Why the verdict differs from z: z = {result.z_score:.2f} is {side} the normal curve's cut-off "
            f"{cut:.2f} for alpha = {result.alpha:g}, but the verdict follows the exact p-value "
            f"({format_p(result.p_value)}), which counts the {result.num_tokens_scored} scored units as they are "
            "instead of assuming a normal curve.*")


def result_summary(mode: str, text: str, result: Any) -> dict[str, Any]:
    data = result.to_dict()
    data.pop("highlights", None)
    return {"mode": mode, "text": text, **data}


# ------------------------------------------------------------------------------------ KGW
def kgw_detect(text: str, tok: Any, model_config: Any, seed: int, alpha: float) -> dict[str, Any]:
    """transformers' own ``WatermarkDetector`` on a text (repeated n-grams counted once).

    Its verdict is ``z > z_alpha`` (the one-sided normal quantile of ``alpha``) and its p-value the
    normal tail: an approximation for the discrete count of green tokens, unlike ICW's exact p.
    """
    ids = tok(text, add_special_tokens=False)["input_ids"]
    threshold = float(norm.isf(alpha))
    base = {"statistic": "z of the green-token count (KGW)", "null": "each scored token is green with prob. 0.25",
            "p_value_method": "normal approximation (transformers WatermarkDetector)", "z_threshold": threshold}
    if len(ids) < 2:
        return {**base, "z_score": 0.0, "p_value": 1.0, "is_watermarked": False, "num_tokens_scored": 0}
    detector = WatermarkDetector(model_config=model_config, device="cpu",
                                 watermarking_config=kgw_config(seed).to_dict(), ignore_repeated_ngrams=True)
    if detector.bos_token_id is None:  # e.g. Qwen: its BOS check compares to None and fails (no BOS in ids anyway)
        detector.bos_token_id = -1
    out = detector(torch.tensor([ids]), z_threshold=threshold, return_dict=True)
    return {**base, "z_score": float(out.z_score[0]), "p_value": float(out.p_value[0]),
            "is_watermarked": bool(out.prediction[0]), "num_tokens_scored": int(out.num_tokens_scored[0]),
            "num_green_tokens": int(out.num_green_tokens[0])}


def kgw_markdown(found: dict[str, Any]) -> str:
    if not found["num_tokens_scored"]:
        return "**Nothing to score**: KGW needs at least two tokens."
    verdict = "**Watermarked**" if found["is_watermarked"] else "**Not watermarked**"
    return "\n\n".join([
        f"### z = {found['z_score']:.2f} · p ≈ {format_p(found['p_value'])}",
        f"{verdict} (transformers' WatermarkDetector: z > {found['z_threshold']:.2f})",
        f"{found['num_green_tokens']} of {found['num_tokens_scored']} distinct token pairs green "
        f"(expected {0.25 * found['num_tokens_scored']:.1f} without the watermark)",
        "*Caveat: this p is the normal approximation transformers reports, not an exact test; "
        "short or repetitive texts make it too small.*",
    ])


# ------------------------------------------------------------------- the written answers
def render_rows(details: dict[str, Any], key: ICWKey, tok: Any, alpha: float, model: Any = None) -> list[Any]:
    """(highlighted text, verdict) for every answer in ``details``, verified at level ``alpha``."""
    outputs: list[Any] = []
    rows = details["answers"]
    results = verify([r["text"] for r in rows], key, tok if key.family != "sa" else None, alpha=alpha, highlights=True)
    for i, (row, result) in enumerate(zip(rows, results, strict=True)):
        rows[i] = result_summary(row["mode"], row["text"], result)
        outputs += [highlighted(row["text"], result), verdict_markdown(result)]
    if details.get("kgw") is not None:
        kgw = details["kgw"]
        found = kgw_detect(kgw["text"], tok, model.config if model is not None else get_model(details["model"])[0].config,
                           kgw["seed"], alpha)
        details["kgw"] = {**kgw, **found}
        outputs += [unscored(kgw["text"]), kgw_markdown(found)]
    else:
        outputs += [[], KGW_OFF]
    return outputs


def render_trained(details: dict[str, Any], key: ICWKey, alpha: float) -> list[Any]:
    """(highlighted text, verdict) of the trained model's answer (``details["trained"]``), verified at ``alpha`` with
    that model's tokenizer; without a trained model, what the column would show and how to make one."""
    trained = details.get("trained")
    if not trained:
        return [[], NO_TRAINED_MODEL]
    tok = get_model(trained["model"])[1]
    result = verify([trained["text"]], key, tok if key.family != "sa" else None, alpha=alpha, highlights=True)[0]
    details["trained"] = {**result_summary("trained", trained["text"], result), "model": trained["model"]}
    return [highlighted(trained["text"], result), verdict_markdown(result) + trained_model_note(trained["model"])]


def trained_model_note(model: str) -> str:
    """The line under the trained column's verdict naming the model, and its card where the folder has one."""
    card = Path(model) / "README.md"
    return f"\n\nModel: `{model}`" + (f" · its card: `{card}`" if card.is_file() else "")


def rescore(details: dict | None, alpha: Any):
    """New alpha: re-verify the answers already written (no new generation)."""
    if not details or not details.get("answers"):
        return (gr.skip(),) * 6
    try:
        key = parse_key(details["key"])
        alpha = parse_alpha(alpha)
        model, tok = get_model(details["model"])
        outputs = render_rows(details, key, tok, alpha, model) + render_trained(details, key, alpha)
    except UserInputError as err:
        friendly(err)
        return (gr.skip(),) * 6
    details["alpha"] = alpha
    return (*outputs[1::2], details)


def attack_answers(details: dict | None, attack: str, fraction: float, alpha: Any, attack_seed: Any = 0) -> str:
    """Attack every answer (word deletion or WordNet synonyms, the bench's attacks) and detect again."""
    from icw.bench.attacks import DeletionAttack, SynonymAttack

    try:
        if not details or not details.get("answers"):
            raise UserInputError("Generate answers first (the Generate and detect button): the attack rewrites them.")
        alpha = parse_alpha(alpha)
        attack_seed = parse_int(attack_seed, "attack seed")
        if attack not in ATTACK_NAMES:
            raise UserInputError(f"Choose an attack: {', '.join(ATTACK_NAMES)}.")
        fraction = float(fraction)
        make = DeletionAttack if attack == "deletion" else SynonymAttack
        try:
            apply = make(fraction, attack_seed)
        except ValueError as err:
            raise UserInputError(f"{err} (move the Attack strength slider).") from None
        key = parse_key(details["key"])
        model, tok = get_model(details["model"])
    except UserInputError as err:
        return friendly(err)
    rows = [(MODE_TITLES[r["mode"]], r["text"]) for r in details["answers"]]
    kgw = details.get("kgw")
    if kgw:
        rows.append((KGW_TITLE, kgw["text"]))
    attacked, _ = apply([text for _, text in rows])
    icw_rows = len(details["answers"])
    sa_tok = tok if key.family != "sa" else None
    before = verify([t for _, t in rows[:icw_rows]], key, sa_tok, alpha=alpha)
    after = verify(attacked[:icw_rows], key, sa_tok, alpha=alpha)
    table = ["| answer | z before | z after | p after | verdict after |", "|---|---:|---:|---:|---|"]
    for (title, _), b, a in zip(rows, before, after, strict=False):
        table.append(f"| {title} | {b.z_score:.2f} | {a.z_score:.2f} | {format_p(a.p_value)} | "
                     f"{'watermarked' if a.is_watermarked else 'not watermarked'} |")
    if kgw:
        b = kgw_detect(kgw["text"], tok, model.config, kgw["seed"], alpha)
        a = kgw_detect(attacked[-1], tok, model.config, kgw["seed"], alpha)
        table.append(f"| {KGW_TITLE} | {b['z_score']:.2f} | {a['z_score']:.2f} | ≈ {format_p(a['p_value'])} | "
                     f"{'watermarked' if a['is_watermarked'] else 'not watermarked'} |")
    what = {"deletion": f"deleted {fraction:.0%} of the words", "synonym":
            f"replaced {fraction:.0%} of the replaceable words by a WordNet synonym"}[attack]
    return (f"**Attack:** {what} (seed {attack_seed}) in every answer, then detected again at alpha = {alpha}.\n\n"
            + "\n".join(table) + "\n\n<details><summary>Attacked texts</summary>\n\n"
            + "\n\n".join(f"**{title}:** {text}" for (title, _), text in zip(rows, attacked, strict=True))
            + "\n\n</details>")


# --------------------------------------------------------------------------- the Detect tab
def send_to_detect(details: dict | None) -> tuple[str, str, Any]:
    """Copy the logit-biased answer and its key into the Detect tab and switch to it."""
    if not details or not details.get("answers"):
        gr.Warning("Generate answers first: this copies answer 3 and its key to the Detect tab.")
        return gr.skip(), gr.skip(), gr.skip()
    return details["answers"][-1]["text"], details["key"], gr.Tabs(selected="detect")


def detect(text: str, key_string: str, tokenizer_name: str, alpha: float = DEFAULT_ALPHA):
    """Verify any text against a key: (status, highlighted text, verdict, details)."""
    try:
        text = text or ""
        if not text.strip():
            raise UserInputError("Paste the text to check first.")
        text, notice = cap(text, MAX_TEXT_CHARS, "text")
        alpha = parse_alpha(alpha)
        key = parse_key(key_string)
        tok = None
        if key.family != "sa":
            tok = get_tokenizer(tokenizer_name if tokenizer_name and tokenizer_name != "key" else key.tokenizer)
            check_key_tokenizer(key, tok, "detect")
        result = verify(text, key, tok, alpha=alpha, highlights=True)
    except (UserInputError, ValueError, TypeError) as err:
        return friendly(err), [], "", None
    status = (notice + "\n\n" if notice else "") + f"Highlights: {highlight_help(key)}."
    return status, highlighted(text, result), verdict_markdown(result), result_summary("detect", text, result)
