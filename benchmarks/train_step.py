"""Where a training step's time goes: SDLP, GRPO and one paraphrase, phase by phase, beside the floor
(plain ``model.generate`` of the same tokens), all in one process on the same model (issue 22).

    .venv/bin/python benchmarks/train_step.py                        # SmolLM2-135M on CPU, LoRA r 16
    .venv/bin/python benchmarks/train_step.py --steps 5 --completion-tokens 120 --generations 4
    .venv/bin/python benchmarks/train_step.py --sections floor,decode --compile   # rollout decode speed-ups
    .venv/bin/python benchmarks/train_step.py --quick                # a pipeline check (tiny random model)

Rows: WIP instruction + query prompts (about 180 tokens with SmolLM2's chat template).

* floor: ``model.generate`` of ``--prompts`` x ``--generations`` sampled completions of exactly
  ``--completion-tokens`` new tokens (``min_new_tokens`` = ``max_new_tokens``) in one batch, with
  the KV cache, and one no-grad forward of those sequences;
* SDLP: one :class:`~icw.train.sdlp.SDLPTrainer` step on ``--batch`` rows of ``--response-tokens``
  tokens (LoRA r ``--lora-r``, or full fine-tuning beside a frozen teacher copy with ``--lora-r 0``),
  split into collate / teacher forward / student forward / loss (chunked KL) / backward / optimizer,
  and apart from the step the student's own samples that an on-policy step (``lmbda``) trains on
  (``icw.train.transfer.on_policy_batches``), which give the on-policy / off-policy step ratio;
* GRPO: one step of the recipe's trainer (:func:`~icw.train.grpo.seeded_grpo_trainer`, ``loss_type="grpo"``, the
  :class:`~icw.train.grpo.ICWReward`, LoRA r ``--grpo-lora-r`` or all weights) on ``--prompts`` prompts with
  ``--generations`` completions each, forced to ``--completion-tokens`` tokens, the
  phases timed by wrapping the trainer's own methods: generation, reward, forward (policy log-probs),
  backward, optimizer; "other" is the rest of the step;
* decode: the floor's ``generate`` beside a static KV cache, int8 dynamic quantization of a rollout
  copy and (``--compile``) a static cache under ``torch.compile``, with each variant's KL from the fp32
  policy (not in the default sections: ``--sections decode``);
* paraphrase: one request of the paraphrase attack (:class:`~icw.bench.attacks.EndpointAttack`) through
  :class:`~icw.bench.backends.ChatClient` to our OpenAI-compatible server on 127.0.0.1, beside
  ``generate`` of the same number of tokens at batch 1.

Each figure is the median over ``--steps`` measured steps after one warm-up step. Ratios are the
issue's targets: GRPO step <= 2x its own generation floor; paraphrase <= 1.5x generate.

    .venv/bin/python benchmarks/train_step.py --sections floor,grpo --prompts 8 --generations 4 --grpo-lora-r 0
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import markdown_table  # noqa: E402

QUERIES = ["How do bees make honey?", "Why is the sky blue?", "What causes the seasons?", "How do vaccines work?",
           "Why do cats purr?", "How does a rainbow form?", "What makes bread rise?", "How do plants drink water?"]
PARAPHRASE_SOURCE = ("Honey bees collect nectar from flowers and carry it back to the hive. Worker bees pass it "
                     "from mouth to mouth, and enzymes break its sugars down. They fan it with their wings until "
                     "most of the water evaporates, then seal each cell with wax. Because honey is acidic and low "
                     "in water, microbes cannot grow in it, which is why it keeps for years.")


class PhaseTimer:
    """Wall time per named phase for the current step; ``wrap`` times every call of an object's method."""

    def __init__(self) -> None:
        self.current: dict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.current[name] += time.perf_counter() - start

    def wrap(self, obj: Any, method: str, name: str, when: Callable[[], bool] = lambda: True) -> None:
        original = getattr(obj, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if not when():
                return original(*args, **kwargs)
            with self.phase(name):
                return original(*args, **kwargs)

        setattr(obj, method, timed)

    def end_step(self, total: float) -> None:
        self.steps.append({**self.current, "total": total})
        self.current = defaultdict(float)

    def medians(self, skip: int = 1) -> dict[str, float]:
        steps = self.steps[skip:] or self.steps
        names = {n for s in steps for n in s}
        return {n: statistics.median(s.get(n, 0.0) for s in steps) for n in names}


def wip_rows(tokenizer: Any, n: int, seed: int = 100) -> list[dict[str, Any]]:
    from icw import ICWKey

    return [{"family": "wip", "key": ICWKey.create("wip", seed=seed + i, tokenizer=tokenizer).to_string(),
             "query": QUERIES[i % len(QUERIES)], "label": 1} for i in range(n)]


def _sample(model: Any, tokenizer: Any, ids: Any, tokens: int, **options: Any) -> Any:
    """Sampled completions of exactly ``tokens`` new tokens (``min_new_tokens`` = ``max_new_tokens``)."""
    import torch

    from icw.precision import autocast

    with torch.no_grad(), autocast("cpu"):
        return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=tokens,
                              min_new_tokens=tokens, pad_token_id=tokenizer.pad_token_id, **options)


def floor(model: Any, tokenizer: Any, prompt_ids: list[int], generations: int, tokens: int, steps: int) -> dict:
    """``generate`` of ``generations`` sampled completions of exactly ``tokens`` tokens, and one forward of them."""
    import torch

    from icw.precision import autocast

    ids = torch.tensor([prompt_ids] * generations)
    gen_times, fwd_times = [], []
    for _ in range(steps + 1):
        start = time.perf_counter()
        out = _sample(model, tokenizer, ids, tokens)
        gen_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        with torch.no_grad(), autocast("cpu"):
            model(input_ids=out, attention_mask=torch.ones_like(out))
        fwd_times.append(time.perf_counter() - start)
    return {"generate": statistics.median(gen_times[1:]), "forward": statistics.median(fwd_times[1:]),
            "shape": f"{generations} x ({len(prompt_ids)} + {tokens})"}


def decode(model: Any, tokenizer: Any, prompt_ids: list[int], generations: int, tokens: int, steps: int,
           compile: bool = False) -> list[dict]:
    """The rollout's ``generate`` under the decode speed-ups a CPU offers, side by side: fp32 with the
    dynamic KV cache (the floor), a static KV cache, int8 dynamic quantization of every ``nn.Linear`` (a
    rollout copy; ``torch.ao.quantization.quantize_dynamic``) and, with ``compile`` (inductor needs a C++
    compiler), a static cache with ``torch.compile`` (its first call, the compilation, reported apart).
    ``kl`` is the mean per-token KL(fp32 || variant) of the next-token distributions along fp32 samples:
    how far the variant's sampler is from the policy's."""
    import copy

    import torch

    from icw.precision import use_bf16

    ids = torch.tensor([prompt_ids] * generations)
    fp = "bf16 autocast" if use_bf16("cpu") else "fp32"
    int8 = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)
    variants = [(f"{fp}, dynamic KV cache (the floor)", model, {}),
                (f"{fp}, static KV cache", model, {"cache_implementation": "static"}),
                ("int8 dynamic quantization, dynamic KV cache", int8, {})]
    if compile:
        compiled = copy.deepcopy(model)
        compiled.forward = torch.compile(compiled.forward, dynamic=False)
        variants.append((f"{fp}, static KV cache + torch.compile", compiled, {"cache_implementation": "static"}))
    reference = _sample(model, tokenizer, ids, tokens)
    with torch.no_grad():
        target = torch.log_softmax(model(reference).logits[:, len(prompt_ids) - 1 : -1].float(), -1)
    out = []
    for name, variant, options in variants:
        times = []
        for _ in range(steps + 1):
            start = time.perf_counter()
            _sample(variant, tokenizer, ids, tokens, **options)
            times.append(time.perf_counter() - start)
        with torch.no_grad():
            got = torch.log_softmax(variant(reference).logits[:, len(prompt_ids) - 1 : -1].float(), -1)
        kl = float((target.exp() * (target - got)).sum(-1).mean())
        out.append({"variant": name, "generate": statistics.median(times[1:]), "first": times[0], "kl": kl})
    return out


def sdlp_step(model: Any, tokenizer: Any, args: argparse.Namespace) -> tuple[dict[str, float], str]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig

    from icw.train.sdlp import SDLPConfig, SDLPTrainer, _final_hidden, _head_fn, chunked_sdlp_loss
    from icw.train.transfer import batch_seeds, on_policy_batches

    ids = tokenizer(PARAPHRASE_SOURCE * 8, add_special_tokens=False)["input_ids"][: args.response_tokens]
    rows = [{**r, "response": "", "response_ids": ids} for r in wip_rows(tokenizer, args.batch * args.rollout_steps)]
    from icw.precision import use_bf16

    bf16 = use_bf16("cpu")
    config = SDLPConfig(output_dir=tempfile.mkdtemp(), report_to="none", use_cpu=True, top_k_wip=0, bf16=bf16,
                        loss_chunk_size=512, max_response_length=args.response_tokens + 1, learning_rate=2e-4)
    lora = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, target_modules="all-linear") if args.lora_r else None
    trainer = SDLPTrainer(model, config, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                          peft_config=lora)
    policy = trainer.model
    policy.train()
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=2e-4)
    features = [trainer.train_dataset[i] for i in range(args.batch)]
    group = [trainer.train_dataset[i] for i in range(args.batch * args.rollout_steps)]
    mixed = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)  # noqa: E731 (as the Trainer does)
    timer = PhaseTimer()
    sampled: list[float] = []
    gather = lambda h, pos: h.gather(1, pos[..., None].expand(-1, -1, h.shape[-1]))  # noqa: E731
    for _ in range(args.steps + 1):
        start = time.perf_counter()
        with timer.phase("collate"):
            inputs = trainer.data_collator(features)
        with timer.phase("teacher forward"), mixed():
            t_hidden, t_head = trainer._teacher_hidden(policy, inputs)
        with timer.phase("student forward"), mixed():
            s_hidden = _final_hidden(policy, inputs["student_input_ids"], inputs["student_attention_mask"])
        with timer.phase("loss (chunked KL)"), mixed():
            loss = chunked_sdlp_loss(gather(s_hidden, inputs["student_positions"]),
                                     gather(t_hidden, inputs["teacher_positions"]), _head_fn(policy), t_head,
                                     inputs["response_mask"], inputs["bias_rows"], inputs["bias_values"],
                                     inputs["bias_index"], inputs["top_k"], config.loss_chunk_size)
        with timer.phase("backward"):
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        with timer.phase("optimizer"):
            optimizer.step()
        total = time.perf_counter() - start
        # an on-policy step (lmbda) first replaces the responses by the student's own samples: rollout_steps
        # steps' rows in one generate() call, so a step's share is the call's time / rollout_steps
        with timer.phase("on-policy sampling"):
            seeds = batch_seeds(trainer, 0, 0, len(group))
            batch = on_policy_batches(trainer, policy, [trainer.data_collator(group)], [seeds])[0]
            sampled.append(batch["response_mask"].sum(1).float().mean().item())
        timer.current["on-policy sampling"] /= args.rollout_steps
        if args.rollout_steps > 1:  # beside it, one step's rows alone in their generate() (rollout_steps 1)
            with timer.phase("on-policy sampling, rollout_steps 1"):
                on_policy_batches(trainer, policy, [inputs], [batch_seeds(trainer, 0, 0, args.batch)])
        timer.end_step(total)
    shape = (f"{args.batch} rows: teacher {len(features[0]['teacher_prompt_ids'])} + {len(features[0]['response_ids'])}, "
             f"student {len(features[0]['student_prompt_ids'])} + {len(features[0]['response_ids'])} tokens, "
             + (f"LoRA r {args.lora_r}" if args.lora_r else "full fine-tuning"))
    medians = timer.medians()
    medians["sampled tokens"] = statistics.median(sampled[1:] or sampled)
    return medians, shape


def grpo_step(model: Any, tokenizer: Any, args: argparse.Namespace) -> tuple[dict[str, float], str]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig

    from icw.train.common import set_precision
    from icw.train.grpo import ICWReward, grpo_dataset, seeded_grpo_trainer

    dataset = grpo_dataset(Dataset.from_list(wip_rows(tokenizer, args.prompts * (args.steps + 1))), tokenizer)
    config = GRPOConfig(output_dir=tempfile.mkdtemp(), report_to="none", use_cpu=True, loss_type="grpo",
                        learning_rate=1e-5, num_generations=args.generations,
                        per_device_train_batch_size=args.generations * args.prompts,
                        max_completion_length=args.completion_tokens,
                        generation_kwargs={"min_new_tokens": args.completion_tokens}, max_steps=args.steps + 1,
                        logging_steps=1000, save_strategy="no", disable_tqdm=True, seed=0,
                        gradient_checkpointing=args.gradient_checkpointing)
    set_precision(config)  # as the recipes do: trl's bf16 default is several times slower here
    timer = PhaseTimer()

    class StepClock(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.start = time.perf_counter()

        def on_pre_optimizer_step(self, *a: Any, **k: Any) -> None:
            self.opt = time.perf_counter()

        def on_optimizer_step(self, *a: Any, **k: Any) -> None:
            timer.current["optimizer"] += time.perf_counter() - self.opt

        def on_step_end(self, *a: Any, **k: Any) -> None:
            timer.end_step(time.perf_counter() - self.start)

    lora = LoraConfig(r=args.grpo_lora_r, lora_alpha=2 * args.grpo_lora_r, target_modules="all-linear") \
        if args.grpo_lora_r else None
    trainer = seeded_grpo_trainer()(model=model, reward_funcs=[ICWReward(tokenizer, min_completion_tokens=1)],
                                    args=config, train_dataset=dataset, processing_class=tokenizer,
                                    callbacks=[StepClock()], peft_config=lora)
    timer.wrap(trainer, "_generate_single_turn", "generation")
    timer.wrap(trainer, "_calculate_rewards", "reward")
    timer.wrap(trainer, "_get_per_token_logps_and_entropies", "forward (log-probs, grad)", torch.is_grad_enabled)
    timer.wrap(trainer, "_get_per_token_logps_and_entropies", "forward (log-probs, no grad)",
               lambda: not torch.is_grad_enabled())
    timer.wrap(trainer.accelerator, "backward", "backward")
    trainer.train()
    prompt_len = len(prompt_ids(tokenizer, dataset[0]["prompt"][0]["content"]))
    weights = f"LoRA r {args.grpo_lora_r}" if args.grpo_lora_r else "all weights"
    return timer.medians(), (f"{args.prompts} x {args.generations} x ({prompt_len} + {args.completion_tokens}) tokens, "
                             f"{weights}")


def paraphrase(model: Any, tokenizer: Any, args: argparse.Namespace) -> dict[str, float]:
    import torch

    from icw.bench.attacks import EndpointAttack
    from icw.bench.backends import ChatClient
    from icw.bench.server import serve_in_thread
    from icw.rewriting import PARAPHRASE_PROMPT

    server, url = serve_in_thread(model, tokenizer, "smollm2")
    try:
        attack = EndpointAttack("paraphrase", ChatClient(url, "smollm2", temperature=0.0),
                                max_tokens=args.completion_tokens)
        attack_times, tokens = [], []
        for _ in range(args.steps + 1):
            start = time.perf_counter()
            out, _ = attack([PARAPHRASE_SOURCE])
            attack_times.append(time.perf_counter() - start)
            tokens.append(len(tokenizer(out[0] or "", add_special_tokens=False)["input_ids"]))
    finally:
        server.shutdown()
    n = max(1, int(statistics.median(tokens)))
    ids = torch.tensor([prompt_ids(tokenizer, PARAPHRASE_PROMPT.replace("{text}", PARAPHRASE_SOURCE))])
    gen = []
    for _ in range(args.steps + 1):
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                           min_new_tokens=n, pad_token_id=tokenizer.pad_token_id)
        gen.append(time.perf_counter() - start)
    return {"paraphrase": statistics.median(attack_times[1:]), "generate": statistics.median(gen[1:]), "tokens": n}


def prompt_ids(tokenizer: Any, content: str) -> list[int]:
    from icw.generation import chat_prompt

    return tokenizer(chat_prompt(tokenizer, content), add_special_tokens=False)["input_ids"]


def load(name: str) -> tuple[Any, Any]:
    from icw.models import load_model, load_tokenizer

    if name == "tiny":
        from icw.testing import tiny_random_model

        tok = load_tokenizer("qwen3")
        return tiny_random_model("qwen3"), tok
    return load_model(name)


def measure(model: Any, tok: Any, prompt: list[int], args: argparse.Namespace) -> dict[str, Any]:
    """Every section asked for, under the precision ``ICW_PRECISION`` names (:mod:`icw.precision`)."""
    import copy

    sections = set(args.sections.split(","))
    rows: list[list[Any]] = []
    rollouts = args.generations * args.prompts  # the floor writes a GRPO step's completions in one batch
    base = floor(model, tok, prompt, rollouts, args.completion_tokens, args.steps) if "floor" in sections else None
    if base:
        rows += [["floor", "generate (KV cache)", base["generate"], base["shape"]],
                 ["floor", "forward, no grad", base["forward"], base["shape"]]]
    sdlp = None
    if "sdlp" in sections:
        sdlp, shape = sdlp_step(copy.deepcopy(model), tok, args)
        sdlp["step"] = sdlp["total"] + sdlp["on-policy sampling"]
        rows += [["SDLP", name, sdlp[name], shape if name == "total" else ""]
                 for name in ("collate", "teacher forward", "student forward", "loss (chunked KL)", "backward",
                              "optimizer", "total")]
        rows.append(["SDLP", "on-policy sampling", sdlp["on-policy sampling"],
                     f"{args.batch * args.rollout_steps} rows in one generate() / {args.rollout_steps} steps; "
                     f"{sdlp['sampled tokens']:.0f} tokens a row (median)"])
        if args.rollout_steps > 1:
            sdlp["step, rollout_steps 1"] = sdlp["total"] + sdlp["on-policy sampling, rollout_steps 1"]
            rows.append(["SDLP", "on-policy sampling, rollout_steps 1", sdlp["on-policy sampling, rollout_steps 1"],
                         f"{args.batch} rows in one generate() (rollout_steps 1)"])
            rows.append(["SDLP", "on-policy step, rollout_steps 1", sdlp["step, rollout_steps 1"], ""])
        rows.append(["SDLP", f"on-policy step, rollout_steps {args.rollout_steps}", sdlp["step"], ""])
    grpo = None
    if "grpo" in sections:
        grpo, shape = grpo_step(copy.deepcopy(model), tok, args)
        grpo["other"] = grpo["total"] - sum(v for k, v in grpo.items() if k != "total")
        rows += [["GRPO", name, grpo[name], shape if name == "total" else ""]
                 for name in ("generation", "reward", "forward (log-probs, no grad)", "forward (log-probs, grad)",
                              "backward", "optimizer", "other", "total") if name in grpo]
    speedups = decode(model, tok, prompt, args.generations, args.completion_tokens, args.steps, args.compile) \
        if "decode" in sections else None
    for v in speedups or []:
        rows.append(["decode", v["variant"], v["generate"],
                     f"{v['generate'] / speedups[0]['generate']:.2f}x the floor; first call {v['first']:.1f} s; "
                     f"KL {v['kl']:.2g} nats/token"])
    para = paraphrase(model, tok, args) if "paraphrase" in sections else None
    if para:
        rows += [["paraphrase", "one request through the local server", para["paraphrase"],
                  f"{para['tokens']} new tokens"],
                 ["paraphrase", "generate of the same tokens, batch 1", para["generate"], ""]]
    return {"floor": base, "sdlp": sdlp, "grpo": grpo, "paraphrase": para, "decode": speedups, "rows": rows}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="smollm2 (embedded), a local folder, or tiny")
    parser.add_argument("--steps", type=int, default=3, help="measured steps per section (after one warm-up)")
    parser.add_argument("--batch", type=int, default=4, help="SDLP rows per step")
    parser.add_argument("--rollout-steps", type=int, default=1, help="SDLP steps whose on-policy rows are sampled "
                        "in one generate() (the CPU recipe: 8)")
    parser.add_argument("--response-tokens", type=int, default=112, help="SDLP response tokens per row")
    parser.add_argument("--lora-r", type=int, default=16, help="SDLP LoRA rank (0: full fine-tuning, a frozen teacher copy)")
    parser.add_argument("--generations", type=int, default=4, help="GRPO completions per prompt")
    parser.add_argument("--prompts", type=int, default=1, help="GRPO prompts per step (the CPU recipe: 8 x 4)")
    parser.add_argument("--grpo-lora-r", type=int, default=16, help="GRPO LoRA rank on every linear layer "
                        "(0: all weights, as the CPU recipe)")
    parser.add_argument("--completion-tokens", type=int, default=120, help="GRPO completion / paraphrase tokens")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=False,
                        help="GRPO with gradient checkpointing (trl turns it off around generation)")
    parser.add_argument("--sections", default="floor,sdlp,grpo,paraphrase",
                        help="comma-separated: floor, sdlp, grpo, paraphrase, decode (rollout speed-ups)")
    parser.add_argument("--precision", default="auto", help="comma-separated: auto (icw.precision's decision), fp32, "
                        "bf16; several are measured one after the other in this process, with their ratios")
    parser.add_argument("--compile", action="store_true", help="decode: add a static KV cache under torch.compile")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny random model, one step, 16 tokens")
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.steps, args.batch, args.generations = "tiny", 1, 2, 2
        args.response_tokens = args.completion_tokens = 16
    import torch

    from icw import ICWKey
    from icw.precision import PRECISIONS, describe

    precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    if not precisions or not set(precisions) <= set(PRECISIONS):
        parser.error(f"--precision {args.precision}: choose from {', '.join(PRECISIONS)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok = load(args.model)
    prompt = prompt_ids(tok, ICWKey.from_string(wip_rows(tok, 1)[0]["key"]).prompt(QUERIES[0], tok))
    print(f"model {args.model}, torch {torch.__version__}, {torch.get_num_threads()} threads, load "
          f"{os.getloadavg()[0]:.2f}; medians of {args.steps} steps after one warm-up\n", flush=True)
    results: dict[str, Any] = {}
    before = os.environ.get("ICW_PRECISION")
    try:
        for precision in precisions:
            os.environ["ICW_PRECISION"] = precision
            torch.manual_seed(0)
            results[precision] = measure(model, tok, prompt, args)
            results[precision]["describe"] = describe("cpu")
    finally:
        os.environ.pop("ICW_PRECISION")
        if before is not None:
            os.environ["ICW_PRECISION"] = before
    if len(precisions) > 1:  # one column per precision, and the first's time over the last's
        first, last = (results[p]["rows"] for p in (precisions[0], precisions[-1]))
        table = [[a[0], a[1], f"{a[2]:.2f}", f"{b[2]:.2f}", f"{a[2] / b[2]:.2f}x" if b[2] else "", a[3]]
                 for a, b in zip(first, last, strict=True)]
        print(markdown_table(["section", "phase", f"{precisions[0]} s", f"{precisions[-1]} s",
                              f"{precisions[0]} / {precisions[-1]}", "shape"], table))
    else:
        print(markdown_table(["section", "phase", "median s", "shape"],
                             [[r[0], r[1], f"{r[2]:.2f}", r[3]] for r in results[precisions[0]]["rows"]]))
    print()
    for name in precisions:
        res = results[name]
        grpo, base, sdlp, para = res["grpo"], res["floor"], res["sdlp"], res["paraphrase"]
        print(f"{res['describe']}:")
        if grpo and base:
            print(f"  GRPO step / generate floor: {grpo['total'] / base['generate']:.2f}x (target <= 2x); "
                  f"GRPO's own generation / floor: {grpo['generation'] / base['generate']:.2f}x")
        if sdlp and args.rollout_steps > 1:
            print(f"  SDLP on-policy step, rollout_steps 1 / rollout_steps {args.rollout_steps}: "
                  f"{sdlp['step, rollout_steps 1'] / sdlp['step']:.2f}x")
        if sdlp:
            off, on = sdlp["total"], sdlp["step"]
            print(f"  SDLP on-policy step / off-policy step: {on / off:.2f}x; lmbda 1.0 step / lmbda 0.5 step (mean): "
                  f"{on / ((on + off) / 2):.2f}x")
        if para:
            print(f"  paraphrase / generate: {para['paraphrase'] / para['generate']:.2f}x (target <= 1.5x)")
    first, last = results[precisions[0]]["sdlp"], results[precisions[-1]]["sdlp"]
    if len(precisions) > 1 and first and last:  # the recipe before (first precision, one step's rows a generate)
        before = first.get("step, rollout_steps 1", first["step"])
        print(f"SDLP step: {precisions[0]} with rollout_steps 1 / {precisions[-1]} with rollout_steps "
              f"{args.rollout_steps}: {before / last['step']:.2f}x")
    return results if len(precisions) > 1 else results[precisions[0]]


if __name__ == "__main__":
    main()
