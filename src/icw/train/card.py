"""The model card of a training run: the facts read from the trainer, written into the output folder and
every checkpoint folder by :class:`ModelCardCallback` (rendered by :func:`icw.cards.write_training_card`).

``Trainer.save_model`` and PEFT's ``save_pretrained`` write a blank template card (and trl writes its own
at each checkpoint); the recipes replace it with icw's, whose numbers come from the trainer's state, the
data it trained on and its arguments, never typed.
"""

from __future__ import annotations

import contextlib
import logging
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ..keys import FAMILIES

logger = logging.getLogger(__name__)

#: The trainer arguments a card lists, per recipe (``args`` fields, then a recipe's own settings).
SETTINGS = {
    "common": ("learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "num_train_epochs",
               "max_steps", "lr_scheduler_type", "seed"),
    "sdlp": ("max_response_length", "relabel_keys", "relabel_num_keys", "relabel_curriculum", "relabel_copies",
             "relabel_keep_original", "relabel_families", "lmbda"),
    "grpo": ("num_generations", "max_completion_length", "loss_type", "beta", "temperature"),
}


def _rows(dataset: Any) -> dict[str, dict[str, int]]:
    """Per family: the D_H1 and D_H0 rows of what the trainer trains on, and the distinct D_H1 keys."""
    columns = dataset.column_names
    families = dataset["family"]
    # SDLP's tokenized rows say which are watermarked; GRPO's prompts are all D_H1 rows (no label column)
    marked = dataset["watermarked"] if "watermarked" in columns else (
        [int(v) == 1 for v in dataset["label"]] if "label" in columns else [True] * len(families))
    keys = dataset["key"] if "key" in columns else [""] * len(families)
    rows: dict[str, dict[str, Any]] = {}
    for family, h1, key in zip(families, marked, keys, strict=True):
        got = rows.setdefault(family, {"h1": 0, "h0": 0, "keys": set()})
        got["h1" if h1 else "h0"] += 1
        if h1 and key:
            got["keys"].add(key)
    return {f: {**rows[f], "keys": len(rows[f]["keys"])} for f in FAMILIES if f in rows}


def _keys(recipe: str, args: Any, families: list[str]) -> str:
    if recipe == "sdlp" and getattr(args, "relabel_keys", False):
        stages = getattr(args, "relabel_curriculum", None)
        pool = (f"a curriculum of pools {' -> '.join(str(n or 'a key per row') for n in stages)}" if stages else
                f"a pool of {args.relabel_num_keys} per family" if args.relabel_num_keys else "a new key per row")
        copies = f"{args.relabel_copies} cop{'ies' if args.relabel_copies > 1 else 'y'} of each answer"
        chosen = getattr(args, "relabel_families", None) or families
        kept = [f.upper() for f in families if f not in chosen]
        which = "the D_H1 answers of " + ", ".join(f.upper() for f in families if f in chosen) if kept else \
            "each D_H1 answer"
        text = (f"{which} trained under fresh keys of its family (relabel_keys: {pool}, {copies}), "
                + ("beside the key that wrote it." if getattr(args, "relabel_keep_original", False) else
                   "not the key that wrote it."))
        if kept:
            text += f" {', '.join(kept)} under the keys that wrote them, in as many copies."
    elif recipe == "grpo":
        text = "each prompt carries its D_H1 row's key; the reward is the verifier's z under that key."
    else:
        text = "each D_H1 answer trained under the key that wrote it (D_cs's key column)."
    if getattr(args, "lmbda", 0):
        text += f" A fraction {args.lmbda} of batches is trained on the student's own samples (on-policy)."
    return text


def _plain(value: Any) -> Any:
    """A setting as JSON keeps it: an enum (``SchedulerType.LINEAR``) by its value."""
    value = getattr(value, "value", value)
    return value if isinstance(value, (bool, int, float, str)) else str(value)


def _versions() -> dict[str, str]:
    out = {}
    for name in ("icw", "torch", "transformers", "trl", "peft"):
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)
    return out


def training_facts(trainer: Any, recipe: str, data_args: Any, base_model: str,
                   settings: dict[str, Any] | None = None, rows: Any = None) -> dict[str, Any]:
    """What the card says about the run, read from ``trainer`` (arguments, data, state), not typed.

    Args:
        trainer (`transformers.Trainer`): the recipe's trainer, before or after training.
        recipe (`str`): ``"sdlp"``, ``"grpo"`` or ``"sft"``.
        data_args (`DCSArguments`): the data the recipe read.
        base_model (`str`): the policy's ``model_name_or_path`` (``smollm2``, a folder or a Hub id).
        settings (`dict`, *optional*): recipe settings outside ``trainer.args`` (GRPO's reward arguments).
        rows (`datasets.Dataset`, *optional*): the ``D_cs`` rows trained on, where the trainer's own dataset
            no longer names their families and keys (SFT's prompt-completion rows).
    """
    args, model = trainer.args, trainer.model
    peft_config = getattr(model, "peft_config", None)
    lora = (peft_config or {}).get("default")
    targets = lora.target_modules if lora is not None else None
    adapter = None if lora is None else {  # PEFT resolves "all-linear" to full module names: name the kinds
        "r": lora.r, "lora_alpha": lora.lora_alpha,
        "target_modules": sorted({str(t).rsplit(".", 1)[-1] for t in targets}) if isinstance(targets, (set, list))
        else [str(targets)]}
    rows = _rows(trainer.train_dataset if rows is None else rows)
    names = SETTINGS["common"] + SETTINGS.get(recipe, ())
    chosen = {name: getattr(args, name) for name in names if hasattr(args, name)}
    if recipe == "sdlp":
        for family in rows:
            chosen[f"delta_{family}"], chosen[f"top_k_{family}"] = args.delta(family), args.top_k(family) or "all"
    chosen.update(settings or {})
    out = Path(args.output_dir).resolve()
    return {
        "recipe": recipe, "model_id": args.hub_model_id if args.push_to_hub and args.hub_model_id else str(out),
        "output_dir": str(out), "base_model": str(base_model), "adapter": adapter,
        "dataset": {"name": data_args.dataset_name, "split": None if Path(data_args.dataset_name).exists()
                    else data_args.dataset_split, "max_rows": data_args.max_rows},
        "families": list(rows), "rows": rows, "keys": _keys(recipe, args, list(rows)),
        "settings": {k: _plain(v) for k, v in chosen.items() if v is not None}, "processes": args.world_size,
        "parallelism": trainer.accelerator.distributed_type.value,
        "versions": _versions(),
    }


def progress(state: Any, final: bool = False) -> dict[str, Any]:
    """The run's progress from ``TrainerState``: steps, epoch, the first and last logged loss (and GRPO's
    reward), and the mean training loss once training has ended.

    Args:
        state (`transformers.TrainerState`): the trainer's state.
        final (`bool`, defaults to `False`): whether training has ended (the output folder's card).
    """
    history = state.log_history
    logged = {name: [[h["step"], float(h[name])] for h in history if name in h and "step" in h]
              for name in ("loss", "reward")}
    train_loss = next((h["train_loss"] for h in reversed(history) if "train_loss" in h), None)
    return {"global_step": state.global_step, "max_steps": state.max_steps, "epoch": state.epoch,
            "final": final, "train_loss": train_loss,
            **{name: [pairs[0], pairs[-1]] if pairs else None for name, pairs in logged.items()}}


def write_card(folder: str | Path, facts: dict[str, Any], state: Any, final: bool = False,
               results: str | None = None) -> Path | None:
    """Write icw's card for the run into ``folder``; a failure is logged, never raised: a card is
    documentation, not worth a training run.

    Args:
        folder (`str` or `Path`): the output folder, or a ``checkpoint-*`` folder.
        facts (`dict`): :func:`training_facts`.
        state (`transformers.TrainerState`): the trainer's state at the save.
        final (`bool`, defaults to `False`): whether training has ended.
        results (`str`, *optional*): ``results.json`` of ``icw bench report`` for the trained model.
    """
    from ..cards import write_training_card

    try:
        return write_training_card({**facts, "progress": progress(state, final)}, folder, results)
    except Exception as err:  # noqa: BLE001 (documented above: never lose a run to its card)
        logger.warning("could not write the model card into %s: %s", folder, err)
        return None


class ModelCardCallback(TrainerCallback):
    """Writes icw's card into each ``checkpoint-<step>`` folder as it is saved, over the blank one PEFT writes.

    Args:
        facts (`dict`): :func:`training_facts` of the run.
    """

    def __init__(self, facts: dict[str, Any]) -> None:
        self.facts = facts

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and folder.is_dir():
            write_card(folder, self.facts, state)
