"""Decoding cost of the ICW logits processors: the embedded SmolLM2-135M-Instruct on CPU, or a
randomly initialised Qwen3-shaped model (real Qwen3 tokenizer) on a GPU.

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
    python benchmarks/processor_overhead.py --model qwen3-0.6b --device cuda --dtype bfloat16 --batches 1,8,64

On a GPU, decoding is asynchronous, so the time inside a processor is wall time with the device
synchronized before and after its call (an upper bound on what it adds); the end-to-end cost
is the one to judge.
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

from _common import benchmark_model, markdown_table  # noqa: E402
from transformers import LogitsProcessor  # noqa: E402

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


class TimedProcessor(LogitsProcessor):
    """Wraps a processor and accumulates the time spent inside its ``__call__``: CPU time, or on
    a GPU synchronized wall time."""

    def __init__(self, inner: Any, device: str = "cpu") -> None:
        self.inner, self.cpu = inner, 0.0
        self.cuda = device.startswith("cuda")

    def reset(self) -> None:
        self.cpu = 0.0
        if hasattr(self.inner, "reset"):
            self.inner.reset()

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if not self.cuda:
            start = time.process_time()
            out = self.inner(input_ids, scores)
            self.cpu += time.process_time() - start
            return out
        import torch

        torch.cuda.synchronize()
        start = time.perf_counter()
        out = self.inner(input_ids, scores)
        torch.cuda.synchronize()
        self.cpu += time.perf_counter() - start
        return out


def run(max_new_tokens: int, repeats: int, batches: tuple[int, ...], configs: tuple[str, ...] = CONFIGS,
        model_name: str = "smollm2", device: str = "cpu", dtype: str | None = None
        ) -> dict[tuple[int, str], dict[str, float]]:
    """Per (batch, config), medians over repeats of: ``wall`` tokens/s, ``cpu`` tokens per CPU-second
    of this process, and ``inside``: seconds spent inside the processor per new token (CPU time; on a
    GPU, synchronized wall time)."""
    import torch

    from icw.generation import chat_prompt

    model, tok = benchmark_model(model_name, device, dtype)
    tok.padding_side = "left"
    runs: dict[tuple[int, str], list[tuple[float, float, float]]] = {}
    for batch in batches:
        queries = (QUERIES * (batch // len(QUERIES) + 1))[:batch]
        enc = tok([chat_prompt(tok, q) for q in queries], return_tensors="pt", padding=True,
                  add_special_tokens=False).to(device)
        # processors are built once per (batch, config); the keys' vocabulary work is set-up, not decoding
        built = {c: [TimedProcessor(p, device) for p in build_processors(c, tok, model, batch)] for c in configs}

        def generate(config: str, new_tokens: int, enc=enc, built=built) -> torch.Tensor:
            for proc in built[config]:
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
                    wall, cpu = time.perf_counter(), time.process_time()
                    out = generate(config, max_new_tokens)
                    if device.startswith("cuda"):
                        torch.cuda.synchronize()
                    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                    new = out.shape[1] - enc["input_ids"].shape[1]
                    if new != max_new_tokens:
                        raise AssertionError(f"{config}: generated {new} tokens, expected {max_new_tokens}")
                    tokens = batch * new
                    inside = sum(p.cpu for p in built[config])
                    runs.setdefault((batch, config), []).append((tokens / wall, tokens / cpu, inside / tokens))
    return {k: {name: statistics.median(x[i] for x in v) for i, name in enumerate(("wall", "cpu", "inside"))}
            for k, v in runs.items()}


def report(speeds: dict[tuple[int, str], dict[str, float]], max_new_tokens: int, repeats: int,
           setting: str | None = None, gpu: bool = False) -> str:
    rows, verdicts = [], []
    clock = "wall" if gpu else "cpu"
    for (batch, config), m in speeds.items():
        base = speeds[(batch, "none")]
        wall_cost, cpu_cost = 1 - m["wall"] / base["wall"], 1 - m["cpu"] / base["cpu"]
        # time inside the processor relative to the time of a processor-free token (CPU time; GPU: wall)
        inside = m["inside"] * base[clock]
        none = config == "none"
        rows.append([batch, config, f"{m['wall']:.1f}", f"{m['cpu']:.1f}", "-" if none else f"{wall_cost:+.1%}",
                     "-" if none else f"{cpu_cost:+.1%}", "-" if none else f"{inside:.2%}"])
        if config in ("tsp", "wip", "sa"):
            end_to_end = f"{wall_cost:+.1%} end to end (wall)" if gpu else f"{cpu_cost:+.1%} end to end (CPU time)"
            verdicts.append(f"  {config.upper()} at batch {batch}: {inside:.2%} inside the processor, "
                            f"{end_to_end} -> {'met' if inside <= TARGET else 'MISSED'}")
    table = markdown_table(["batch", "processor", "tokens/s (wall)", "tokens per CPU-second", "cost (wall)",
                            "cost (CPU time)", "time inside processor"], rows)
    setting = setting or (f"SmolLM2-135M-Instruct on CPU ({_threads()} torch threads, load average "
                          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    head = (f"{setting}, greedy, exactly {max_new_tokens} new tokens per row, "
            f"median of {repeats} interleaved repeats")
    notes = ["cost = 1 - tokens/s / no-processor tokens/s (negative: faster, i.e. noise); time inside processor = "
             + ("wall seconds in the processor's __call__, device synchronized before and after, per token / "
                "no-processor wall seconds per token" if gpu else
                "CPU seconds in the processor's __call__ per token / no-processor CPU seconds per token, "
                "the measure least disturbed by other load")]
    return "\n".join([head, "", table, "", *notes, f"Target: each ICW processor costs at most {TARGET:.0%} "
                      "(judged on the time inside the processor):", *verdicts])


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def main(argv: list[str] | None = None) -> dict[tuple[int, str], dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens decoded per row (forced)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats (median reported)")
    parser.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's choice; 1 is steadier on a busy machine)")
    parser.add_argument("--model", default="smollm2",
                        help="smollm2 (embedded), a model folder, or a random Qwen3 shape such as qwen3-0.6b")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default=None, help="model dtype, e.g. bfloat16 (default: the checkpoint's)")
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
    speeds = run(max_new_tokens, repeats, batches, model_name=args.model, device=args.device, dtype=args.dtype)
    setting = None
    if args.device != "cpu" or args.model != "smollm2":
        import torch

        where = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU ({_threads()} threads)"
        setting = f"{args.model} ({args.dtype or 'default dtype'}) on {where}"
    print(report(speeds, max_new_tokens, repeats, setting, gpu=args.device.startswith("cuda")))
    return speeds


if __name__ == "__main__":
    main()
