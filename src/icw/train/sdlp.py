r"""Self-Distillation with Logit Perturbation (SDLP), the paper's Section 4.2.

The teacher is the frozen base model; it sees the query alone (chat template, no instruction)
and the response prefix, and its logits get the family's perturbation ``Delta_t``. The
student sees instruction + query and the same response prefix. The loss, per response token,
is the KL divergence between the teacher's and the student's distributions, both restricted
to the teacher's top-``k`` support ``I_t`` and renormalized there (paper eq. 5-6):

    p~T(v) = softmax(l^T_t + Delta_t)[v] / sum_{v' in I_t} ...      (v in I_t)
    p~S(v) = softmax(l^S_t)[v]           / sum_{v' in I_t} ...
    L      = mean_batch sum_t KL(p~T_t || p~S_t)

Because both are renormalized on ``I_t``, only the top-``k`` teacher logits and the
student's logits gathered on ``I_t`` enter the loss (log-softmax over ``k`` values); with
``k = None`` the support is the whole vocabulary. Rows of ``D_H0`` have ``Delta_t = 0`` and
a student that sees the query alone.

Memory: the trainer never asks the model for full logits. It captures the decoder's final
hidden states, gathers the response positions, and applies the output head in chunks of
positions, so each chunk holds at most a ``(chunk, V)`` float32 teacher tensor (freed after
its top-``k``) and the student's chunk logits; the top-``k`` path saves nothing of size
``V`` for backward, and the full-vocabulary path recomputes its chunk under activation
checkpointing. With LoRA the teacher is the same weights with the adapter disabled (one
copy of the model); full fine-tuning keeps a frozen copy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import Trainer

from ..acrostic import sa_bias_codes, sa_bias_rows
from ..keys import ICWKey, as_key, green_mask
from ..vocab import vocabulary
from . import transfer
from .hparams import TRAIN_DELTA, TRAIN_TOP_K
from .sdlp_config import SDLPConfig
from .sdlp_data import tokenize_dataset, tokenize_row  # noqa: F401 (part of the SDLP API)
from .sdlp_loss import chunked_sdlp_loss, sdlp_loss
from .transfer import Rows, relabel_curriculum, relabel_key, relabel_keys

__all__ = ["SDLPCollator", "SDLPConfig", "SDLPTrainer", "TRAIN_DELTA", "TRAIN_TOP_K", "main", "make_parser",
           "relabel_curriculum", "relabel_key", "relabel_keys", "sdlp_loss", "teacher_delta", "tokenize_dataset", "tokenize_row"]

# ------------------------------------------------------------------------------ collator
class SDLPCollator:
    """Pads teacher and student sequences (right padding) and builds the perturbation.

    Output keys: ``teacher_input_ids``/``teacher_attention_mask``/``teacher_positions`` and the
    same for the student, where ``*_positions[b, t]`` is the index whose logits predict response
    token ``t``; ``response_mask`` ``(B, T)``; the perturbation as a boolean table ``bias_rows``
    ``(M, V)`` with strengths ``bias_values`` ``(M,)`` and ``bias_index`` ``(B, T)`` (row 0 is
    all False: no bias); ``top_k`` ``(B,)`` (0: full vocabulary). With ``tsp_unused_only`` also
    ``bias_unused_only`` ``(M,)`` (the rows whose bias skips tokens the response used before ``t``) and
    ``response_ids`` ``(B, T)`` (padded with ``V``).

    Args:
        tokenizer: the tokenizer (its pad id pads the sequences).
        vocab_size (`int`): the model's logit width ``V`` (may exceed the tokenizer's size).
        config (`SDLPConfig`, *optional*): gives the training deltas and top-k (``None``: a default
            :class:`SDLPConfig`).
    """

    def __init__(self, tokenizer: Any, vocab_size: int, config: SDLPConfig | None = None) -> None:
        self.tokenizer = tokenizer
        self.view = vocabulary(tokenizer)
        self.vocab_size = int(vocab_size)
        self.config = config or SDLPConfig(output_dir="sdlp", report_to="none")
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self._sa_table: np.ndarray | None = None

    def _width(self, mask: np.ndarray) -> np.ndarray:
        if mask.shape[-1] >= self.vocab_size:
            return mask[..., : self.vocab_size]
        pad = [(0, 0)] * (mask.ndim - 1) + [(0, self.vocab_size - mask.shape[-1])]
        return np.pad(mask, pad)

    def _pad(self, seqs: list[list[int]], value: int) -> torch.Tensor:
        width = max(len(s) for s in seqs)
        return torch.tensor([list(s) + [value] * (width - len(s)) for s in seqs], dtype=torch.long)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        cfg = self.config
        responses = [list(f["response_ids"]) for f in features]
        width = max(len(r) for r in responses)
        batch: dict[str, torch.Tensor] = {}
        for side in ("teacher", "student"):
            prompts = [list(f[f"{side}_prompt_ids"]) for f in features]
            seqs = [p + r for p, r in zip(prompts, responses, strict=True)]
            batch[f"{side}_input_ids"] = self._pad(seqs, self.pad_id)
            batch[f"{side}_attention_mask"] = self._pad([[1] * len(s) for s in seqs], 0)
            # logits at position P-1+t predict response token t; padding positions point at P-1 (masked anyway)
            batch[f"{side}_positions"] = torch.tensor(
                [[len(p) - 1 + min(t, len(r) - 1) for t in range(width)] for p, r in zip(prompts, responses, strict=True)])
        batch["response_mask"] = self._pad([[1] * len(r) for r in responses], 0).float()

        rows: list[np.ndarray] = [np.zeros(self.vocab_size, dtype=bool)]
        values: list[float] = [0.0]
        unused_only: list[bool] = [False]
        index = torch.zeros(len(features), width, dtype=torch.long)
        top_k = []
        sa_offset = None
        for b, f in enumerate(features):
            family = f["family"]
            k = cfg.top_k(family)
            top_k.append(0 if k is None else k)
            if not f.get("watermarked", bool(f.get("key"))):
                continue
            key = as_key(f["key"])
            if family == "sa":
                if sa_offset is None:
                    if self._sa_table is None:
                        self._sa_table = self._width(sa_bias_rows(self.view))
                    sa_offset = len(rows)
                    rows.extend(self._sa_table)  # its last row (SA_NO_BIAS) is empty
                    values.extend([cfg.delta("sa")] * len(self._sa_table))
                    unused_only.extend([False] * len(self._sa_table))
                codes = sa_bias_codes(key.secret_string, responses[b], self.view)
                index[b, : len(codes)] = sa_offset + torch.tensor(codes)
            else:
                rows.append(self._width(green_mask(key, key.check_tokenizer(self.tokenizer))))
                values.append(cfg.delta(family))
                unused_only.append(family == "tsp" and cfg.tsp_unused_only)
                index[b, : len(responses[b])] = len(rows) - 1
        batch["bias_rows"] = torch.from_numpy(np.stack(rows))
        batch["bias_values"] = torch.tensor(values, dtype=torch.float32)
        batch["bias_index"] = index * batch["response_mask"].long()
        if any(unused_only):
            batch["bias_unused_only"] = torch.tensor(unused_only)
            batch["response_ids"] = self._pad(responses, self.vocab_size)
        batch["top_k"] = torch.tensor(top_k, dtype=torch.long)
        batch["rows"] = Rows([{k: f[k] for k in ("family", "key", "watermarked", "teacher_prompt_ids",
                                                  "student_prompt_ids") if k in f} for f in features])
        return batch


# ------------------------------------------------------------------------------- trainer
def _unwrap(model: Any) -> Any:
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module
    return model


def _final_hidden(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The decoder's last hidden states ``(B, L, H)``, taken by a hook during a normal forward
    (so DDP/DeepSpeed wrappers see a forward) that asks the head for one position only."""
    decoder = _unwrap(model).get_decoder()
    captured: dict[str, torch.Tensor] = {}

    def hook(_module: Any, _args: Any, output: Any) -> None:
        captured["h"] = output[0] if isinstance(output, tuple) else output.last_hidden_state

    handle = decoder.register_forward_hook(hook)
    try:
        model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=1, use_cache=False)
    finally:
        handle.remove()
    return captured["h"]


def _head_fn(model: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    unwrapped = _unwrap(model)
    head = unwrapped.get_output_embeddings()
    config = getattr(unwrapped, "config", None)
    cap = getattr(config.get_text_config() if config is not None else None, "final_logit_softcapping", None)

    def apply(hidden: torch.Tensor) -> torch.Tensor:
        logits = head(hidden)
        return torch.tanh(logits / cap) * cap if cap else logits

    return apply


class SDLPTrainer(Trainer):
    r"""Trains a student to match the logit-perturbed, instruction-free teacher (see module docstring).

    Args:
        model: the model (or a path for ``from_pretrained``); it is both student and, frozen, teacher.
        args: an :class:`SDLPConfig`.
        train_dataset: ``D_cs`` as written by :func:`icw.train.synthesis.synthesize` (columns family,
            key, query, response, label); tokenized here unless it already has ``response_ids``.
        processing_class: the tokenizer.
        peft_config: a ``peft`` config; the teacher is then the model with its adapter disabled.
        teacher_model: an explicit frozen teacher (default: the base model itself).
        eval_dataset: ``D_cs`` rows to evaluate the loss on, prepared like ``train_dataset``.
        callbacks: ``transformers`` ``TrainerCallback`` objects.
        **kwargs: passed to ``transformers.Trainer``.

    Example:
        One step on two rows of ``D_cs`` (a watermarked ``D_H1`` row and a plain ``D_H0`` row) with a
        random stand-in model:

        >>> import tempfile
        >>> from datasets import Dataset
        >>> from transformers import PrinterCallback
        >>> from icw import ICWKey
        >>> from icw.models import load_tokenizer
        >>> from icw.testing import tiny_random_model
        >>> tok = load_tokenizer("qwen3")
        >>> key = ICWKey.create("wip", seed=1, tokenizer=tok).to_string()
        >>> rows = Dataset.from_list([
        ...     {"family": "wip", "key": key, "query": "Why is the sky blue?", "response": "Light scatters.", "label": 1},
        ...     {"family": "wip", "key": "", "query": "Name a bird.", "response": "A robin.", "label": 0}])
        >>> args = SDLPConfig(output_dir=tempfile.mkdtemp(), max_steps=1, per_device_train_batch_size=2,
        ...                   use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True)
        >>> trainer = SDLPTrainer(tiny_random_model("qwen3"), args, train_dataset=rows, processing_class=tok)
        >>> trainer.remove_callback(PrinterCallback)  # keep the example's output to the result
        >>> result = trainer.train()
        >>> result.global_step, result.training_loss > 0
        (1, True)
    """

    def __init__(self, model: Any, args: SDLPConfig | None = None, train_dataset: Any = None, eval_dataset: Any = None,
                 processing_class: Any = None, peft_config: Any = None, teacher_model: Any = None,
                 callbacks: list | None = None, **kwargs: Any) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        args = args or SDLPConfig(output_dir="sdlp-output")
        if isinstance(model, str):
            model = AutoModelForCausalLM.from_pretrained(model, **(args.model_init_kwargs or {}))
        if processing_class is None:
            processing_class = AutoTokenizer.from_pretrained(model.config._name_or_path)
        if processing_class.pad_token is None:
            processing_class.pad_token = processing_class.eos_token
        self.uses_adapter = peft_config is not None or hasattr(model, "disable_adapter")
        if peft_config is not None:
            from peft import get_peft_model

            model = get_peft_model(model, peft_config)
        if teacher_model is None and not self.uses_adapter:
            teacher_model = copy.deepcopy(model)  # full fine-tuning: a frozen copy of the base weights
        if teacher_model is not None:
            teacher_model.eval().requires_grad_(False)

        def prepare(ds: Any, relabel: bool = False) -> Any:
            if ds is None or "student_prompt_ids" in ds.column_names:
                if relabel and ds is not None:
                    raise ValueError("relabel_keys needs D_cs before tokenization (the student prompt shows the key)")
                return ds
            if relabel and args.relabel_curriculum:
                ds = relabel_curriculum(ds, processing_class, args.relabel_curriculum, args.seed, args.relabel_copies,
                                        args.relabel_families)
            elif relabel:
                ds = relabel_keys(ds, processing_class, args.seed, args.relabel_num_keys, args.relabel_copies,
                                  args.relabel_keep_original, args.relabel_families)
            return tokenize_dataset(ds, processing_class, args.instruction_template, args.max_response_length,
                                    args.max_prompt_length)

        vocab = model.config.get_text_config().vocab_size
        super().__init__(model=model, args=args, data_collator=SDLPCollator(processing_class, vocab, args),
                         train_dataset=prepare(train_dataset, args.relabel_keys), eval_dataset=prepare(eval_dataset),
                         processing_class=processing_class, callbacks=callbacks, **kwargs)
        self.model_accepts_loss_kwargs = False  # our loss is already a batch mean; Trainer scales for accumulation
        self.teacher_model = teacher_model
        self._rollout_source: Any = None  # the epoch iterator the buffered micro-batches came from
        self._rollout_buffer: list[list[dict[str, Any]]] = []  # per coming step, its micro-batches
        self._resumed_rollouts: list[list[dict[str, Any]]] = []  # the buffer a resumed checkpoint kept
        self._row_losses: dict[str, list[float]] = {}  # training rows' losses since the last log, by family
        if teacher_model is not None:
            if self.is_deepspeed_enabled:
                from trl.models.utils import prepare_deepspeed

                self.teacher_model = prepare_deepspeed(teacher_model, self.accelerator)
            elif self.is_fsdp_enabled:
                from trl.models.utils import prepare_fsdp

                self.teacher_model = prepare_fsdp(teacher_model, self.accelerator)
            else:
                self.teacher_model = teacher_model.to(self.accelerator.device)

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> tuple[list, None]:
        """The step's micro-batches, on-policy ones with the student's own samples as responses, drawn for
        ``rollout_steps`` steps at a time (:func:`icw.train.transfer.with_rollouts`)."""
        if self._rollout_source is not epoch_iterator:  # a new epoch: nothing buffered carries over
            self._rollout_source, self._rollout_buffer = epoch_iterator, []
        if not self._rollout_buffer and self._resumed_rollouts:  # resumed inside a group: the rest, as sampled
            self._rollout_buffer, self._resumed_rollouts = self._resumed_rollouts, []
            for _ in self._rollout_buffer:  # their rows' batches, read past so the data order goes on as before
                super().get_batch_samples(epoch_iterator, num_batches, device)
        if not self._rollout_buffer:
            steps = []
            for _ in range(min(self.args.rollout_steps, max(self.state.max_steps - self.state.global_step, 1))):
                batches, _ = super().get_batch_samples(epoch_iterator, num_batches, device)
                if not batches:
                    break
                steps.append(batches)
            self._rollout_buffer = transfer.with_rollouts(self, steps)
        return (self._rollout_buffer.pop(0) if self._rollout_buffer else []), None

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        self._resumed_rollouts = transfer.load_rollouts(resume_from_checkpoint, self.accelerator.process_index)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        # first the group's rollouts still to train on: a checkpoint the Trainer completes always has them
        folder = Path(self._get_output_dir(trial)) / f"checkpoint-{self.state.global_step}"
        transfer.save_rollouts(self._rollout_buffer, folder, self.accelerator.process_index)
        super()._save_checkpoint(model, trial)

    def _teacher_hidden(self, model: Any, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Callable]:
        # under bf16 the frozen teacher runs in autocast too (accelerate wraps only the student's forward)
        device = self.accelerator.device.type
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=bool(self.args.bf16)):
            if self.teacher_model is not None:
                hidden = _final_hidden(self.teacher_model, inputs["teacher_input_ids"], inputs["teacher_attention_mask"])
                return hidden, _head_fn(self.teacher_model)
            with _unwrap(model).disable_adapter():
                hidden = _final_hidden(model, inputs["teacher_input_ids"], inputs["teacher_attention_mask"])
            return hidden, _head_fn(model)

    def compute_loss(self, model: Any, inputs: dict[str, torch.Tensor], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> torch.Tensor | tuple[torch.Tensor, dict]:
        t_hidden, t_head = self._teacher_hidden(model, inputs)
        s_hidden = _final_hidden(model, inputs["student_input_ids"], inputs["student_attention_mask"])
        gather = lambda h, pos: h.gather(1, pos[..., None].expand(-1, -1, h.shape[-1]))  # noqa: E731
        per_row = chunked_sdlp_loss(
            gather(s_hidden, inputs["student_positions"]), gather(t_hidden, inputs["teacher_positions"]).detach(),
            _head_fn(model), t_head, inputs["response_mask"], inputs["bias_rows"], inputs["bias_values"],
            inputs["bias_index"], inputs["top_k"], self.args.loss_chunk_size, inputs.get("bias_unused_only"),
            inputs.get("response_ids"), per_row=True)
        if model.training and "rows" in inputs:
            for row, value in zip(inputs["rows"].rows, per_row.detach().tolist(), strict=True):
                self._row_losses.setdefault(row["family"] if row["watermarked"] else "plain", []).append(value)
        loss = per_row.mean()
        return (loss, {}) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Training logs also get, per family, the mean loss of its D_H1 rows since the last log (``loss_tsp``, ...;
        ``loss_plain``: the D_H0 rows) and that family's share of the summed loss (``loss_share_tsp``, ...): which
        family the step's gradient mostly serves. Rows of this process only."""
        if "loss" in logs and self._row_losses:
            total = sum(sum(values) for values in self._row_losses.values())
            for family, values in sorted(self._row_losses.items()):
                logs[f"loss_{family}"] = sum(values) / len(values)
                logs[f"loss_share_{family}"] = sum(values) / total if total else float("nan")
            self._row_losses = {}
        super().log(logs, start_time)

    def prediction_step(self, model: Any, inputs: dict[str, Any], prediction_loss_only: bool,
                        ignore_keys: list[str] | None = None) -> tuple:
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None


def teacher_delta(key: ICWKey | str, response_ids: Sequence[int], tokenizer: Any, delta: float | None = None,
                  vocab_size: int | None = None, unused_only: bool = False) -> torch.Tensor:
    """``Delta_t`` for every position of a response as a dense ``(T, V)`` tensor (for inspection
    and tests; the trainer keeps it compact).

    Args:
        key (`ICWKey` or `str`): the row's key.
        response_ids (`Sequence[int]`): the response's token ids.
        tokenizer: the tokenizer of the ids.
        delta (`float`, *optional*): bias strength (default: the family's training delta).
        vocab_size (`int`, *optional*): the tensor's width ``V`` (default: the tokenizer's vocabulary size).
        unused_only (`bool`, *optional*): TSP: no bias on tokens the response used before each position
            (:class:`SDLPConfig` ``tsp_unused_only``).
    """
    key = as_key(key)
    view = key.check_tokenizer(tokenizer) if key.family != "sa" else vocabulary(tokenizer)
    delta = TRAIN_DELTA[key.family] if delta is None else float(delta)
    width = vocab_size or view.size
    collator = SDLPCollator(tokenizer, width)
    if key.family == "sa":
        table = torch.from_numpy(collator._width(sa_bias_rows(view))).float() * delta
        return table[torch.tensor(sa_bias_codes(key.secret_string, response_ids, view), dtype=torch.long)]
    mask = torch.from_numpy(collator._width(green_mask(key, view))).float() * delta
    table = mask.expand(len(response_ids), -1).clone()
    if unused_only and key.family == "tsp":
        for t in range(1, len(response_ids)):
            table[t, list(response_ids[:t])] = 0.0
    return table



def make_parser(subparsers: Any = None, prog: str | None = None) -> Any:
    """The ``TrlParser`` of ``recipes/sdlp.py`` and ``icw train sdlp``: :class:`~icw.train.common.DCSArguments`
    (script), :class:`SDLPConfig` (training) and trl's ``ModelConfig`` (model, LoRA). With ``subparsers``
    (whose ``parser_class`` is a ``TrlParser``) it is added there as the ``sdlp`` sub-command, as trl's scripts do."""
    from trl import ModelConfig, TrlParser

    from .common import DCSArguments

    dataclass_types = (DCSArguments, SDLPConfig, ModelConfig)
    if subparsers is not None:
        return subparsers.add_parser("sdlp", help="self-distillation with logit perturbation on D_cs",
                                     dataclass_types=dataclass_types)
    return TrlParser(dataclass_types, prog=prog)


def main(script_args: Any, training_args: SDLPConfig, model_args: Any) -> SDLPTrainer:
    """Train as parsed by :func:`make_parser` (``recipes/sdlp.py``, ``icw train sdlp``): load ``D_cs`` and
    the policy, train, save (and push) with icw's model card in the output and checkpoint folders."""
    from trl import get_peft_config

    from .common import load_policy, set_precision, train_and_save

    set_precision(training_args)
    model, tokenizer = load_policy(model_args)
    dataset = script_args.load(seed=training_args.seed)
    trainer = SDLPTrainer(model, training_args, train_dataset=dataset, processing_class=tokenizer,
                          peft_config=get_peft_config(model_args))
    train_and_save(trainer, tokenizer, script_args, model_args, "sdlp")
    return trainer
