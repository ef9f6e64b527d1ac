"""Row-seeded sampling (icw.train.sampling): an exact sample of the warped distribution, and the same tokens
for a row whatever batch (or process) it is generated in."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from transformers import GenerationConfig

from icw.train.sampling import RowSeededSampling, row_seeded_generation, row_seeds

SCORES = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])


def _draws(n: int, **warp: float) -> np.ndarray:
    sampler = RowSeededSampling(row_seeds(0, 0, 0, n), **warp)
    return sampler(torch.zeros(n, 1, dtype=torch.long), SCORES.repeat(n, 1)).argmax(-1).numpy()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_gumbel_max_draws_follow_the_softmax(temperature):
    n = 20_000
    counts = np.bincount(_draws(n, temperature=temperature), minlength=len(SCORES))
    expected = torch.softmax(SCORES.double() / temperature, -1).numpy() * n
    assert stats.chisquare(counts, expected).pvalue > 1e-3, (counts, expected)


def test_top_k_and_top_p_keep_only_their_tokens():
    assert set(_draws(4000, top_k=2)) == {0, 1}
    p = torch.softmax(SCORES, -1)  # 0.55, 0.20, 0.12, ...: top_p 0.7 keeps the first two
    assert set(_draws(4000, top_p=float(p[:2].sum()) - 0.01)) == {0, 1}


def test_seeds_depend_on_the_rows_place_alone():
    assert row_seeds(3, 7, 0, 6)[4:] == row_seeds(3, 7, 4, 2)
    assert len(set(row_seeds(3, 7, 0, 6) + row_seeds(3, 8, 0, 6) + row_seeds(4, 7, 0, 6))) == 18


def test_a_row_samples_the_same_tokens_in_any_batch(tiny_qwen):
    """Four prompts generated as one batch, and as two batches of two (as two processes would), give the same
    tokens row for row, though the batches pad differently; plain do_sample=True with one seed does not."""
    model, tok = tiny_qwen
    prompts = ["Why is the sky blue?", "Tides?", "How do bees make honey in a hive?", "Cats purr."]
    seeds = row_seeds(0, 2, 0, 4)

    def generate(rows: list[int], seeded: bool = True) -> list[list[int]]:
        tok.padding_side = "left"
        inputs = tok([prompts[i] for i in rows], return_tensors="pt", padding=True)
        config = GenerationConfig(max_new_tokens=6, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                  pad_token_id=tok.pad_token_id)
        if not seeded:
            torch.manual_seed(0)
            return model.generate(**inputs, generation_config=config)[:, inputs["input_ids"].shape[1]:].tolist()
        with row_seeded_generation(model, [seeds[i] for i in rows]):
            out = model.generate(**inputs, generation_config=config)
        return out[:, inputs["input_ids"].shape[1]:].tolist()

    whole = generate([0, 1, 2, 3])
    assert generate([0, 1]) + generate([2, 3]) == whole
    assert generate([2, 3]) == whole[2:]
    assert "generate" not in vars(model)  # the block restores the model's own generate
    assert generate([0, 1], seeded=False) + generate([2, 3], seeded=False) != generate([0, 1, 2, 3], seeded=False)
    with pytest.raises(ValueError, match="3 rows to sample but 2 seeds"):
        RowSeededSampling([1, 2])(torch.zeros(3, 1, dtype=torch.long), torch.zeros(3, 5))
