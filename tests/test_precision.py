"""icw.precision: the one decision (bf16 autocast where native, fp32 where emulated), and that it does not change
what a short SDLP run learns or how a GRPO step updates (a tiny random Qwen3 with the real Qwen3 tokenizer)."""

from __future__ import annotations

import pytest
import torch

from icw import ICWKey, precision


def test_decoding_follows_the_decision(monkeypatch):
    """autocast() is bf16 exactly where use_bf16 says so, and a no-op elsewhere."""
    for choice, expected in (("fp32", None), ("bf16", torch.bfloat16)):
        monkeypatch.setenv("ICW_PRECISION", choice)
        with precision.autocast("cpu"):
            assert (torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None) == expected
            out = torch.nn.Linear(4, 4)(torch.ones(1, 4))
        assert out.dtype == (expected or torch.float32)
    monkeypatch.setenv("ICW_PRECISION", "auto")
    assert precision.use_bf16("cpu") == precision.native_bf16("cpu")
    assert precision.describe("cpu").startswith("bf16 autocast" if precision.native_bf16("cpu") else "fp32")
    info = precision.machine()
    assert info["cores"] >= 1 and info["cpu"] and info["precision"] == precision.describe("cpu")


def test_a_short_sdlp_run_learns_the_same_in_bf16_and_fp32(tiny_qwen, tmp_path):
    """Twenty steps on one WIP key from the same start and data: the KL to the biased teacher falls by the same
    amount in both precisions (the CPU recipe's precision must not change what it learns)."""
    from datasets import Dataset

    from icw.testing import tiny_random_model
    from icw.train.sdlp import SDLPConfig, SDLPTrainer

    _, tok = tiny_qwen
    key = ICWKey.create("wip", seed=1_000_000, tokenizer=tok).to_string()
    answer = "Bright light bends because beams break between bubbles. " * 3
    queries = ["Why is the sky blue?", "How do bees make honey?", "What causes tides?", "Why do cats purr?"]
    rows = Dataset.from_list([{"family": "wip", "key": key, "query": q, "response": answer, "label": 1}
                              for q in queries * 4])

    def losses(bf16: bool) -> list[float]:
        torch.manual_seed(0)
        config = SDLPConfig(output_dir=str(tmp_path / str(bf16)), report_to="none", use_cpu=True, bf16=bf16,
                            max_steps=20, per_device_train_batch_size=4, learning_rate=1e-3, logging_steps=1,
                            save_strategy="no", max_response_length=24, seed=0, disable_tqdm=True)
        trainer = SDLPTrainer(tiny_random_model("qwen3").train(), config, train_dataset=rows, processing_class=tok)
        trainer.train()
        return [h["loss"] for h in trainer.state.log_history if "loss" in h]

    fp32, bf16 = losses(False), losses(True)
    start, end = (sum(x[:4]) / 4 for x in (fp32, bf16)), (sum(x[-4:]) / 4 for x in (fp32, bf16))
    (fp32_start, bf16_start), (fp32_end, bf16_end) = start, end
    assert fp32_start == pytest.approx(bf16_start, rel=0.05)  # the same start, up to bf16 rounding
    assert fp32_end < 0.7 * fp32_start and bf16_end < 0.7 * bf16_start  # both learn
    assert bf16_end == pytest.approx(fp32_end, rel=0.15)  # and the same amount


def test_a_grpo_step_updates_the_same_in_bf16_and_fp32(tmp_path):
    """One GRPO step (icw's reward, per-row seeded sampling, plain SGD so the update is the gradient) from the same
    start: bf16 autocast samples the same completions, gets the same rewards and moves the weights the same way."""
    from datasets import Dataset
    from trl import GRPOConfig

    from icw.models import load_tokenizer
    from icw.testing import tiny_random_model
    from icw.train.grpo import ICWReward, grpo_dataset, seeded_grpo_trainer

    tok = load_tokenizer("qwen3")
    queries = ["Why is the sky blue?", "How do bees make honey?", "What causes tides?", "Why do cats purr?"]
    rows = Dataset.from_list([{"family": "wip", "key": ICWKey.create("wip", seed=1_000_000 + i, tokenizer=tok)
                               .to_string(), "query": q, "response": "", "label": 1} for i, q in enumerate(queries)])
    prompts = grpo_dataset(rows, tok)

    def step(bf16: bool) -> tuple[torch.Tensor, float]:
        torch.manual_seed(0)
        model = tiny_random_model("qwen3").train()
        start = {n: p.detach().clone() for n, p in model.named_parameters()}
        args = GRPOConfig(output_dir=str(tmp_path / str(bf16)), report_to="none", use_cpu=True, bf16=bf16,
                          max_steps=1, per_device_train_batch_size=8, num_generations=2, max_completion_length=24,
                          learning_rate=0.1, optim="sgd", logging_steps=1, save_strategy="no", seed=0,
                          disable_tqdm=True, loss_type="grpo", beta=0.0)
        trainer = seeded_grpo_trainer()(model=model, reward_funcs=[ICWReward(tok, min_completion_tokens=4)],
                                        args=args, train_dataset=prompts, processing_class=tok)
        assert trainer.accelerator.mixed_precision == ("bf16" if bf16 else "no")
        trainer.train()
        update = torch.cat([(p.detach() - start[n]).flatten() for n, p in model.named_parameters()])
        return update, next(h["reward"] for h in trainer.state.log_history if "reward" in h)

    (fp32, fp32_reward), (bf16, bf16_reward) = step(False), step(True)
    assert bf16_reward == pytest.approx(fp32_reward, abs=0.05)  # the same completions, scored alike
    assert torch.nn.functional.cosine_similarity(fp32, bf16, dim=0) > 0.99
    assert bf16.norm() == pytest.approx(fp32.norm().item(), rel=0.05) and fp32.norm() > 0
