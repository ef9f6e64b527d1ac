"""icw.precision: the one decision (bf16 autocast where native, fp32 where emulated), and that it does not change
what a short SDLP run learns (a tiny random Qwen3 with the real Qwen3 tokenizer, one WIP key, off-policy)."""

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
