"""Demo Space latency: the three answers of one click, as ONE batch vs one after another.

One click of "Generate and detect" writes a plain, an ICW-instructed and a logit-biased answer
(plus, optionally, the KGW baseline). Measured side by side in one run (medians over
``--repeats``):

* sequential: three ``icw.generation.generate_responses`` calls of one answer each (what the
  Space did before),
* batched: the Space's ``generate_batch`` (one ``generate`` call, each bias on its own row),
  with and without the KGW row,

each answer forced to exactly ``--max-new-tokens`` tokens (greedy, ``min_new_tokens``) so every
setting writes the same amount of text. The load average is printed with the table: on a
shared machine the absolute seconds move with it, the ratio much less.

    OMP_NUM_THREADS=2 python benchmarks/demo_latency.py              # embedded SmolLM2, 120 tokens
    python benchmarks/demo_latency.py --quick                        # tiny random model, smoke run
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table, median_time  # noqa: E402

APP = Path(__file__).resolve().parents[1] / "spaces" / "icw-demo" / "app.py"
QUERY = "Why is the sky blue?"


def load_app():
    """Import the Space's app.py (it builds its page on import; no server is started). It also puts
    the Space's folder on ``sys.path``, so its rooms (``demo_generation``, ...) import after it."""
    if "icw_space_app" not in sys.modules:
        spec = importlib.util.spec_from_file_location("icw_space_app", APP)
        module = importlib.util.module_from_spec(spec)
        sys.modules["icw_space_app"] = module
        spec.loader.exec_module(module)
    return sys.modules["icw_space_app"]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="the Space's model (default: the embedded SmolLM2)")
    parser.add_argument("--family", default="wip", choices=("tsp", "wip", "sa"))
    parser.add_argument("--max-new-tokens", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny random Qwen3 model, 8 tokens, 1 repeat")
    args = parser.parse_args(argv)

    import torch

    from icw.generation import generate_responses
    from icw.keys import ICWKey
    from icw.models import load_model, load_tokenizer
    from icw.testing import tiny_random_model

    load_app()
    from demo_generation import generate_batch
    from demo_keys import kgw_config
    if args.quick:
        model, tok = tiny_random_model("qwen3"), load_tokenizer("qwen3")
        name, args.max_new_tokens, args.repeats = "tiny random Qwen3", 8, 1
    else:
        (model, tok), name = load_model(args.model), args.model
    params = {"pool_size": 300} if args.family == "tsp" else {}
    key = ICWKey.create(args.family, 5, tok if args.family != "sa" else None, **params)
    n = args.max_new_tokens
    forced = {"do_sample": False, "min_new_tokens": n}

    def sequential() -> None:
        for mode in ("plain", "instruction", "bias"):
            generate_responses(model, tok, [QUERY], key if mode != "plain" else None, mode, max_new_tokens=n,
                               batch_size=1, generation_kwargs=forced)

    def batched(kgw: bool) -> None:
        for _ in generate_batch(model, tok, QUERY, key, max_new_tokens=n, sampling=forced,
                                kgw=kgw_config(key.seed) if kgw else None):
            pass

    batched(False)  # warm-up (first-call allocations, the key's masks)
    results = {
        "sequential": median_time(sequential, args.repeats)[0],
        "batched": median_time(lambda: batched(False), args.repeats)[0],
        "batched + KGW": median_time(lambda: batched(True), args.repeats)[0],
    }
    base = results["sequential"]
    rows = [[setting, f"{seconds:.1f}", f"{base / seconds:.2f}x"] for setting, seconds in results.items()]
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"{name}, {args.family.upper()} key, 3 answers x {n} tokens, median of {args.repeats}; "
          f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, load average {load[0]:.1f}")
    print(markdown_table(["setting", "seconds per click", "speed-up vs sequential"], rows))
    return results


if __name__ == "__main__":
    main()
