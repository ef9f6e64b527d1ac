"""Decoding cost of the ICW logits processors on the embedded SmolLM2-135M-Instruct (CPU).

Configurations, at batch 1 and batch 8: no processor; each of ours
(:class:`~icw.processors.TokenSetPreferenceLogitsProcessor`,
:class:`~icw.processors.WordInitialPreferenceLogitsProcessor`,
:class:`~icw.processors.SentenceAcrosticLogitsProcessor`, one key per row); and, as a
reference point, transformers' own ``WatermarkLogitsProcessor`` (Kirchenbauer et al.,
``greenlist_ratio=0.25, bias=2.0``, left-hash seeding: it re-seeds a generator and draws a
permutation of the vocabulary for every row at every step).

Every run decodes exactly ``--max-new-tokens`` tokens per row (``min_new_tokens =
max_new_tokens``, greedy), so all configurations do the same model work. The configurations
are interleaved within each repeat (rotating the order) so that drift in machine speed hits
them alike; the table reports median tokens/s and each processor's cost as a share of the
no-processor tokens/s. Target (issue 2): each of ours costs at most 3 %.

    python benchmarks/processor_overhead.py             # 64 new tokens, 5 repeats (a few minutes)
    python benchmarks/processor_overhead.py --quick     # a handful of tokens: a smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table  # noqa: E402

CONFIGS = ("none", "tsp", "wip", "sa", "hf-watermark")
TARGET = 0.03
QUERIES = [
    "Why is the sky blue?", "How do vaccines train the immune system?", "What causes the seasons on Earth?",
    "Explain how a bicycle stays upright.", "Why do cats purr?", "How does compound interest work?",
    "What makes bread rise?", "How do bees communicate?",
]


def build_processors(config: str, tokenizer: Any, model: Any, batch: int) -> list[Any]:
    """A fresh processor list for one ``generate`` call (the SA processor is stateful)."""
    from transformers import WatermarkLogitsProcessor

    from icw import ICWKey
    from icw.processors import logits_processor

    if config == "none":
        return []
    if config == "hf-watermark":
        return [WatermarkLogitsProcessor(vocab_size=model.config.vocab_size, device=model.device,
                                         greenlist_ratio=0.25, bias=2.0, seeding_scheme="lefthash")]
    keys = [ICWKey.create(config, seed=100 + row, tokenizer=tokenizer) for row in range(batch)]
    return [logits_processor(keys, tokenizer)]


def run(max_new_tokens: int, repeats: int, batches: tuple[int, ...], configs: tuple[str, ...] = CONFIGS
        ) -> dict[tuple[int, str], float]:
    """Median tokens/s (new tokens over all rows / wall time) per (batch, config)."""
    import torch

    from icw.generation import chat_prompt
    from icw.models import load_model

    model, tok = load_model("smollm2")
    tok.padding_side = "left"
    times: dict[tuple[int, str], list[float]] = {}
    for batch in batches:
        queries = (QUERIES * (batch // len(QUERIES) + 1))[:batch]
        enc = tok([chat_prompt(tok, q) for q in queries], return_tensors="pt", padding=True, add_special_tokens=False)
        # processors are built once per (batch, config); the keys' vocabulary work is set-up, not decoding
        built = {c: build_processors(c, tok, model, batch) for c in configs}

        def generate(config: str, new_tokens: int, enc=enc, built=built) -> torch.Tensor:
            for proc in built[config]:
                if hasattr(proc, "reset"):
                    proc.reset()
            return model.generate(**enc, logits_processor=built[config], do_sample=False,
                                  max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                  pad_token_id=tok.pad_token_id)

        with torch.inference_mode():
            for config in configs:  # warm-up: first-call allocations and caches
                generate(config, 1)
            for r in range(repeats):
                order = configs[r % len(configs):] + configs[:r % len(configs)]
                for config in order:
                    start = time.perf_counter()
                    out = generate(config, max_new_tokens)
                    elapsed = time.perf_counter() - start
                    new = out.shape[1] - enc["input_ids"].shape[1]
                    if new != max_new_tokens:
                        raise AssertionError(f"{config}: generated {new} tokens, expected {max_new_tokens}")
                    times.setdefault((batch, config), []).append(batch * new / elapsed)
    return {k: statistics.median(v) for k, v in times.items()}


def report(speeds: dict[tuple[int, str], float], max_new_tokens: int, repeats: int) -> str:
    rows, verdicts = [], []
    for (batch, config), rate in speeds.items():
        base = speeds[(batch, "none")]
        cost = 1 - rate / base
        rows.append([batch, config, f"{rate:.1f}", "-" if config == "none" else f"{cost:+.1%}"])
        if config in ("tsp", "wip", "sa"):
            verdicts.append(f"  {config.upper()} at batch {batch}: {cost:+.1%} -> {'met' if cost <= TARGET else 'MISSED'}")
    table = markdown_table(["batch", "processor", "tokens/s (median)", "cost vs no processor"], rows)
    head = (f"SmolLM2-135M-Instruct on CPU ({_threads()} torch threads, load average {os.getloadavg()[0]:.1f} "
            f"on {os.cpu_count()} cores), greedy, exactly {max_new_tokens} new tokens per row, "
            f"median of {repeats} interleaved repeats")
    return "\n".join([head, "", table, "", f"Target: each ICW processor costs at most {TARGET:.0%}:", *verdicts])


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def main(argv: list[str] | None = None) -> dict[tuple[int, str], float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens decoded per row (forced)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats (median reported)")
    parser.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's choice; 1 is steadier on a busy machine)")
    parser.add_argument("--quick", action="store_true", help="4 new tokens, 1 repeat: a smoke run")
    args = parser.parse_args(argv)
    max_new_tokens, repeats = (4, 1) if args.quick else (args.max_new_tokens, args.repeats)
    try:
        batches = tuple(int(b) for b in args.batches.split(","))
    except ValueError:
        parser.error(f"--batches takes comma-separated integers, got {args.batches!r}")
    if max_new_tokens < 1 or repeats < 1 or min(batches) < 1:
        parser.error("--max-new-tokens, --repeats and the batch sizes must be positive")
    if args.threads is not None:
        if args.threads < 1:
            parser.error("--threads must be positive")
        import torch

        torch.set_num_threads(args.threads)
    speeds = run(max_new_tokens, repeats, batches)
    print(report(speeds, max_new_tokens, repeats))
    return speeds


if __name__ == "__main__":
    main()
