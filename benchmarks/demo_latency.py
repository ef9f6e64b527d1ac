"""Demo Space latency and detection: one click of "Generate and detect", timed and judged.

Default mode, timed side by side in one run for the model in fp32 and int8 (the Space's
default on a CPU: ``demo_common.quantize_int8``), medians over ``--repeats``:

* **plain step**: transformers' ``generate`` on the click's four prompts as one batch, no
  logits processor, per decoding step (the total minus a 1-token run, i.e. without the prompt);
* **watermarked step**: the Space's ``generate_batch`` on the same batch (the ICW bias on row
  3, transformers' KGW on row 4, the token streamer), per decoding step; goal: <= 1.1x plain;
* **click**: the Space's Generate callback ``watermark_and_detect`` with the page's defaults
  (query, key, sampling, max new tokens, alpha), end to end as the Space runs it: input checks,
  prompts, the streamed batch and the four verdicts. "first" is the first click after loading
  the model (nothing warmed up), then the median of the next clicks. Goal: < 10 s on the
  project's idle 2-core CPU.

Greedy steps are forced to ``--max-new-tokens`` tokens (``min_new_tokens``) so both sides write
the same amount. ``--sequential`` adds the three ICW answers written one after another (what
the Space did before it wrote them as one batch).

``--detection`` instead runs the click with each family's defaults on ``--seeds`` key seeds (the
sampling seed = the key seed) and prints, per family and answer, the share detected at the
page's alpha, and the median distinct-trigram ratio of the answers (1.0 = no phrase repeated;
a degenerate "an answer in an answer in ..." scores far lower). ``--texts FILE`` saves the
answers (JSON lines) to read.

    OMP_NUM_THREADS=2 python benchmarks/demo_latency.py                      # embedded SmolLM2
    OMP_NUM_THREADS=2 python benchmarks/demo_latency.py --detection --family tsp --seeds 20
    python benchmarks/demo_latency.py --quick                                # tiny random model, smoke run
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table, median_time  # noqa: E402

APP = Path(__file__).resolve().parents[1] / "spaces" / "icw-demo" / "app.py"


def load_app():
    """Import the Space's app.py (it builds its page on import; no server is started). It also puts
    the Space's folder on ``sys.path``, so its rooms (``demo_generation``, ...) import after it."""
    if "icw_space_app" not in sys.modules:
        spec = importlib.util.spec_from_file_location("icw_space_app", APP)
        module = importlib.util.module_from_spec(spec)
        sys.modules["icw_space_app"] = module
        spec.loader.exec_module(module)
    return sys.modules["icw_space_app"]


def page_defaults(app: Any, model_name: str) -> dict[str, Any]:
    """The Generate callback's inputs as the page starts (what a first click without typing sends)."""
    import gradio as gr

    with gr.Blocks():
        ui = app.watermark_tab(model_name, online=False)
    return {name: field.value for name, field in zip(app.GENERATE_INPUTS, app.controls(ui, app.GENERATE_INPUTS),
                                                     strict=True)}


def click(inputs: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """One click: (seconds from the call to the last update, the run's details)."""
    from demo_generation import watermark_and_detect

    start = time.perf_counter()
    *_, last = watermark_and_detect(*inputs.values())  # GENERATE_INPUTS is its argument order
    seconds = time.perf_counter() - start
    if last[-1] is None:
        raise RuntimeError(f"the click failed: {last[0]}")
    return seconds, last[-1]


def distinct_trigrams(text: str) -> float:
    """Distinct word trigrams / trigrams: 1.0 when no three-word phrase repeats."""
    words = text.split()
    grams = [tuple(words[i:i + 3]) for i in range(len(words) - 2)]
    return len(set(grams)) / len(grams) if grams else 1.0


def latency(args: argparse.Namespace, app: Any, model: Any, tok: Any, name: str) -> None:
    import torch
    from demo_common import _MODELS, quantize_int8
    from demo_generation import batch_rows, generate_batch
    from demo_keys import build_key, kgw_config

    from icw.generation import generate_responses

    inputs = page_defaults(app, name)
    key = build_key(*(inputs[f] for f in app.KEY_FIELDS[:-1]), name)
    n = args.max_new_tokens
    rows, prompts = batch_rows(tok, inputs["query"], key, kgw=True)
    tok.padding_side = "left"
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    start = time.perf_counter()
    int8 = quantize_int8(model)
    quantize_seconds = time.perf_counter() - start
    models = {"fp32": model, "int8": int8}

    def plain(m: Any, tokens: int) -> None:
        with torch.inference_mode():
            m.generate(**enc, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                       pad_token_id=tok.pad_token_id)

    def watermarked(m: Any, tokens: int) -> None:
        for _ in generate_batch(m, tok, inputs["query"], key, max_new_tokens=tokens,
                                sampling={"do_sample": False, "min_new_tokens": tokens}, kgw=kgw_config(key.seed)):
            pass

    def sequential(m: Any) -> None:
        for mode in ("plain", "instruction", "bias"):
            generate_responses(m, tok, [inputs["query"]], key if mode != "plain" else None, mode, max_new_tokens=n,
                               batch_size=1, generation_kwargs={"do_sample": False, "min_new_tokens": n})

    results: dict[str, dict[str, float]] = {}
    for label, m in models.items():
        _MODELS[name] = (m, tok)  # the Space's model cache: the click below uses this one
        first, _ = click(inputs)
        clicks = [click(inputs)[0] for _ in range(args.repeats)]
        per_step = {}
        for kind, fn in (("plain", plain), ("watermarked", watermarked)):
            one = median_time(lambda fn=fn, m=m: fn(m, 1), args.repeats)[0]
            full = median_time(lambda fn=fn, m=m: fn(m, n), args.repeats)[0]
            per_step[kind] = (full - one) / (n - 1)
        results[label] = {"first click": first, "click": statistics.median(clicks), **per_step}
        if args.sequential:
            results[label]["sequential"] = median_time(lambda m=m: sequential(m), 1)[0]
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"{name}, {inputs['family'].upper()} key, page defaults ({inputs['max_new_tokens']} new tokens, "
          f"{'KGW on' if inputs['kgw'] else 'KGW off'}), batch of {len(rows)} rows, prompt {enc['input_ids'].shape[1]} "
          f"tokens; steps over {n} forced tokens; median of {args.repeats}; {os.cpu_count()} CPUs, torch threads "
          f"{torch.get_num_threads()}, load average {load[0]:.1f}; int8 quantization took {quantize_seconds:.1f} s")
    table = []
    for label, r in results.items():
        table.append([label, f"{1000 * r['plain']:.0f}", f"{1000 * r['watermarked']:.0f}",
                      f"{r['watermarked'] / r['plain']:.2f}x", f"{r['first click']:.1f}", f"{r['click']:.1f}",
                      f"{results['fp32']['click'] / r['click']:.2f}x"]
                     + ([f"{r['sequential']:.1f}"] if args.sequential else []))
    print(markdown_table(["weights", "plain step ms", "watermarked step ms", "watermarked / plain",
                          "first click s", "click s", "click speed-up vs fp32"]
                         + (["3 answers one after another s"] if args.sequential else []), table))


def detection(args: argparse.Namespace, app: Any, model: Any, tok: Any, name: str) -> None:
    from demo_common import _MODELS, int8_enabled, quantize_int8

    from icw.keys import DEFAULT_DELTA

    label = "int8" if int8_enabled() else "fp32"
    _MODELS[name] = (quantize_int8(model) if label == "int8" else model, tok)
    defaults = page_defaults(app, name)
    texts: list[str] = []
    table = []
    for family in args.family or ("tsp", "wip", "sa"):
        detected: dict[str, list[bool]] = {}
        trigrams: dict[str, list[float]] = {}
        seconds = []
        for seed in range(args.seeds):
            inputs = {**defaults, "family": family, "seed": seed, "sample_seed": seed, "delta": DEFAULT_DELTA[family]}
            took, details = click(inputs)
            seconds.append(took)
            rows = [(r["mode"], r["text"], r["is_watermarked"]) for r in details["answers"]]
            if details.get("kgw"):
                rows.append(("kgw", details["kgw"]["text"], details["kgw"]["is_watermarked"]))
            for mode, text, flagged in rows:
                detected.setdefault(mode, []).append(bool(flagged))
                trigrams.setdefault(mode, []).append(distinct_trigrams(text))
            texts.append(json.dumps({"family": family, "seed": seed, "weights": label, "key": details["key"],
                                    "rows": [{"mode": m, "text": t, "detected": f} for m, t, f in rows]}))
        for mode, flags in detected.items():
            table.append([family, mode, f"{sum(flags)}/{len(flags)}", f"{statistics.median(trigrams[mode]):.2f}",
                          f"{statistics.median(seconds):.1f}"])
    if args.texts:
        with open(args.texts, "a", encoding="utf-8") as out:
            out.writelines(line + "\n" for line in texts)
    print(f"{name} ({label}), page defaults ({defaults['max_new_tokens']} new tokens, alpha {defaults['alpha']}), "
          f"each family's default delta, key seeds 0..{args.seeds - 1} (sampling seed = key seed)")
    print(markdown_table(["family", "answer", "detected", "median distinct trigrams", "median click s"], table))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="the Space's model (default: the embedded SmolLM2)")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="forced tokens of the step timings")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sequential", action="store_true", help="also time the three answers one after another")
    parser.add_argument("--detection", action="store_true", help="detection rates at the defaults instead")
    parser.add_argument("--family", action="append", choices=("tsp", "wip", "sa"), help="--detection: a family "
                        "(repeatable; default all three)")
    parser.add_argument("--seeds", type=int, default=20, help="--detection: key seeds per family")
    parser.add_argument("--texts", help="--detection: append the answers to this JSON-lines file")
    parser.add_argument("--quick", action="store_true", help="tiny random Qwen3 model, 8 tokens, 1 repeat")
    args = parser.parse_args(argv)

    from icw.models import load_model, load_tokenizer
    from icw.testing import tiny_random_model

    app = load_app()
    if args.quick:
        model, tok, name = tiny_random_model("qwen3"), load_tokenizer("qwen3"), "qwen3"
        args.max_new_tokens, args.repeats, args.seeds = 8, 1, 2
    else:
        (model, tok), name = load_model(args.model), args.model
    (detection if args.detection else latency)(args, app, model, tok, name)


if __name__ == "__main__":
    main()
