"""The training hyper-parameters: the one table the recipe configs take their defaults from.

The paper ("Learning to Follow In-Context Watermark Instructions via Self-Distillation", the
project's ``paper/icw-self-distillation.tex``) states the SDLP loss, top-k truncation and GRPO
objective and the synthesis strengths TSP/WIP 3.0, but none of the numbers below except GRPO's
loss: they are the authors' reference implementation's.
Synthesis strengths (3.0 / 3.0 / 8.0) are ``icw.keys.DEFAULT_DELTA``; the values below are the ones
used when *training*.
"""

from __future__ import annotations

#: SDLP teacher perturbation strength per family when training.
TRAIN_DELTA: dict[str, float] = {"tsp": 5.0, "wip": 3.0, "sa": 8.0}
#: SDLP teacher top-k support per family (``None``: the full vocabulary).
TRAIN_TOP_K: dict[str, int | None] = {"tsp": 1000, "wip": None, "sa": 1000}
#: SDLP optimisation: lr 7e-6, batch 8, 2-3 epochs.
SDLP_TRAINING: dict[str, float | int] = {"learning_rate": 7e-6, "per_device_train_batch_size": 8,
                                         "num_train_epochs": 2.0}
#: GRPO optimisation: lr 1e-6, 8 rollouts per prompt; the paper's per-sequence normalisation
#: (trl ``loss_type="grpo"``; trl's own default is ``"dapo"``).
GRPO_TRAINING: dict[str, float | int | str] = {"learning_rate": 1e-6, "num_generations": 8, "loss_type": "grpo"}
#: GRPO reward: completions shorter than this many tokens get the rejected reward (below any honest z).
GRPO_MIN_COMPLETION_TOKENS = 200
