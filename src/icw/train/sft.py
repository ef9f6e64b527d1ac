"""The SFT ablation baseline: trl's ``SFTTrainer`` on the cold-start D_H1 responses.

The instruction stays in the prompt and the model learns to reproduce the answer written under
the logit perturbation, so Base / +SFT / +RL / +SDLP / +SDLP+RL share data and evaluation
(the paper's ablation). Run it as ``icw train sft --config recipes/configs/smollm2-135m/sft.yaml``
or, on several GPUs, ``accelerate launch recipes/sft.py --config ...``; both parse with
:func:`make_parser` and call :func:`main`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import ModelConfig, SFTConfig, SFTTrainer, TrlParser, get_peft_config

from ..generation import user_message
from ..keys import as_key
from .common import DCSArguments, load_policy, set_precision, train_and_save


@dataclass
class SFTDataArguments:
    r"""The ICW part of the SFT baseline's configuration, parsed beside trl's ``SFTConfig``.

    The baseline trains on the same ``D_cs`` rows as SDLP, so Base / +SFT / +RL / +SDLP / +SDLP+RL
    compare like for like ("Learning to Follow In-Context Watermark Instructions via
    Self-Distillation", Section 5); see ``trl.SFTConfig`` for the optimisation fields.

    Parameters:
        > Parameters that control the data

        instruction_template (`str` or `None`, *optional*, defaults to `None`):
            Custom instruction template in the prompt (`None`: the paper's).
        include_h0 (`bool`, *optional*, defaults to `False`):
            Also train on ``D_H0`` rows (query alone -> plain answer).
    """

    instruction_template: str | None = field(
        default=None, metadata={"help": "Custom instruction template in the prompt (default: the paper's)."})
    include_h0: bool = field(
        default=False, metadata={"help": "Also train on D_H0 rows (query alone -> plain answer)."})


def sft_dataset(dataset: Any, tokenizer: Any, template: str | None = None) -> Any:
    """Prompt-completion rows: instruction + query -> the D_H1 response (D_H0: query -> response).

    Args:
        dataset: ``D_cs`` (a ``datasets.Dataset``).
        tokenizer: renders a TSP key's green list in the instruction.
        template (`str`, *optional*): a custom instruction template (see :func:`icw.templates.template_for`;
            ``None``: the paper's).
    """

    def convert(row: dict[str, Any]) -> dict[str, Any]:
        watermarked = bool(row["label"]) and bool(row["key"])
        content = (user_message(row["query"], as_key(row["key"]), "instruction", tokenizer, template)
                   if watermarked else row["query"])
        return {"prompt": [{"role": "user", "content": content}],
                "completion": [{"role": "assistant", "content": row["response"]}]}

    return dataset.map(convert, remove_columns=dataset.column_names, desc="building SFT rows")


def make_parser(subparsers: Any = None, prog: str | None = None) -> TrlParser:
    """The ``TrlParser`` of this recipe: ``DCSArguments`` (script), trl's ``SFTConfig`` (training),
    ``ModelConfig`` and :class:`SFTDataArguments`. With ``subparsers`` it is added there as ``sft``."""
    dataclass_types = (DCSArguments, SFTConfig, ModelConfig, SFTDataArguments)
    if subparsers is not None:
        return subparsers.add_parser("sft", help="plain SFT baseline on D_H1", dataclass_types=dataclass_types)
    return TrlParser(dataclass_types, prog=prog)


def main(script_args: DCSArguments, training_args: SFTConfig, model_args: ModelConfig,
         sft_args: SFTDataArguments | None = None) -> SFTTrainer:
    """Train as parsed by :func:`make_parser`."""
    sft_args = sft_args or SFTDataArguments()
    set_precision(training_args)
    model, tokenizer = load_policy(model_args)
    rows = script_args.load(label=None if sft_args.include_h0 else 1, seed=training_args.seed)
    trainer = SFTTrainer(model=model, args=training_args,
                         train_dataset=sft_dataset(rows, tokenizer, sft_args.instruction_template),
                         processing_class=tokenizer, peft_config=get_peft_config(model_args))
    train_and_save(trainer, tokenizer, script_args, model_args, "sft", rows=rows)
    return trainer
