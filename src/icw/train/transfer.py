"""Prefix-independent SDLP targets (issue 16): key relabelling and on-policy batches.

Off-policy ``D_H1`` answers were written under their key's bias, so the response prefix reveals
the key and a student can lower the SDLP loss without reading the instruction. Relabelling trains
each answer under a fresh, independent key; on-policy batches replace the answers by the student's
own samples. Both are switched on by :class:`~icw.train.sdlp_config.SDLPConfig` fields
(``relabel_keys``, ``relabel_num_keys``, ``relabel_curriculum``, ``lmbda``) and used by :class:`~icw.train.sdlp.SDLPTrainer`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from transformers import LogitsProcessorList

from ..keys import FAMILIES, ICWKey, as_key
from .sampling import RowSeededSampling

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
def on_policy_batch(trainer: Any, model: Any, inputs: dict[str, Any], seeds: Sequence[int]) -> dict[str, Any]:
    """The same rows with responses sampled by the student from its own prompt (``transformers``
    ``generate``), re-collated: the teacher then scores the student's own tokens, its ``Delta_t``
    (WIP/TSP mask, SA replay) follows them, and nothing of the off-policy answer remains.

    Args:
        trainer (`SDLPTrainer`): gives the tokenizer, collator and generation settings.
        model: the student that samples the responses.
        inputs (`dict`): a collated batch carrying its :class:`Rows` under ``"rows"``.
        seeds (`Sequence[int]`): one sampling seed per row (:class:`~icw.train.sampling.RowSeededSampling`).
    """
    rows = inputs["rows"].rows
    tok = trainer.processing_class
    prompts = [list(r["student_prompt_ids"]) for r in rows]
    width = max(len(p) for p in prompts)
    pad = trainer.data_collator.pad_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=trainer.accelerator.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=trainer.accelerator.device)
    max_new = trainer.args.on_policy_max_new_tokens or max(trainer.args.max_response_length - 1, 1)
    unwrapped = trainer.accelerator.unwrap_model(model)
    was_training = unwrapped.training
    unwrapped.eval()
    try:
        sampler = RowSeededSampling(seeds, temperature=trainer.args.on_policy_temperature)
        out = unwrapped.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new,
                                 logits_processor=LogitsProcessorList([sampler]), pad_token_id=pad,
                                 eos_token_id=tok.eos_token_id, use_cache=True)
    finally:
        unwrapped.train(was_training)
    features = []
    for r, seq in zip(rows, out[:, width:].tolist(), strict=True):
        cut = seq.index(tok.eos_token_id) if tok.eos_token_id in seq else len(seq)
        features.append({**r, "response_ids": seq[:cut] + [tok.eos_token_id]})
    return trainer.data_collator(features)
