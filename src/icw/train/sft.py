"""The SFT ablation baseline: trl's ``SFTTrainer`` on the cold-start D_H1 responses.

The instruction stays in the prompt and the model learns to reproduce the answer written under
the logit perturbation, so Base / +SFT / +RL / +SDLP / +SDLP+RL share data and evaluation
(the paper's ablation). Run it as ``icw train sft --config recipes/configs/smollm2-135m/sft.yaml``
or, on several GPUs, ``accelerate launch recipes/sft.py --config ...``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import ModelConfig, SFTConfig, SFTTrainer, TrlParser, get_peft_config

from ..generation import user_message
from ..keys import as_key
from .common import DCSArguments, load_policy, save_and_push


@dataclass
class SFTDataArguments:
    """SFT-specific data options (the D_cs dataset itself is chosen by :class:`~icw.train.common.DCSArguments`)."""

    instruction_template: str | None = field(
        default=None, metadata={"help": "Custom instruction template in the prompt (default: the paper's)."})
    include_h0: bool = field(
        default=False, metadata={"help": "Also train on D_H0 rows (query alone -> plain answer)."})


def sft_dataset(dataset: Any, tokenizer: Any, template: str | None = None) -> Any:
    """Prompt-completion rows: instruction + query -> the D_H1 response (D_H0: query -> response)."""

    def convert(row: dict[str, Any]) -> dict[str, Any]:
        watermarked = bool(row["label"]) and bool(row["key"])
        content = (user_message(row["query"], as_key(row["key"]), "instruction", tokenizer, template)
                   if watermarked else row["query"])
        return {"prompt": [{"role": "user", "content": content}],
                "completion": [{"role": "assistant", "content": row["response"]}]}

    return dataset.map(convert, remove_columns=dataset.column_names, desc="building SFT rows")


def make_parser() -> TrlParser:
    """The recipe's parser: data, SFT options, ``trl.SFTConfig`` and ``trl.ModelConfig`` (``--config`` YAML)."""
    return TrlParser((DCSArguments, SFTDataArguments, SFTConfig, ModelConfig))


def main(argv: list[str] | None = None) -> SFTTrainer:
    """Parse ``argv`` (``--config recipe.yaml`` plus ``--field value`` overrides), train, save and push."""
    data_args, sft_args, config, model_args = make_parser().parse_args_and_config(argv)
    model, tokenizer = load_policy(model_args)
    rows = data_args.load(label=None if sft_args.include_h0 else 1, seed=config.seed)
    trainer = SFTTrainer(model=model, args=config, train_dataset=sft_dataset(rows, tokenizer, sft_args.instruction_template),
                         processing_class=tokenizer, peft_config=get_peft_config(model_args))
    trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)
    save_and_push(trainer, tokenizer, data_args, model_args.model_name_or_path)
    return trainer

