"""Cost of an SDLP step vs a plain SFT step on the same batch and model (SmolLM2-135M on CPU, or a
randomly initialised Qwen3-shaped model on a GPU).

    .venv/bin/python benchmarks/sdlp_cost.py                 # full fine-tuning and LoRA
    .venv/bin/python benchmarks/sdlp_cost.py --steps 5 --batch-size 8 --response-tokens 120
    python benchmarks/sdlp_cost.py --device cuda --dtype bfloat16 --model qwen3-1.7b --response-tokens 512

Each (method, mode) runs in its own subprocess so peak memory is not shared: the worker loads
the model, builds the batch, runs ``--warmup`` steps then ``--steps`` timed steps (forward,
backward, AdamW step) and reports the median step time and the process's peak resident set
size (``resource.getrusage(RUSAGE_SELF).ru_maxrss``, which on CPU covers torch's tensors;
tracemalloc would miss them) together with the RSS before the first step, so the table shows
both the peak and the peak minus that baseline. On a GPU the same two figures come from
``torch.cuda.max_memory_allocated`` and ``torch.cuda.memory_allocated``.

SFT step: cross-entropy on the response tokens of the student sequence (instruction + query +
response), what trl's SFTTrainer computes with completion-only loss. SDLP step:
``SDLPTrainer.compute_loss`` (teacher forward without grad, chunked top-k KL) on the same rows.
Full fine-tuning keeps a frozen teacher copy; LoRA disables the adapter for the teacher.
Targets: SDLP <= 1.5x SFT step time; with LoRA, <= 1.2x SFT peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_var, "1")

PARAGRAPH = (
    "Honey bees collect nectar from flowers and carry it back to the hive in a special stomach. "
    "Worker bees pass the nectar from mouth to mouth, and enzymes break its sugars into simpler ones. "
    "They spread it across the wax cells and fan it with their wings until most of the water evaporates. "
    "When the honey is thick enough, they seal each cell with a cap of wax. Because honey is acidic and "
    "low in water, microbes cannot grow in it, which is why it keeps for years. A strong colony can store "
    "far more honey than it needs for the winter, and beekeepers harvest the surplus in late summer. "
)
QUERIES = ["How do bees make honey?", "Why does honey not spoil?", "What do worker bees do?",
           "How do beekeepers harvest honey?", "Why do bees fan their wings?", "What is nectar?",
           "How big is a bee colony?", "Why is honey sweet?"]


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def worker(method: str, mode: str, args: argparse.Namespace) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig

    from icw import ICWKey
    from icw.train.sdlp import SDLPCollator, SDLPConfig, SDLPTrainer, tokenize_row

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _common import benchmark_model

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model, tok = benchmark_model(args.model, args.device, args.dtype)
    model.train()
    cuda = args.device.startswith("cuda")
    response_ids = (tok(PARAGRAPH * 10, add_special_tokens=False)["input_ids"])[: args.response_tokens]
    response = tok.decode(response_ids)
    rows = []
    for i in range(args.batch_size):
        family = "wip" if i % 2 == 0 else "sa"
        key = ICWKey.create(family, seed=100 + i, tokenizer=tok if family == "wip" else None)
        rows.append({"family": family, "key": key.to_string(), "query": QUERIES[i % len(QUERIES)],
                     "response": response, "label": 1})
    config = SDLPConfig(output_dir="/tmp/sdlp-cost", report_to="none", use_cpu=not cuda,
                        loss_chunk_size=args.chunk_size, top_k_sa=1000, top_k_wip=0)
    peft_config = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear") if mode == "lora" else None
    features = [{**row, **tokenize_row(row, tok)} for row in rows]
    batch = {k: v.to(args.device) for k, v in SDLPCollator(tok, model.config.vocab_size, config)(features).items()}
    if method in ("sdlp", "both"):  # full fine-tuning: the trainer keeps a frozen teacher copy; LoRA: adapter disabled
        trainer = SDLPTrainer(model, config, train_dataset=Dataset.from_list(rows), processing_class=tok,
                              peft_config=peft_config)
        policy = trainer.model
    elif peft_config is not None:
        from peft import get_peft_model

        policy = get_peft_model(model, peft_config)
    else:
        policy = model
    # SFT labels: response tokens of the student sequence (-100 elsewhere)
    labels = torch.full_like(batch["student_input_ids"], -100)
    for b in range(len(rows)):
        n = int(batch["response_mask"][b].sum())
        pos = batch["student_positions"][b, :n] + 1
        labels[b, pos] = batch["student_input_ids"][b, pos]
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5)

    def step(kind: str = method) -> float:
        if kind == "sdlp":
            loss = trainer.compute_loss(policy, batch)
        else:
            loss = policy(input_ids=batch["student_input_ids"], attention_mask=batch["student_attention_mask"],
                          labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return float(loss)

    if method == "both":  # interleaved SFT and SDLP steps in one process: timings see the same machine load
        times = {"sft": [], "sdlp": []}
        for i in range(args.warmup + args.steps):
            for kind in ("sft", "sdlp") if i % 2 == 0 else ("sdlp", "sft"):
                start = time.perf_counter()
                step(kind)
                if cuda:
                    torch.cuda.synchronize()
                if i >= args.warmup:
                    times[kind].append(time.perf_counter() - start)
        return {"method": "both", "mode": mode, "sft_median_s": statistics.median(times["sft"]),
                "sdlp_median_s": statistics.median(times["sdlp"]), "times": times}
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated() // 1024
    else:
        baseline = _rss_kib()
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() // 1024 if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"method": method, "mode": mode, "median_s": statistics.median(times), "times": times,
            "peak_rss_mib": peak / 1024, "baseline_rss_mib": baseline / 1024,
            "tokens": int(batch["response_mask"].sum()), "trainable": sum(p.numel() for p in params)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--modes", nargs="+", default=["full", "lora"], choices=["full", "lora"])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--response-tokens", type=int, default=120)
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default=None, help="model dtype, e.g. bfloat16 (default: the checkpoint's)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--interleaved", action="store_true",
                        help="time SFT and SDLP in one process, alternating steps (robust to a busy machine); "
                             "no memory figures")
    parser.add_argument("--worker", nargs=2, metavar=("METHOD", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(*args.worker, args)))
        return
    results = {}
    for mode in args.modes:
        for method in ("both",) if args.interleaved else ("sft", "sdlp"):
            cmd = [sys.executable, __file__, "--worker", method, mode, "--model", args.model, "--steps", str(args.steps),
                   "--warmup", str(args.warmup), "--batch-size", str(args.batch_size), "--response-tokens",
                   str(args.response_tokens), "--chunk-size", str(args.chunk_size), "--threads", str(args.threads),
                   "--device", args.device] + (["--dtype", args.dtype] if args.dtype else [])
            proc = subprocess.run(cmd, capture_output=True, text=True)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"worker {method}/{mode} failed:\n{proc.stderr[-3000:]}")
            results[(method, mode)] = json.loads(line[7:])
            r = results[(method, mode)]
            if method == "both":
                print(f"  {mode}: interleaved medians SFT {r['sft_median_s']:.2f} s/step, SDLP {r['sdlp_median_s']:.2f} "
                      f"s/step, ratio {r['sdlp_median_s'] / r['sft_median_s']:.2f}x", flush=True)
                continue
            print(f"  {method:4s} {mode:4s}: median {r['median_s']:.2f} s/step, peak RSS {r['peak_rss_mib']:.0f} MiB",
                  flush=True)
    if args.interleaved:
        if args.json:
            with open(args.json, "w") as f:
                json.dump([dict(v) for v in results.values()], f, indent=2)
        return
    where = f"CPU ({args.threads} threads)" if args.device == "cpu" else f"{args.device}, {args.dtype or 'default dtype'}"
    print(f"\nSDLP vs SFT on {args.model}, {where}, batch {args.batch_size} x "
          f"{args.response_tokens} response tokens, median of {args.steps} steps after {args.warmup} warm-up")
    if args.device == "cpu":
        print("peak memory = peak RSS of the worker process (resource ru_maxrss); 'above base' subtracts the RSS "
              "measured after loading, before the first step\n")
    else:
        print("peak memory = torch.cuda.max_memory_allocated of the worker; 'above base' subtracts the memory "
              "allocated after loading, before the first step\n")
    print("| mode | SFT s/step | SDLP s/step | time ratio | SFT peak MiB | SDLP peak MiB | peak ratio | "
          "SFT above base | SDLP above base |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode in args.modes:
        sft, sdlp = results[("sft", mode)], results[("sdlp", mode)]
        print(f"| {mode} | {sft['median_s']:.2f} | {sdlp['median_s']:.2f} | {sdlp['median_s'] / sft['median_s']:.2f}x | "
              f"{sft['peak_rss_mib']:.0f} | {sdlp['peak_rss_mib']:.0f} | "
              f"{sdlp['peak_rss_mib'] / sft['peak_rss_mib']:.2f}x | "
              f"{sft['peak_rss_mib'] - sft['baseline_rss_mib']:.0f} | {sdlp['peak_rss_mib'] - sdlp['baseline_rss_mib']:.0f} |")
    print("\ntargets: time ratio <= 1.5x; with LoRA, peak ratio <= 1.2x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dict(v) for v in results.values()], f, indent=2)


if __name__ == "__main__":
    main()
