"""ICWBench throughput: batched vs one-at-a-time generation, and scoring alone.

Measures, side by side on the same queries (medians over ``--repeats``):

* responses/s of the transformers backend with ``--batch-size`` prompts per ``generate`` call,
* responses/s of the same backend one prompt at a time (batch size 1), and their ratio,
* texts/s of scoring alone (``icw.bench.scoring.score_texts``: verify under per-text keys) per family.

Every response is forced to exactly ``--max-new-tokens`` tokens (greedy, ``min_new_tokens``) so
both settings produce the same amount of text.

    OMP_NUM_THREADS=1 python benchmarks/bench_throughput.py                # embedded SmolLM2
    python benchmarks/bench_throughput.py --tiny --max-new-tokens 16      # quick smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

QUERIES = [
    "Why does the sky look blue during the day?", "How do vaccines train the immune system?",
    "What causes the seasons on Earth?", "Why do cats purr?", "How does a refrigerator keep food cold?",
    "What is the difference between weather and climate?", "Why do we need sleep?",
    "How do airplanes stay in the air?", "What makes bread rise?", "Why is the ocean salty?",
    "How do bees make honey?", "What is inflation and why does it happen?", "How do earthquakes happen?",
    "Why do leaves change color in autumn?", "What are black holes?", "How do plants turn sunlight into food?",
]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="model for the transformers backend")
    parser.add_argument("--tiny", action="store_true", help="use a tiny random Qwen3 model instead (smoke runs)")
    parser.add_argument("--num-queries", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--score-repeats", type=int, default=5)
    args = parser.parse_args(argv)

    import torch

    from icw.bench.backends import Request, TransformersBackend
    from icw.bench.scoring import score_texts
    from icw.keys import ICWKey
    from icw.models import load_model, load_tokenizer
    from icw.testing import tiny_random_model

    if args.tiny:
        pair = (tiny_random_model("qwen3"), load_tokenizer("qwen3"))
        name = "tiny random Qwen3"
    else:
        pair = load_model(args.model)
        name = args.model
    queries = (QUERIES * (args.num_queries // len(QUERIES) + 1))[: args.num_queries]
    fixed = {"do_sample": False, "min_new_tokens": args.max_new_tokens}

    def gen_time(batch_size: int) -> tuple[float, list[str]]:
        backend = TransformersBackend(pair, max_new_tokens=args.max_new_tokens, batch_size=batch_size,
                                      generation_kwargs=fixed)
        answers: dict[int, str] = {}
        start = time.perf_counter()
        backend.generate([Request(i, q) for i, q in enumerate(queries)],
                         lambda reqs, texts, _errors: answers.update({r.uid: t for r, t in zip(reqs, texts, strict=True)}),
                         desc=f"batch {batch_size}")
        return time.perf_counter() - start, [answers[i] for i in range(len(queries))]

    gen_time(args.batch_size)  # warm-up (first-call allocations, kernels)
    batched, single = [], []
    for _ in range(args.repeats):  # interleaved so load changes hit both settings alike
        t, texts = gen_time(args.batch_size)
        batched.append(t)
        t, _ = gen_time(1)
        single.append(t)
    n = len(queries)
    rate_b, rate_1 = n / statistics.median(batched), n / statistics.median(single)

    tok = pair[1]
    key_sets = {
        "tsp": [ICWKey.create("tsp", i, tok).to_string() for i in range(n)],
        "wip": [ICWKey.create("wip", i, tok).to_string() for i in range(n)],
        "sa": [ICWKey.create("sa", i).to_string() for i in range(n)],
    }
    scoring = {}
    for family, keys in key_sets.items():
        score_texts(texts, keys)  # warm-up: builds the vocabulary view and key tables once
        times = []
        for _ in range(args.score_repeats):
            start = time.perf_counter()
            score_texts(texts, keys)
            times.append(time.perf_counter() - start)
        scoring[family] = n / statistics.median(times)

    print(f"\nmodel: {name}; {n} queries x {args.max_new_tokens} new tokens; torch threads {torch.get_num_threads()}; "
          f"medians of {args.repeats} (generation) / {args.score_repeats} (scoring) runs\n")
    print("| setting | responses/s | ratio |")
    print("|---|---:|---:|")
    print(f"| transformers, batch {args.batch_size} | {rate_b:.3f} | {rate_b / rate_1:.2f}x |")
    print(f"| transformers, one at a time | {rate_1:.3f} | 1.00x |")
    print("\n| scoring alone (verify, per-text keys) | texts/s | vs batched generation |")
    print("|---|---:|---:|")
    for family, rate in scoring.items():
        print(f"| {family.upper()} | {rate:.1f} | {rate / rate_b:.0f}x |")
    return {"batched": rate_b, "one_at_a_time": rate_1, "scoring": scoring}


if __name__ == "__main__":
    main()
