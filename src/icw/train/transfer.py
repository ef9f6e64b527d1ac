"""Prefix-independent SDLP targets (issue 16): key relabelling and on-policy batches.

Off-policy ``D_H1`` answers were written under their key's bias, so the response prefix reveals
the key and a student can lower the SDLP loss without reading the instruction. Relabelling trains
each answer under a fresh, independent key; on-policy batches replace the answers by the student's
own samples. Both are switched on by :class:`~icw.train.sdlp_config.SDLPConfig` fields
(``relabel_keys``, ``relabel_num_keys``, ``relabel_curriculum``, ``lmbda``) and used by :class:`~icw.train.sdlp.SDLPTrainer`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import LogitsProcessorList

from ..keys import FAMILIES, ICWKey, as_key
from .sampling import RowSeededSampling, row_seeds

#: First key seed of relabelled training keys: inside the training pool (>= 1,000,000), apart from
#: the synthesis seeds (family offsets of 10,000,000 below 40,000,000).
RELABEL_SEED_OFFSET = 41_000_000


def relabel_key(key: ICWKey | str, tokenizer: Any, index: int, seed: int = 0, num_keys: int = 0) -> ICWKey:
    """The fresh training key of row ``index``: same family and parameters (TSP gamma and pool, WIP
    letter count, SA length) as ``key``, material drawn from an independent seed.

    Args:
        key (`ICWKey` or `str`): the key the row was written with.
        tokenizer: the tokenizer TSP/WIP keys are built for (``None`` for SA).
        index (`int`): the row's index.
        seed (`int`, defaults to 0): seed of the relabelling (a different seed gives different keys).
        num_keys (`int`, defaults to 0): draw from a pool of this many keys (0: a fresh key per row).

    Example:
        >>> old = ICWKey.create("sa", seed=1_000_003, length=19)
        >>> new = relabel_key(old, None, index=3)
        >>> (new.family, new.length, new.secret_string != old.secret_string)
        ('sa', 19, True)
    """
    key = as_key(key)
    slot = index if num_keys <= 0 else int(np.random.default_rng([seed, index, 11]).integers(num_keys))
    new_seed = RELABEL_SEED_OFFSET + FAMILIES.index(key.family) * 1_000_000 + (seed % 1000) * 10_000 + slot % 10_000
    params = {"tsp": {"gamma": key.gamma, "pool_size": key.pool_size}, "wip": {"num_letters": key.num_letters},
              "sa": {"length": key.length}}[key.family]
    return ICWKey.create(key.family, new_seed, tokenizer if key.family != "sa" else None, **params)


def relabel_keys(dataset: Any, tokenizer: Any, seed: int = 0, num_keys: int = 0, copies: int = 1,
                 keep_original: bool = False, families: Sequence[str] | None = None) -> Any:
    """``D_cs`` with every ``D_H1`` key replaced by :func:`relabel_key` (the writing key is kept in
    ``generating_key``); ``D_H0`` rows are unchanged.

    Args:
        dataset: ``D_cs`` (a ``datasets.Dataset``).
        tokenizer: the tokenizer TSP/WIP keys are built for.
        seed (`int`, defaults to 0): seed of the relabelling.
        num_keys (`int`, defaults to 0): draw from a pool of this many keys (0: a fresh key per row).
        copies (`int`, defaults to 1): each ``D_H1`` row appears this many times, each under its own
            fresh key (``D_H0`` rows once): more distinct key/response pairs from the same answers.
        keep_original (`bool`, defaults to `False`): also keep each row under the key that wrote it,
            before the ``copies`` relabelled copies of each ``D_H1`` row. (For SA this hurt: the relabelled
            copies teach a letter held across openings, docs/training-transfer.md.)
        families (`Sequence[str]` or `None`, defaults to `None`): relabel only these families' rows; the
            others' ``D_H1`` rows keep their writers' keys, in as many copies, so that every family keeps its
            share of ``D_cs`` (`None`: every family). A joint model wants WIP relabelled and SA not
            (docs/training-transfer.md).
    """
    import datasets

    def positive(row: dict[str, Any]) -> bool:
        return bool(int(row.get("label", 1)) and row.get("key"))

    def relabelled(row: dict[str, Any]) -> bool:
        return positive(row) and (families is None or row.get("family") in families)

    def relabel(ds: Any, offset: int) -> Any:
        def fresh(row: dict[str, Any], index: int) -> dict[str, Any]:
            old = row.get("key") or ""
            if not relabelled(row):
                return {"key": old, "generating_key": old}
            return {"key": relabel_key(old, tokenizer, offset + index, seed, num_keys).to_string(),
                    "generating_key": old}

        return ds.map(fresh, with_indices=True, desc="relabelling D_H1 keys")

    extra = copies if keep_original else copies - 1  # relabelled copies beside the first part
    positives = dataset.filter(positive) if extra else None
    if keep_original:
        first = dataset.map(lambda row: {"generating_key": row.get("key") or ""}, desc="keeping the writers' keys")
    else:
        first = relabel(dataset, 0)
    parts = [first] + [relabel(positives, copy * len(dataset)) for copy in range(1, extra + 1)]
    return datasets.concatenate_datasets(parts) if len(parts) > 1 else parts[0]


def relabel_curriculum(dataset: Any, tokenizer: Any, stages: Sequence[int], seed: int = 0, copies: int = 1,
                       families: Sequence[str] | None = None) -> Any:
    """``D_cs`` once per stage, in stage order: stage ``s`` is :func:`relabel_keys` with a pool of
    ``stages[s]`` keys per family (0: a key per row), shuffled within itself. Read in order (the trainer's
    sequential sampler), the student first learns one key, then a few, then keys it sees once.

    Args:
        dataset: ``D_cs`` (a ``datasets.Dataset``).
        tokenizer: the tokenizer TSP/WIP keys are built for.
        stages (`Sequence[int]`): pool size of each stage, e.g. ``[1, 8, 0]``.
        seed (`int`, defaults to 0): seed of the relabelling and of each stage's shuffle.
        copies (`int`, defaults to 1): copies of each ``D_H1`` row within a stage (as in :func:`relabel_keys`).
        families (`Sequence[str]` or `None`, defaults to `None`): the families relabelled (as in :func:`relabel_keys`).

    Example:
        >>> from datasets import Dataset
        >>> rows = Dataset.from_list([{"family": "sa", "key": ICWKey.create("sa", seed=1_000_000 + i).to_string(),
        ...                            "query": f"q{i}", "response": "A. B.", "label": 1} for i in range(6)])
        >>> staged = relabel_curriculum(rows, None, [1, 0])
        >>> len(set(staged["key"][:6])), len(set(staged["key"][6:]))
        (1, 6)
    """
    import datasets

    return datasets.concatenate_datasets([relabel_keys(dataset, tokenizer, seed + s, n, copies, families=families).shuffle(seed=seed + s)
                                          .flatten_indices() for s, n in enumerate(stages)])


class Rows:
    """The batch's rows (keys and prompt ids) riding along in the batch for on-policy resampling; an
    opaque object, so Trainer and accelerate pass it through instead of walking its lists.

    Args:
        rows (`list[dict]`): the batch's ``D_cs`` rows.
    """

    __slots__ = ("rows",)

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows


@torch.no_grad()
def on_policy_batches(trainer: Any, model: Any, batches: Sequence[dict[str, Any]],
                      seeds: Sequence[Sequence[int]]) -> list[dict[str, Any]]:
    """The same rows with responses sampled by the student from its own prompt, re-collated: the teacher then
    scores the student's own tokens, its ``Delta_t`` (WIP/TSP mask, SA replay) follows them, and nothing of the
    off-policy answer remains.

    The rows of all ``batches`` are sampled in one ``generate`` call: decoding on a CPU is memory-bound, so 32
    rows cost about three times 4 rows (``benchmarks/train_step.py``). Each row is sampled from its own seed, so
    how the rows are grouped into calls does not change what a given policy samples. Under bf16 training
    (``args.bf16``) decoding runs under bf16 autocast, as the training forward does.

    Args:
        trainer (`SDLPTrainer`): gives the tokenizer, collator and generation settings.
        model: the student that samples the responses.
        batches (`Sequence[dict]`): collated batches, each carrying its :class:`Rows` under ``"rows"``.
        seeds (`Sequence[Sequence[int]]`): per batch, one sampling seed per row
            (:class:`~icw.train.sampling.RowSeededSampling`).
    """
    rows = [r for inputs in batches for r in inputs["rows"].rows]
    tok = trainer.processing_class
    device = trainer.accelerator.device
    prompts = [list(r["student_prompt_ids"]) for r in rows]
    width = max(len(p) for p in prompts)
    pad = trainer.data_collator.pad_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    max_new = trainer.args.on_policy_max_new_tokens or max(trainer.args.max_response_length - 1, 1)
    unwrapped = trainer.accelerator.unwrap_model(model)
    was_training = unwrapped.training
    unwrapped.eval()
    try:
        sampler = RowSeededSampling([s for row_seeds in seeds for s in row_seeds],
                                    temperature=trainer.args.on_policy_temperature)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bool(trainer.args.bf16)):
            out = unwrapped.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new,
                                     logits_processor=LogitsProcessorList([sampler]), pad_token_id=pad,
                                     eos_token_id=tok.eos_token_id, use_cache=True)
    finally:
        unwrapped.train(was_training)
    features = []
    for r, seq in zip(rows, out[:, width:].tolist(), strict=True):
        cut = seq.index(tok.eos_token_id) if tok.eos_token_id in seq else len(seq)
        features.append({**r, "response_ids": seq[:cut] + [tok.eos_token_id]})
    bounds = np.cumsum([0] + [len(inputs["rows"].rows) for inputs in batches])
    return [trainer.data_collator(features[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def batch_seeds(trainer: Any, step: int, micro_batch: int, rows: int) -> list[int]:
    """The sampling seeds of one micro-batch's rows: :func:`icw.train.sampling.row_seeds` of the run's seed, the
    step and the rows' place in the step's global batch, so 1 or N processes draw the same seeds.

    Args:
        trainer (`SDLPTrainer`): gives the run's seed and the process layout.
        step (`int`): the optimizer step.
        micro_batch (`int`): the batch's place among its step's micro-batches on this process.
        rows (`int`): the batch's rows.
    """
    place = micro_batch * trainer.accelerator.num_processes + trainer.accelerator.process_index
    return row_seeds(trainer.args.seed, step, place * rows, rows)


def with_rollouts(trainer: Any, steps: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """The micro-batches of the coming optimizer steps (``steps[s]`` for step ``global_step + s``), those of
    on-policy steps with the student's own samples, all drawn in one ``generate`` call
    (:func:`on_policy_batches`).

    A step is on-policy with probability ``lmbda`` (as trl's GKD), by a draw that depends on (seed, step) alone,
    and each row keeps its own seed (:func:`batch_seeds`): what changes with ``rollout_steps`` is only the policy
    that samples, up to ``rollout_steps - 1`` updates old for the group's later steps. A checkpoint saved inside a
    group keeps the group's coming micro-batches (:func:`save_rollouts`), so a run resumed there trains on the
    samples the uninterrupted run trained on.

    Args:
        trainer (`SDLPTrainer`): the trainer; its model samples.
        steps (`list[list[dict]]`): per coming step, its collated micro-batches.
    """
    first, args = trainer.state.global_step, trainer.args
    chosen = [(s, m) for s, batches in enumerate(steps) for m in range(len(batches))
              if args.lmbda > 0 and random.Random(f"{args.seed}:{first + s}").random() < args.lmbda]
    if chosen:
        seeds = [batch_seeds(trainer, first + s, m, len(steps[s][m]["rows"].rows)) for s, m in chosen]
        sampled = on_policy_batches(trainer, trainer.model, [steps[s][m] for s, m in chosen], seeds)
        for (s, m), batch in zip(chosen, sampled, strict=True):
            steps[s][m] = batch
    return steps


#: A checkpoint's rollouts still to train on (one file per process): :func:`save_rollouts`.
ROLLOUTS_FILE = "sdlp_rollouts_{}.pt"


def save_rollouts(buffer: list[list[dict[str, Any]]], checkpoint: Path, process_index: int) -> None:
    """Keep the coming steps' micro-batches of the current rollout group in ``checkpoint``, so that a run resumed
    there trains on the samples the uninterrupted run trained on (:func:`load_rollouts`).

    Args:
        buffer (`list[list[dict]]`): per coming step, its collated micro-batches (empty: nothing is written).
        checkpoint (`Path`): the checkpoint folder being saved.
        process_index (`int`): this process's rank (each keeps its own rows).
    """
    if buffer:
        checkpoint.mkdir(parents=True, exist_ok=True)
        torch.save(buffer, checkpoint / ROLLOUTS_FILE.format(process_index))


def load_rollouts(checkpoint: str | bool | None, process_index: int) -> list[list[dict[str, Any]]]:
    """The rollouts :func:`save_rollouts` kept in ``checkpoint`` (a path; anything else, or a checkpoint saved at
    the end of a group: none).

    Args:
        checkpoint (`str`, `bool` or `None`): ``Trainer.train``'s ``resume_from_checkpoint``.
        process_index (`int`): this process's rank.
    """
    path = Path(checkpoint) / ROLLOUTS_FILE.format(process_index) if isinstance(checkpoint, str) else None
    return torch.load(path, weights_only=False) if path is not None and path.is_file() else []
