"""``icw demo``: watermark a few answers of the embedded model and detect them.

For a few built-in questions, the embedded SmolLM2-135M-Instruct answers without and with
each family's logit bias; every answer is verified under that family's key and a table of
z-scores and p-values is printed. Runs offline on a CPU in about a minute.
"""

from __future__ import annotations

import argparse
import time

from .argtypes import non_negative_int, positive_float, positive_int
from .keys import FAMILIES, ICWKey
from .verification import verify

DEMO_QUESTIONS = (
    "Why is the sky blue?",
    "How do vaccines train the immune system?",
    "What makes a good night's sleep?",
)


def run_demo(model_name: str = "smollm2", seed: int = 2026, max_new_tokens: int = 160, delta: float | None = None) -> list[dict]:
    """Answer :data:`DEMO_QUESTIONS` plainly and with each family's logit bias, and verify both.

    Args:
        model_name (`str`, defaults to ``"smollm2"``): the embedded SmolLM2, or a Hub id / folder.
        seed (`int`, defaults to 2026): seed of the first question's key (question ``i`` gets ``seed + i``).
        max_new_tokens (`int`, defaults to 160): the answers' length limit.
        delta (`float`, *optional*): bias strength (``None``: each family's default).

    Returns:
        One dict per (family, question) with the plain and biased answers' z, p-value and verdict.
    """
    from .generation import generate_responses
    from .models import load_model

    model, tokenizer = load_model(model_name)
    queries = list(DEMO_QUESTIONS)
    plain = generate_responses(model, tokenizer, queries, mode="plain", max_new_tokens=max_new_tokens, progress="plain")
    rows = []
    for family in FAMILIES:
        keys = [ICWKey.create(family, seed + i, tokenizer if family != "sa" else None) for i in range(len(queries))]
        biased = generate_responses(model, tokenizer, queries, keys, mode="bias", delta=delta,
                                    max_new_tokens=max_new_tokens, progress=f"{family} bias")
        for q, key, p_res, b_res in zip(queries, keys, verify(plain, keys, tokenizer), verify(biased, keys, tokenizer), strict=True):
            rows.append({"family": family, "question": q, "key": key.to_string(),
                         "plain_z": p_res.z_score, "plain_p": p_res.p_value,
                         "bias_z": b_res.z_score, "bias_p": b_res.p_value, "bias_detected": b_res.is_watermarked})
    return rows


def format_table(rows: list[dict]) -> str:
    """A markdown table of :func:`run_demo`'s rows.

    Args:
        rows (`list[dict]`): the rows :func:`run_demo` returns.
    """
    head = f"| {'family':6} | {'question':42} | {'plain z':>7} | {'plain p':>8} | {'bias z':>7} | {'bias p':>8} | detected |"
    lines = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    for r in rows:
        lines.append(f"| {r['family']:6} | {r['question'][:42]:42} | {r['plain_z']:7.2f} | {r['plain_p']:8.1e} | "
                     f"{r['bias_z']:7.2f} | {r['bias_p']:8.1e} | {'yes' if r['bias_detected'] else 'no':8} |")
    return "\n".join(lines)


def _main(args: argparse.Namespace) -> None:
    start = time.time()
    rows = run_demo(args.model, args.seed, args.max_new_tokens, args.delta)
    print(format_table(rows))
    print(f"\nplain = the question alone; bias = the same question decoded with the family's logit bias.\n"
          f"p is the exact p-value (Monte Carlo for SA); detected = p <= 0.01. ({time.time() - start:.0f} s)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``icw demo`` command to the CLI's subparsers."""
    demo = sub.add_parser("demo", help="generate with and without each family's bias on the embedded model")
    demo.add_argument("--model", default="smollm2", help="smollm2 (embedded) or a transformers model folder/id")
    demo.add_argument("--seed", type=non_negative_int, default=2026, help="key seed of every family")
    demo.add_argument("--max-new-tokens", type=positive_int, default=160, help="answer length in tokens")
    demo.add_argument("--delta", type=positive_float, help="bias strength (default: the family's)")
    demo.set_defaults(func=_main)
