"""What every training recipe shares: reading D_cs, loading the policy, saving (and pushing) the result.

``recipes/sft.py``, ``recipes/sdlp.py`` and ``recipes/grpo.py`` parse :class:`DCSArguments` beside
their trl config and call :func:`load_policy` and :func:`train_and_save` (or :func:`save_and_push`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from ..argtypes import positive_int


def load_dcs(name: str, families: Sequence[str] | None = None, split: str = "train", label: int | None = None) -> Any:
    """Load ``D_cs``: a folder written by :func:`synthesize`, a parquet file, or a Hub dataset id.

    Args:
        name (`str`): a ``D_cs`` folder, a parquet file or a Hub dataset id.
        families (`Sequence[str]`, *optional*): keep only these families (default: all).
        split (`str`, defaults to ``"train"``): the split to read from a Hub dataset.
        label (`int`, *optional*): keep only ``D_H1`` (1) or ``D_H0`` (0) rows (default: both).
    """
    from datasets import Dataset, load_dataset

    path = Path(name)
    if path.is_dir() and (path / "data.parquet").exists():
        ds = Dataset.from_parquet(str(path / "data.parquet"))
    elif path.suffix == ".parquet" and path.exists():
        ds = Dataset.from_parquet(str(path))
    elif path.exists():
        raise ValueError(f"{path} holds no data.parquet: run `icw train synthesize --output_dir {path}` first")
    else:
        ds = load_dataset(name, split=split)
    if families:
        wanted = set(families)
        ds = ds.filter(lambda f: f in wanted, input_columns="family")
    if label is not None:
        ds = ds.filter(lambda v: int(v) == label, input_columns="label")
    if len(ds) == 0:
        raise ValueError(f"no rows left in {name} for families={families} label={label}")
    return ds


@dataclass
class DCSArguments:
    """Which cold-start data a training recipe reads (``recipes/sdlp.py``, ``grpo.py``, ``sft.py``).

    Parameters:
        dataset_name (`str`, defaults to ``"data/dcs"``): ``D_cs``: a folder written by ``icw train synthesize``,
            a parquet file, or a Hub dataset id.
        dataset_split (`str`, defaults to ``"train"``): the split to read when ``dataset_name`` is a Hub id.
        families (`list[str]`, *optional*): keep only these families (default: all).
        max_rows (`int`, *optional*): use at most this many rows (after shuffling).
        model_card_results (`str`, *optional*): ``results.json`` of ``icw bench report`` for the trained
            model; the output folder then gets a model card built from it.
    """

    dataset_name: str = field(
        default="data/dcs", metadata={"help": "D_cs: a folder written by `icw train synthesize`, a parquet file, "
                                              "or a Hub dataset id."})
    dataset_split: str = field(default="train", metadata={"help": "Split to read when dataset_name is a Hub id."})
    families: list[str] | None = field(default=None, metadata={"help": "Keep only these families (default: all)."})
    max_rows: int | None = field(default=None, metadata={"help": "Use at most this many rows (after shuffling)."})
    model_card_results: str | None = field(
        default=None, metadata={"help": "results.json of `icw bench report` for the trained model: the output folder "
                                        "then gets a model card (README.md, .eval_results/) built from it, which "
                                        "is what push_to_hub uploads."})

    def __post_init__(self) -> None:
        positive_int.require(self.max_rows, "--max_rows")
        self.dataset_name = os.path.expanduser(self.dataset_name)  # the configs keep D_cs under ~/.cache/icw/runs

    def load(self, label: int | None = None, seed: int = 0) -> Any:
        ds = load_dcs(self.dataset_name, self.families, self.dataset_split, label=label).shuffle(seed=seed)
        return ds.select(range(min(self.max_rows, len(ds)))) if self.max_rows else ds


def load_policy(model_args: Any) -> tuple[Any, Any]:
    """(model, tokenizer) for a trl ``ModelConfig``: ``smollm2`` is the embedded model, else a folder or Hub id.

    Args:
        model_args (`trl.ModelConfig`): names the model (``model_name_or_path``) and its loading options.
    """
    from ..models import load_model

    if not model_args.model_name_or_path:
        raise ValueError("set model_name_or_path (smollm2, a local folder or a Hub id)")
    dtype = model_args.dtype if model_args.dtype not in (None, "auto") else None
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    model, tokenizer = load_model(model_args.model_name_or_path, dtype=dtype)
    return model.train(), tokenizer


def set_precision(training_args: Any) -> None:
    """Decide the run's precision (:func:`icw.precision.resolve_training_precision`: bf16 autocast where the
    hardware has native bf16, fp32 where it would be emulated) and say which on stderr, from the main process.

    Args:
        training_args (`transformers.TrainingArguments`): its ``bf16`` and ``mixed_precision`` are set in place.
    """
    from ..precision import resolve_training_precision

    line = resolve_training_precision(training_args)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"icw: training in {line}", file=sys.stderr, flush=True)


def resume_checkpoint(training_args: Any) -> str | None:
    """What ``Trainer.train(resume_from_checkpoint=...)`` gets: a path as given, or for ``last`` (also ``true``,
    ``auto``) the newest complete ``checkpoint-*`` of ``output_dir``, ``None`` while there is none, so the same
    command starts a run and, after a kill, resumes it with the same data order, optimizer and RNG state.

    A checkpoint is complete once its ``trainer_state.json`` exists (the Trainer writes it last): a run killed
    while saving leaves a folder without it, which is skipped with a warning (transformers'
    ``get_last_checkpoint`` would pick it and the run would restart at step 0 from its weights).

    A checkpoint already at ``max_steps`` stops the run with a message: transformers' loop runs one step before it
    checks ``max_steps``, so resuming a finished run would silently train one step past it.

    Args:
        training_args (`transformers.TrainingArguments`): gives ``resume_from_checkpoint``, ``output_dir`` and
            ``max_steps``.
    """
    from transformers import TrainerState
    from transformers.trainer import TRAINER_STATE_NAME

    value = training_args.resume_from_checkpoint
    if isinstance(value, str) and value.lower() in ("last", "true", "auto"):
        value = newest_complete_checkpoint(Path(training_args.output_dir or "."))
    state = Path(value) / TRAINER_STATE_NAME if isinstance(value, str) else None
    if training_args.max_steps > 0 and state and state.is_file():
        step = TrainerState.load_from_json(str(state)).global_step
        if step >= training_args.max_steps:
            raise SystemExit(f"{value} is at step {step} of --max_steps {training_args.max_steps}: this run is "
                             "finished. Raise --max_steps to train it further, or give another --output_dir.")
    return value


class CommandStepsCallback(TrainerCallback):
    """Gives a resumed run this command's ``save_steps``, ``logging_steps`` and ``eval_steps``.

    transformers loads the checkpoint's ``TrainerState`` after it has read them from the arguments, so a run begun
    with ``--save_steps 100`` and resumed with ``--save_steps 50`` keeps saving every 100 steps and only warns
    (huggingface/transformers#28867): a checkpoint the user asked for would silently never exist.
    """

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        state.compute_steps(args, state.max_steps)


class CommandLearningRateCallback(TrainerCallback):
    """Gives a resumed run this command's ``learning_rate``.

    A checkpoint's optimizer and scheduler states hold the rate the run began with (every parameter group's
    ``lr`` and the scheduler's ``base_lrs``), and transformers loads them over the ones built from the command, so
    a run resumed with another ``--learning_rate`` would silently go on at the old rate. From the resumed step on,
    the rate becomes ``r' = r * learning_rate / base_lr`` (the schedule's shape, warm-up and decay, is unchanged):
    a run can lower its rate after a checkpoint. Optimizers whose groups start at different rates are left as the
    checkpoint has them, with a warning.
    """

    def on_train_begin(self, args: Any, state: Any, control: Any, optimizer: Any = None, lr_scheduler: Any = None,
                       **kwargs: Any) -> None:
        base = list(getattr(lr_scheduler, "base_lrs", None) or [])
        # a fresh run, or one resumed at its own rate (the checkpoint holds the command's float exactly)
        if not state.global_step or optimizer is None or not base or set(base) == {args.learning_rate}:
            return
        if len(set(base)) > 1:
            warnings.warn(f"resumed at step {state.global_step} with parameter groups at rates {base}: kept as the "
                          f"checkpoint has them, not --learning_rate {args.learning_rate:g}", stacklevel=2)
            return
        ratio = args.learning_rate / base[0]
        for group in optimizer.param_groups:
            group["lr"] *= ratio
            group["initial_lr"] = args.learning_rate
        lr_scheduler.base_lrs = [args.learning_rate] * len(base)
        lr_scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]  # what the Trainer logs
        warnings.warn(f"resumed at step {state.global_step}: learning rate {base[0]:g} -> {args.learning_rate:g} "
                      "(this command's --learning_rate) from here on", stacklevel=2)


class SaveOnSignalCallback(TrainerCallback):
    """Turns the first SIGINT or SIGTERM during training into a checkpoint of the step in flight and a clean stop.

    Ctrl-C, ``kill``, a scheduler's time limit or ``transfer_curve.py --train_seconds`` would otherwise lose every
    step since the last checkpoint. The first signal lets the current step finish, then the Trainer saves
    ``checkpoint-<step>`` as at any save step (so the same command resumes from it, with the curve of an
    uninterrupted run) and stops; a second signal acts at once, as it would without this callback. Under several
    processes the stop is agreed each step (an all-reduce of one flag), so every rank saves the same step.

    transformers' own ``enable_jit_checkpoint`` handles SIGTERM alone, and saves before the optimizer step of the
    step in flight; where it is on, SIGTERM is left to it. A signal the process ignores (``SIG_IGN``) stays ignored.
    """

    def __init__(self) -> None:
        self.received: int | None = None  # the signal's number, once any rank has one
        self.stopped_at: int | None = None
        self._signalled = False  # this process got one
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: Any) -> None:
        if self._signalled:  # the second signal: what the process would have done without us
            self.restore()
            signal.raise_signal(signum)
            return
        self._signalled, self.received = True, signum
        print(f"\n{signal.Signals(signum).name}: saving a checkpoint once this step ends, then stopping "
              "(send it again to stop at once)", file=sys.stderr, flush=True)

    def restore(self) -> None:
        """Put back the handlers the process had before training began."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # Python delivers signals to the main thread only
        wanted = [signal.SIGINT] + ([] if getattr(args, "enable_jit_checkpoint", False) else [signal.SIGTERM])
        for signum in wanted:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                self._previous[signum] = signal.signal(signum, self._handle)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            signum = torch.tensor([float(self.received or 0)], device=args.device)
            torch.distributed.all_reduce(signum, op=torch.distributed.ReduceOp.MAX)
            self.received = int(signum.item()) or None
        if self.received is not None and state.global_step < state.max_steps:
            control.should_save = control.should_training_stop = True
            self.stopped_at = state.global_step

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.restore()


def check_parallelism(trainer: Any) -> None:
    """Refuse a launch whose sharding accelerate did not apply, rather than train without it.

    accelerate (1.x) turns FSDP and DeepSpeed on for processes on GPUs and other accelerators only: launched with
    ``fsdp2.yaml`` on CPU processes, a run would silently train as plain data parallel.

    Args:
        trainer (`transformers.Trainer`): the recipe's trainer, prepared by accelerate.
    """
    for variable, applied, name in (("ACCELERATE_USE_FSDP", trainer.is_fsdp_enabled, "FSDP"),
                                    ("ACCELERATE_USE_DEEPSPEED", trainer.is_deepspeed_enabled, "DeepSpeed")):
        if os.environ.get(variable, "false").lower() == "true" and not applied:
            raise ValueError(f"the accelerate config asks for {name}, but accelerate applies it on GPUs only and these "
                             f"processes are {trainer.accelerator.distributed_type.value}: launch CPU processes with "
                             "--config_file recipes/accelerate_configs/cpu-ddp.yaml (data parallel) instead")


def train_resumable(trainer: Any) -> Any:
    """``trainer.train()`` from :func:`resume_checkpoint`'s checkpoint, saving, logging and at the learning rate this
    command says (:class:`CommandStepsCallback`, :class:`CommandLearningRateCallback`); returns what ``train``
    returns. A SIGINT or SIGTERM saves the step in flight and exits with status 128 + the signal's number
    (:class:`SaveOnSignalCallback`): the same command resumes from that checkpoint.

    Args:
        trainer (`transformers.Trainer`): the recipe's trainer, not yet trained.
    """
    check_parallelism(trainer)
    on_signal = SaveOnSignalCallback()
    for callback in (CommandStepsCallback(), CommandLearningRateCallback(), on_signal):
        trainer.add_callback(callback)
    try:
        result = trainer.train(resume_from_checkpoint=resume_checkpoint(trainer.args))
    finally:  # on_train_end does not run when training raises: the handlers go back all the same
        on_signal.restore()
    if on_signal.stopped_at is not None:
        if trainer.is_world_process_zero():
            print(f"stopped by {signal.Signals(on_signal.received).name} after step {on_signal.stopped_at} of "
                  f"{trainer.state.max_steps}: saved {Path(trainer.args.output_dir) / f'checkpoint-{on_signal.stopped_at}'}; "
                  "the same command with --resume_from_checkpoint last resumes from it", file=sys.stderr, flush=True)
        raise SystemExit(128 + on_signal.received)
    return result


def newest_complete_checkpoint(folder: Path) -> str | None:
    """The newest complete ``checkpoint-*`` of ``folder`` (``None`` while there is none), warning about newer torn
    ones.

    Args:
        folder (`Path`): a Trainer's ``output_dir``.
    """
    steps = checkpoints(folder, complete_only=False)
    complete = checkpoints(folder)
    last = max(complete, default=-1)
    torn = sorted(str(path) for step, path in steps.items() if step > last)
    if torn:
        warnings.warn(f"{', '.join(torn)}: no trainer_state.json, so saving was interrupted; resuming from "
                      f"{complete[last] if complete else 'the start'} (the folder is overwritten when that "
                      "step is saved again)", stacklevel=3)
    return str(complete[last]) if complete else None


def checkpoints(folder: Path, complete_only: bool = True) -> dict[int, Path]:
    """The ``checkpoint-<step>`` folders of a Trainer's ``output_dir`` by step; with ``complete_only``, those whose
    ``trainer_state.json`` exists (the Trainer writes it last, so a folder without it was torn by a kill).

    Args:
        folder (`Path`): the ``output_dir``.
        complete_only (`bool`): leave out torn checkpoints.
    """
    from transformers.trainer import TRAINER_STATE_NAME
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    found = {int(p.name.rsplit("-", 1)[1]): p for p in folder.glob(f"{PREFIX_CHECKPOINT_DIR}-*")
             if p.is_dir() and p.name.rsplit("-", 1)[1].isdigit()}
    return {step: p for step, p in found.items() if not complete_only or (p / TRAINER_STATE_NAME).is_file()}


def train_and_save(trainer: Any, tokenizer: Any, data_args: DCSArguments, model_args: Any, recipe: str,
                   settings: dict[str, Any] | None = None, rows: Any = None) -> None:
    """Train (resuming as ``resume_from_checkpoint`` asks), then :func:`save_and_push`, with icw's model card
    in every checkpoint folder and in the output folder: what ``recipes/sdlp.py`` and ``recipes/grpo.py`` run.

    Args:
        trainer (`transformers.Trainer`): the recipe's trainer, not yet trained.
        tokenizer: the tokenizer saved next to the model.
        data_args (`DCSArguments`): the data the model is trained on (and ``model_card_results``).
        model_args (`trl.ModelConfig`): names the base model.
        recipe (`str`): ``"sdlp"``, ``"grpo"`` or ``"sft"``, as the card names it.
        settings (`dict`, *optional*): recipe settings outside ``trainer.args``, listed on the card.
        rows (`datasets.Dataset`, *optional*): the ``D_cs`` rows, where the trainer's dataset no longer names
            their families (SFT).
    """
    from .card import ModelCardCallback, training_facts

    try:
        facts = training_facts(trainer, recipe, data_args, model_args.model_name_or_path, settings, rows)
    except Exception as err:  # noqa: BLE001 (a card is documentation: never lose a run to it)
        warnings.warn(f"the model card will be missing: reading the run's facts failed: {err}", stacklevel=2)
        facts = None
    if facts is not None:
        trainer.add_callback(ModelCardCallback(facts))
    train_resumable(trainer)
    save_and_push(trainer, tokenizer, data_args, model_args.model_name_or_path, facts)


def save_and_push(trainer: Any, tokenizer: Any, data_args: DCSArguments, base_model: str | None,
                  facts: dict[str, Any] | None = None) -> None:
    """Save the model and tokenizer; write icw's model card; push if asked.

    With ``facts`` (:func:`icw.train.card.training_facts`) the card says how the model was trained and,
    given ``model_card_results``, how it scored; without, the ICWBench card of ``model_card_results``
    alone. ``save_model`` (PEFT) and ``Trainer.push_to_hub`` write their own README, so the card is
    written after them and uploaded again.

    Args:
        trainer (`transformers.Trainer`): the trained trainer; its ``args`` give the output folder and Hub
            options.
        tokenizer: the tokenizer saved next to the model.
        data_args (`DCSArguments`): the data the model was trained on (and ``model_card_results``).
        base_model (`str`, *optional*): the base model's id, recorded in the model card.
        facts (`dict`, *optional*): the run's facts for the training card.
    """
    out = trainer.args.output_dir
    trainer.save_model(out)
    adapter = hasattr(trainer.model, "peft_config")

    def write_card() -> bool:
        if facts is not None:
            from .card import write_card as write_training_card

            return write_training_card(out, facts, trainer.state, final=True,
                                       results=data_args.model_card_results) is not None
        if data_args.model_card_results:
            from ..cards import write_model_card

            write_model_card(data_args.model_card_results, out, base_model=base_model,
                             adapter="peft/lora" if adapter else None)
            return True
        return False

    carded = False
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(out)
        carded = write_card()
        what = "adapter" if adapter else "model"
        print(f"saved the {what} and tokenizer to {Path(out).resolve()}"
              + (" with icw's model card (README.md)" if carded else ""))
    if trainer.args.push_to_hub:
        trainer.push_to_hub()
        if trainer.is_world_process_zero() and write_card():
            from huggingface_hub import HfApi

            HfApi(token=trainer.args.hub_token).upload_folder(
                repo_id=trainer.hub_model_id, folder_path=out,
                allow_patterns=["README.md", ".eval_results/*", "icw_training.json"], commit_message="icw model card")
        if trainer.is_world_process_zero():
            print(f"pushed to https://huggingface.co/{trainer.hub_model_id}")
