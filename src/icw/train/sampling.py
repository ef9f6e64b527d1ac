r"""Sampling whose randomness belongs to each row, so that a run gives the same samples on 1 or N processes.

On-policy SDLP and GRPO sample their training answers. With ``do_sample=True`` the noise comes from
the process's global random state: one process drawing rows ``[a, b]`` and two processes drawing
``[a]`` and ``[b]`` (each seeded alike) sample different answers, so a run's curve depends on how
its batch was split. Here every row gets its own generator, seeded by the run's seed, the optimizer
step and the row's place in the global batch, and the sample is drawn with the Gumbel-max trick:

    y_t = argmax_v ( w(s_t)_v + g_{t,v} ),   g_{t,v} ~ Gumbel(0, 1) i.i.d. from the row's generator

where ``s_t`` are the row's next-token scores and ``w`` the warpers (temperature, then top-k / top-p /
min-p). ``y_t`` is an exact sample of ``softmax(w(s_t))``, drawn by greedy decoding (``do_sample=False``)
of the perturbed scores, so the row's tokens depend on its seed alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)


def row_seeds(seed: int, step: int, first_row: int, num_rows: int) -> list[int]:
    """Seeds of ``num_rows`` consecutive rows of a global batch, from the row's place alone.

    Args:
        seed (`int`): the run's seed.
        step (`int`): the optimizer step the batch belongs to.
        first_row (`int`): the global index of the first row (``process_index * local_rows`` for an even split).
        num_rows (`int`): how many rows.

    Example:
        >>> row_seeds(0, 5, 0, 4)[2:] == row_seeds(0, 5, 2, 2)   # rows 2-3 whichever process holds them
        True
    """
    return [int(np.random.SeedSequence([seed, step, first_row + i]).generate_state(1, np.uint64)[0] >> 1)
            for i in range(num_rows)]


class RowSeededSampling(LogitsProcessor):
    r"""Turns greedy decoding into sampling with one random generator per row (see the module docstring).

    Args:
        seeds (`Sequence[int]`): one seed per batch row (:func:`row_seeds`).
        temperature (`float`, defaults to 1.0): divides the scores before the Gumbel noise.
        top_k (`int`, defaults to 0): keep the k highest scores (0: all).
        top_p (`float`, defaults to 1.0): keep the smallest set of tokens with this much probability.
        min_p (`float`, *optional*): drop tokens below this fraction of the top token's probability.

    Example:
        >>> scores = torch.tensor([[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]])
        >>> a = RowSeededSampling([7, 8])(torch.zeros(2, 1, dtype=torch.long), scores.clone()).argmax(-1)
        >>> b = RowSeededSampling([8])(torch.zeros(1, 1, dtype=torch.long), scores[1:].clone()).argmax(-1)
        >>> bool(a[1] == b[0])   # row 1's sample does not depend on row 0 being in the batch
        True
    """

    def __init__(self, seeds: Sequence[int], temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                 min_p: float | None = None) -> None:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 to sample, got {temperature}")
        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        warpers: list[LogitsProcessor] = []
        if temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(temperature))
        if top_k:
            warpers.append(TopKLogitsWarper(top_k))
        if top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p))
        if min_p:
            warpers.append(MinPLogitsWarper(min_p))
        self.warpers = LogitsProcessorList(warpers)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if scores.shape[0] != len(self.generators):
            raise ValueError(f"{scores.shape[0]} rows to sample but {len(self.generators)} seeds")
        scores = self.warpers(input_ids, scores.float())
        tiny = torch.finfo(torch.float32).tiny
        uniform = torch.stack([torch.rand(scores.shape[-1], generator=g) for g in self.generators])
        gumbel = -torch.log(-torch.log(uniform.clamp_min(tiny)))
        return scores + gumbel.to(scores.device)


@contextlib.contextmanager
def row_seeded_generation(model: Any, seeds: Sequence[int]) -> Iterator[None]:
    """Within the block, ``model.generate(..., generation_config=c)`` samples each row from its own seed with
    ``c``'s temperature, top-k, top-p and min-p (for trainers that call ``generate`` themselves, as trl's
    ``GRPOTrainer`` does).

    Args:
        model: the model whose ``generate`` the block wraps (an instance attribute, removed on exit).
        seeds (`Sequence[int]`): one seed per row of the batch the block generates (:func:`row_seeds`).
    """
    original = model.generate

    def generate(*args: Any, generation_config: Any = None, **kwargs: Any) -> Any:
        source = generation_config if generation_config is not None else model.generation_config
        greedy = source.__class__.from_dict({**source.to_dict(), "do_sample": False, "temperature": None,
                                             "top_k": None, "top_p": None, "min_p": None})
        sampler = RowSeededSampling(seeds, source.temperature or 1.0, source.top_k or 0,
                                    1.0 if source.top_p is None else source.top_p, source.min_p)
        kwargs.pop("do_sample", None)
        processors = LogitsProcessorList([*(kwargs.pop("logits_processor", None) or []), sampler])
        return original(*args, generation_config=greedy, logits_processor=processors, **kwargs)

    model.generate = generate
    try:
        yield
    finally:
        del model.generate
