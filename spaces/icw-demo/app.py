"""ICW demo Space: watermark answers of a small LLM three ways and detect the watermark.

This file is the page, top to bottom; the work is done by its sibling modules (the rooms):

* ``demo_keys.py``: the key from the form fields or a pasted key string, what it contains;
* ``demo_generation.py``: all answers written as one streamed batch, the time estimate, Stop;
* ``demo_detection.py``: verdicts, highlights, the KGW detector, re-judging, attacks, the Detect tab;
* ``demo_common.py``: input limits, the answer columns, user errors, the models.

Tabs:

* **Watermark and detect**: one query answered three times side by side: plain (the query
  alone), ICW-instructed (the key's instruction + the query) and logit-biased (the query alone,
  decoded with the family's logit perturbation), plus transformers' KGW watermark as a baseline.
  The answers stream in, then show the verifier's z-score, exact p-value and verdict, with the
  units the verifier counted highlighted.
* **Detect**: paste any text and a key string; the same verdict and highlights.
* **Documents** (``demo_documents.py``): protect an uploaded PDF (its key's instruction hidden as invisible
  text) and screen pasted responses, each under its document's key, with Holm or BH over all of them.
* **About**: how ICW works.

Runs offline on a CPU with the SmolLM2-135M-Instruct model embedded in icw. Any transformers
causal LM can be used instead: ``ICW_SPACE_MODEL=<folder or Hub id>``, or the model dropdown
while online. ``ICW_SPACE_TRAINED_MODEL=<folder or Hub id>`` (``icw space --trained-model``) adds the
answer of a model trained with icw's recipe to column 2's prompt, beside the base model's. Run it locally with ``bash scripts/launch_space.sh``; upload this folder (every
file of it) as the root of a Hub Space to host it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The rooms sit next to this file: importable however app.py is started (as a script, on the Hub,
# or imported by path as the tests and benchmarks do).
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
try:
    import icw  # noqa: F401
except ModuleNotFoundError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(HERE.parents[1] / "src"))

import gradio as gr  # noqa: E402
from demo_common import (  # noqa: E402
    DEFAULT_NEW_TOKENS,
    DEFAULT_POOL_SIZE,
    DEFAULT_QUERY,
    EMBEDDED,
    EXAMPLES,
    KGW_HELP,
    KGW_TITLE,
    MAX_NEW_TOKENS,
    MAX_QUERY_CHARS,
    MAX_TEXT_CHARS,
    MODES,
    NO_TRAINED_MODEL,
    ONLINE_MODELS,
    TRAINED_HELP,
    TRAINED_TITLE,
    UserInputError,
    default_model,
    default_model_available,
    is_online,
)
from demo_detection import (  # noqa: E402
    COLORS,
    HIGHLIGHT_HELP,
    attack_answers,
    detect,
    highlight_help,
    rescore,
    send_to_detect,
)
from demo_documents import documents_tab  # noqa: E402
from demo_generation import request_stop, warm_up, watermark_and_detect  # noqa: E402
from demo_keys import (  # noqa: E402
    DELTA_HELP,
    FAMILY_CHOICES,
    GAMMA_RANGE,
    LENGTH_RANGE,
    NUM_LETTERS_RANGE,
    describe_key,
    field_changed,
    make_key,
    parse_key,
    pasted_key_fields,
    random_seed,
)

from icw.generation import DEFAULT_SAMPLING  # noqa: E402
from icw.keys import DEFAULT_DELTA  # noqa: E402
from icw.verification import DEFAULT_ALPHA  # noqa: E402

INTRO = ("# In-context watermarking (ICW)\nAsk a question; a small LLM answers it three ways (plus "
         "transformers' KGW watermark as a baseline) in one batch, and a secret key tells whether each "
         "answer carries the watermark. Everything runs on this machine.")
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
#: The fields a key is built from, in make_key's argument order (the model picks the tokenizer).
KEY_FIELDS = ("family", "seed", "gamma", "pool_size", "num_letters", "length", "model")
#: watermark_and_detect's inputs, in its argument order (also the /watermark_and_detect API's).
GENERATE_INPUTS = ("query", *KEY_FIELDS[:-1], "key_string", "delta", "model", "max_new_tokens", "alpha",
                   "temperature", "top_p", "greedy", "sample_seed", "kgw")


def build_demo(model_name: str | None = None) -> gr.Blocks:
    """The page: a title over three tabs, Watermark and detect, Detect and About."""
    model_name = model_name or default_model()
    online = is_online()
    with gr.Blocks(title="ICW: in-context watermarking demo") as demo:
        gr.Markdown(INTRO)
        with gr.Tabs() as tabs:
            with gr.Tab("Watermark and detect", id="generate"):
                ui = watermark_tab(model_name, online)
            demo.load(make_key, controls(ui, KEY_FIELDS), [ui.key_string, ui.material], api_name="make_key")
            with gr.Tab("Detect", id="detect"):
                detect_tab(ui, tabs, online)
            with gr.Tab("Documents", id="documents"):
                documents_tab()
            with gr.Tab("About", id="about"):
                gr.Markdown(ABOUT)
    return demo


# ------------------------------------------------------------------ tab 1: watermark and detect
def watermark_tab(model_name: str, online: bool) -> SimpleNamespace:
    """Key and run controls, the four answer columns, then attack, instruction and details; wired."""
    ui = SimpleNamespace()
    with gr.Row():
        with gr.Column(scale=3):
            query_and_key_fields(ui)
        with gr.Column(scale=2):
            model_and_run_fields(ui, model_name, online)
    with gr.Accordion("Sampling", open=False), gr.Row():
        sampling_fields(ui)
    gr.Examples([list(example) for example in EXAMPLES], [ui.query, ui.family, ui.seed],
                label="Examples (one per family; click one, then Generate)")
    with gr.Row():
        ui.generate = gr.Button("Generate and detect", variant="primary", elem_id="icw-generate", scale=4)
        ui.stop = gr.Button("Stop", variant="stop", elem_id="icw-stop", scale=1)
    ui.status = gr.Markdown(elem_id="icw-status")
    ui.legend = gr.Markdown(f"**Highlights:** {HIGHLIGHT_HELP['wip']}.", elem_id="icw-legend")
    with gr.Row(equal_height=True):  # the trained model's answer beside the base model's instructed one
        plain, instructed = (answer_column(*mode) for mode in MODES[:2])
        trained = answer_column("trained", TRAINED_TITLE, TRAINED_HELP, NO_TRAINED_MODEL)
        biased, kgw = answer_column(*MODES[2]), answer_column("kgw", f"4 · {KGW_TITLE}", KGW_HELP)
    ui.answers = [plain, instructed, biased, kgw, trained]  # in the order watermark_and_detect yields them
    with gr.Row():
        ui.send = gr.Button("Check answer 3 in the Detect tab", size="sm", elem_id="icw-send-to-detect")
    with gr.Accordion("Attack these answers and detect again", open=False):
        attack_fields(ui)
    with gr.Accordion("The ICW instruction given to answer 2", open=False):
        ui.instruction = gr.Textbox(show_label=False, lines=6, max_lines=12, interactive=False,
                                    elem_id="icw-instruction")
    with gr.Accordion("Details (JSON)", open=False):
        ui.details = gr.JSON(label="Verification results")
    wire_watermark_tab(ui)
    return ui


def query_and_key_fields(ui: SimpleNamespace) -> None:
    ui.query = gr.Textbox(DEFAULT_QUERY, label="Query (Enter starts a run)", placeholder="Ask anything, e.g. "
                          f"“{EXAMPLES[1][0]}”", lines=1, max_lines=4, max_length=MAX_QUERY_CHARS * 2,
                          elem_id="icw-query", info=f"Up to {MAX_QUERY_CHARS:,} characters are used.")
    ui.family = gr.Radio(FAMILY_CHOICES, value="wip", label="Watermark family", elem_id="icw-family")
    with gr.Row():
        ui.seed = gr.Number(value=42, precision=0, label="Key seed", minimum=0, elem_id="icw-seed",
                            info="The key is derived from the family, this seed and the settings.")
        ui.random_key = gr.Button("Random key", size="sm", elem_id="icw-random-key")
    ui.gamma = gr.Slider(*GAMMA_RANGE[:2], value=0.2, step=GAMMA_RANGE[2], label="TSP gamma (green fraction)",
                         visible=False, elem_id="icw-gamma")
    ui.pool_size = gr.Number(value=DEFAULT_POOL_SIZE, precision=0, minimum=0, visible=False, elem_id="icw-pool-size",
                             label="TSP candidate pool (tokens)",
                             info="The green list is written into the prompt; a 135M model's context cannot hold "
                                  "the paper's ~17,700 tokens, so T is drawn from the N lowest-id English tokens. "
                                  "0 = all of V_en.")
    ui.num_letters = gr.Slider(*NUM_LETTERS_RANGE, value=13, step=1, label="WIP green letters",
                                elem_id="icw-num-letters")
    ui.length = gr.Slider(*LENGTH_RANGE, value=18, step=1, label="SA secret length", visible=False,
                          elem_id="icw-length")


def model_and_run_fields(ui: SimpleNamespace, model_name: str, online: bool) -> None:
    models = model_choices(model_name, online)
    ui.model = gr.Dropdown(models, value=model_name, label="Model", allow_custom_value=online,
                           interactive=len(models) > 1 or online, elem_id="icw-model",
                           info="Any transformers model id (online)" if online else
                           "Offline: set ICW_SPACE_MODEL to a model folder to use another model.")
    ui.delta = gr.Slider(0.0, 15.0, value=DEFAULT_DELTA["wip"], step=0.5, elem_id="icw-delta",
                         label="Bias strength delta (answer 3)", info=DELTA_HELP["wip"])
    ui.max_new_tokens = gr.Slider(8, MAX_NEW_TOKENS, value=DEFAULT_NEW_TOKENS, step=8, label="Max new tokens",
                                  elem_id="icw-max-new-tokens")
    ui.alpha = gr.Number(value=DEFAULT_ALPHA, label="alpha (significance level)", step=0.005, elem_id="icw-alpha",
                         info="Watermarked when p ≤ alpha. Enter (or leaving the box) re-judges the answers already written.")
    ui.key_string = gr.Textbox(label="Key string (share it with the detector; paste one to reuse it)",
                               info="A pasted key sets the fields above when you leave the box or press Enter.",
                               elem_id="icw-key", buttons=["copy"], max_lines=2)
    ui.material = gr.Markdown(elem_id="icw-key-material")


def model_choices(model_name: str, online: bool) -> list[str]:
    """The model menu: the chosen model, the embedded one, and (online) a few small Hub models."""
    models = [model_name]
    if model_name != EMBEDDED and default_model_available():
        models.append(EMBEDDED)
    if online:
        models += [m for m in ONLINE_MODELS if m not in models]
    return models


def sampling_fields(ui: SimpleNamespace) -> None:
    ui.temperature = gr.Slider(0.1, 2.0, value=DEFAULT_SAMPLING["temperature"], step=0.05, label="Temperature",
                               elem_id="icw-temperature")
    ui.top_p = gr.Slider(0.1, 1.0, value=DEFAULT_SAMPLING["top_p"], step=0.01, label="Top-p", elem_id="icw-top-p")
    ui.greedy = gr.Checkbox(False, label="Greedy (ignore temperature and top-p)", elem_id="icw-greedy")
    ui.sample_seed = gr.Number(value=0, precision=0, label="Sampling seed", elem_id="icw-sample-seed",
                               info="Same seed and inputs = same answers; change it for new ones.")
    ui.kgw = gr.Checkbox(True, label="KGW baseline column", elem_id="icw-kgw",
                         info="Adds one row to the batch (a little slower).")


def answer_column(mode: str, title: str, help_text: str, placeholder: str = "") -> tuple[gr.HighlightedText,
                                                                                          gr.Markdown]:
    """One answer's column: what it is, the answer with its counted units highlighted, the verdict."""
    with gr.Column(min_width=220):
        gr.Markdown(f"### {title}\n{help_text}")
        answer = gr.HighlightedText(label=f"{title.split(' · ', 1)[1]} answer",
                                    color_map=COLORS["wip"] if mode != "kgw" else None, show_legend=mode != "kgw",
                                    elem_id=f"icw-answer-{mode}", elem_classes=["icw-answer"])
        verdict = gr.Markdown(placeholder, elem_id=f"icw-verdict-{mode}")
    return answer, verdict


def attack_fields(ui: SimpleNamespace) -> None:
    with gr.Row():
        ui.attack = gr.Radio([("Delete words", "deletion"), ("WordNet synonyms", "synonym")], value="deletion",
                             label="Attack (ICWBench's local attacks)", elem_id="icw-attack")
        ui.strength = gr.Slider(0.05, 0.9, value=0.3, step=0.05, label="Attack strength (fraction of words)",
                                elem_id="icw-attack-strength")
        ui.attack_seed = gr.Number(value=0, precision=0, label="Attack seed", elem_id="icw-attack-seed")
        ui.attack_button = gr.Button("Attack and re-detect", elem_id="icw-attack-button")
    ui.attack_result = gr.Markdown(elem_id="icw-attack-result")


def wire_watermark_tab(ui: SimpleNamespace) -> None:
    """The tab's events: key fields and key string stay in step; Generate, alpha, Attack and Stop."""
    fields = controls(ui, KEY_FIELDS)
    for name, field in zip(KEY_FIELDS, fields[:-1], strict=False):  # a field the user changes rebuilds the key
        field.change(field_changed(name), [ui.key_string, *fields], [ui.key_string, ui.material], api_name=False,
                     queue=False)
    ui.model.change(make_key, fields, [ui.key_string, ui.material], api_name=False, queue=False)
    ui.key_string.change(describe_key, [ui.key_string, ui.model], [ui.material, ui.instruction], api_name=False,
                         queue=False)
    # a key the user pasted or typed sets the fields when they leave the box or press Enter: events a key the app
    # writes never fires, so a rebuilt key arriving late cannot set back a field edited since (change would)
    gr.on([ui.key_string.blur, ui.key_string.submit], pasted_key_fields, [ui.key_string, *fields[:-1]], fields[:-1],
          api_name=False, queue=False)
    ui.key_string.change(key_legend, ui.key_string, ui.legend, api_name=False, queue=False)
    answer_boxes = [answer for answer, _ in ui.answers]
    icw_boxes = [*answer_boxes[: len(MODES)], answer_boxes[-1]]  # the columns the key's units are highlighted in
    ui.family.change(family_controls, ui.family, [ui.gamma, ui.pool_size, ui.num_letters, ui.length, ui.delta,
                                                  ui.legend, *icw_boxes],
                     api_name=False, queue=False)
    ui.random_key.click(random_seed, None, ui.seed, api_name=False, queue=False)
    answer_outputs = [ui.status, *[box for column in ui.answers for box in column], ui.details]
    gr.on([ui.generate.click, ui.query.submit], watermark_and_detect, controls(ui, GENERATE_INPUTS),
          answer_outputs, api_name="watermark_and_detect")
    # checked once typed in full (Enter, or leaving the box), not at every keystroke of "0.05"
    gr.on([ui.alpha.submit, ui.alpha.blur], rescore, [ui.details, ui.alpha],
          [*[verdict for _, verdict in ui.answers], ui.details], api_name="rescore")
    ui.attack_button.click(attack_answers, [ui.details, ui.attack, ui.strength, ui.alpha, ui.attack_seed],
                           ui.attack_result, api_name="attack")
    ui.stop.click(request_stop, None, None, api_name="stop", queue=False)


def controls(ui: SimpleNamespace, names: tuple[str, ...]) -> list[Any]:
    return [getattr(ui, name) for name in names]


def family_controls(family: str) -> tuple[Any, ...]:
    """A new family shows its own key fields, its default delta, its legend and highlight colours."""
    return (gr.update(visible=family == "tsp"), gr.update(visible=family == "tsp"),
            gr.update(visible=family == "wip"), gr.update(visible=family == "sa"),
            gr.update(value=DEFAULT_DELTA.get(family, 3.0), info=DELTA_HELP[family]),
            f"**Highlights:** {HIGHLIGHT_HELP[family]}.",
            *[gr.update(color_map=COLORS[family]) for _ in range(len(MODES) + 1)])  # + the trained column


def key_legend(key_string: str) -> Any:
    """The highlights' legend (shown once, above the answers) for the key in use; unchanged mid-edit."""
    try:
        return f"**Highlights:** {highlight_help(parse_key(key_string))}."
    except UserInputError:
        return gr.skip()


# ------------------------------------------------------------------------------- tab 2: detect
def detect_tab(ui: SimpleNamespace, tabs: gr.Tabs, online: bool) -> None:
    """Any text against a key string; also where tab 1's "Check answer 3" button lands."""
    gr.Markdown("Paste any text and the key string it should carry (for example one copied from the "
                "first tab). Only the key's holder can run this test.")
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.Textbox(label="Text to check", lines=8, elem_id="icw-detect-text",
                              info=f"Up to {MAX_TEXT_CHARS:,} characters are scored.")
        with gr.Column(scale=2):
            key = gr.Textbox(label="Key string", placeholder="icw:sa:seed=7,length=18", elem_id="icw-detect-key")
            tokenizer = gr.Dropdown(
                [("the key's own tokenizer", "key")] + [(t, t) for t in ("smollm2", "qwen3", "gpt2")],
                value="key", label="Tokenizer", allow_custom_value=online, elem_id="icw-detect-tokenizer",
                info="TSP and WIP keys only work with the tokenizer they were made for.")
            alpha = gr.Number(value=DEFAULT_ALPHA, label="alpha (significance level)", step=0.005,
                              elem_id="icw-detect-alpha", info="Watermarked when p ≤ alpha.")
            button = gr.Button("Detect", variant="primary", elem_id="icw-detect")
    status = gr.Markdown(elem_id="icw-detect-status")
    answer = gr.HighlightedText(label="Counted units", color_map=COLORS["wip"], show_legend=True,
                                elem_id="icw-detect-answer")
    verdict = gr.Markdown(elem_id="icw-detect-verdict")
    with gr.Accordion("Details (JSON)", open=False):
        details = gr.JSON(label="Verification result")
    button.click(detect, [text, key, tokenizer, alpha], [status, answer, verdict, details], api_name="detect")
    ui.send.click(send_to_detect, ui.details, [text, key, tabs], api_name=False, queue=False)


# ------------------------------------------------------------------------------------ launch
def launch_kwargs() -> dict[str, Any]:
    """Theme and CSS go to ``launch()`` in gradio 6; system fonts keep the page offline."""
    theme = gr.themes.Soft(font=["ui-sans-serif", "system-ui", "sans-serif"],
                           font_mono=["ui-monospace", "SFMono-Regular", "monospace"])
    return {"theme": theme, "css": CSS, "ssr_mode": False}


demo = build_demo()

if __name__ == "__main__":
    try:  # load the model (and warm its decoding thread) before serving so the first click does not wait
        warm_up(default_model())
    except UserInputError as err:
        print(f"icw demo: {err}", file=sys.stderr)
    demo.queue(default_concurrency_limit=1).launch(prevent_thread_lock=True, **launch_kwargs())
    print(f"ICW demo Space running at {demo.local_url}  (Ctrl+C to stop)", flush=True)
    demo.block_thread()
