r"""The adaptive attack (paper, Appendix "Robustness under Stronger and Adaptive Attacks"): a
paraphrasing policy trained with GRPO to remove an in-context watermark while keeping the meaning,
in the style of RLCracker.

The policy reads :data:`icw.rewriting.PARAPHRASE_PROMPT` around a watermarked answer ``x`` (an
ICWBench positive) and writes ``y``. Its reward, under the key ``kappa`` of ``x``'s row:

    r(y) = w_u * u(y, x) + w_e * 1[p(y; kappa) > alpha] - w_z * max(z(y; kappa), 0)

* ``u``: semantic utility, chrF of ``y`` against ``x`` (:func:`icw.rewriting.semantic_utility`;
  the paper uses P-SP, which needs a Hub model);
* ``1[p > alpha]``: ``y`` evades, i.e. falls below the 1%-FPR detection threshold (the verifier's
  verdict ``p <= alpha`` no longer fires, alpha = 0.01);
* ``max(z, 0)``: a dense signal towards evasion while ``y`` is still detected.

The attacker is trained against a fixed detector (the verifier), on a fixed budget of watermarked
answers (the paper grants 100). Training reuses trl's ``GRPOTrainer`` and ``GRPOConfig``, as
:mod:`icw.train.grpo` does, with a LoRA adapter (``ModelConfig.use_peft``). The output folder holds
the adapter and ``icw_attack.json`` (the prompt and generation length), which
``icw bench run --attacks adaptive --attack-adapter DIR`` reads.

Example (CPU, the embedded SmolLM2, positives of an ``icw bench run`` folder)::

    icw train adaptive-attack --model_name_or_path smollm2 --positives runs/smollm2 --output_dir runs/attacker \
        --use_peft --lora_r 8 --max_steps 20 --num_generations 4 --per_device_train_batch_size 4 \
        --max_completion_length 160 --use_cpu --report_to none
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..argtypes import non_negative_float, open_unit, positive_int
from ..keys import FAMILIES, as_key, check_family
from ..rewriting import ATTACK_FILE, PARAPHRASE_PROMPT, semantic_utility
from ..verification import verify

#: The run file of ``icw bench run`` (read here without importing icw.bench).
RESPONSES = "responses.jsonl"


class EvasionReward:
    r"""A trl reward function for the removal attacker: utility kept, evasion won, z pushed down.

    ``r(y) = utility_weight * u(y, source) + evasion_bonus * 1[p(y) > alpha] - z_penalty * max(z(y), 0)``,
    with ``u`` the chrF utility and ``z``, ``p`` the verifier's statistic and p-value under the row's key.

    Args:
        alpha (`float`): the detection level whose threshold the attacker must fall under (0.01: 1% FPR).
        utility_weight (`float`): weight of the chrF utility in [0, 1].
        evasion_bonus (`float`): reward for an evading rewrite.
        z_penalty (`float`): penalty per unit of positive z.
        num_null_keys (`int`): SA Monte Carlo size of the p-value (resolution 1 / (M + 1) must stay below alpha).

    Example:
        What trl calls with a batch (``key`` and ``source`` are dataset columns):

        >>> from icw import ICWKey
        >>> key = ICWKey.create("sa", secret="BEHOLDTRAMPS").to_string()
        >>> source = "Bees hum. Every hive works. Honey is sweet. Others rest. Later they fly. Days pass."
        >>> reward = EvasionReward()
        >>> kept, removed = reward(completions=[source, "Some bees hum and every hive works."],
        ...                        key=[key] * 2, source=[source] * 2)
        >>> kept < 1.0 < removed
        True
    """

    __name__ = "icw_evasion"

    def __init__(self, alpha: float = 0.01, utility_weight: float = 1.0, evasion_bonus: float = 1.0,
                 z_penalty: float = 0.1, num_null_keys: int = 999) -> None:
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha}")
        if 1.0 / (num_null_keys + 1) >= alpha:
            raise ValueError(f"num_null_keys {num_null_keys} cannot resolve p-values below alpha {alpha}")
        self.alpha, self.num_null_keys = alpha, num_null_keys
        self.utility_weight, self.evasion_bonus, self.z_penalty = utility_weight, evasion_bonus, z_penalty

    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (),
                 key: Sequence[str] | None = None, source: Sequence[str] | None = None, **kwargs: Any) -> list[float]:
        from .grpo import _text

        if key is None or source is None:
            raise ValueError("the attacker's dataset needs 'key' and 'source' columns (see attack_dataset)")
        texts = [_text(c) for c in completions]
        results = verify(texts, [as_key(k) for k in key], alpha=self.alpha, num_null_keys=self.num_null_keys)
        utility = semantic_utility(list(source), texts)
        return [self.utility_weight * u + self.evasion_bonus * (not r.is_watermarked)
                - self.z_penalty * max(r.z_score, 0.0) for u, r in zip(utility, results, strict=True)]


def read_positives(path: str | Path, families: Sequence[str] = FAMILIES, max_samples: int | None = 100,
                   seed: int = 0) -> list[dict[str, Any]]:
    """Unattacked, scored positives of an ``icw bench run`` folder (or its ``responses.jsonl``):
    ``[{"key", "family", "source"}]``, at most ``max_samples`` drawn at random (seeded).

    Args:
        path (`str` or `Path`): an ``icw bench run`` folder or its ``responses.jsonl``.
        families (`Sequence[str]`, defaults to all three): keep only these families.
        max_samples (`int`, *optional*, defaults to 100): at most this many positives (``None``: all).
        seed (`int`, defaults to 0): seed of the random draw.
    """
    import numpy as np

    path = Path(path)
    file = path / RESPONSES if path.is_dir() else path
    if not file.exists():
        raise ValueError(f"{path} has no {RESPONSES}: pass the --out folder of an `icw bench run`")
    families = {check_family(f) for f in families}
    rows = []
    for line in file.read_text(encoding="utf-8").splitlines():
        r = json.loads(line) if line.strip() else {}
        if (r.get("role") == "positive" and r.get("attack", "none") == "none" and r.get("family") in families
                and r.get("response") and not r.get("error")):
            rows.append({"key": r["key"], "family": r["family"], "source": r["response"]})
    if not rows:
        raise ValueError(f"{file} has no scored, unattacked positives of {sorted(families)}")
    if max_samples and len(rows) > max_samples:
        keep = sorted(np.random.default_rng(seed).permutation(len(rows))[:max_samples].tolist())
        rows = [rows[i] for i in keep]
    return rows


def attack_dataset(rows: list[dict[str, Any]], prompt: str = PARAPHRASE_PROMPT) -> Any:
    """GRPO prompts: a conversational ``prompt`` (the paraphrase request around ``source``), ``key``, ``source``.

    Args:
        rows (`list[dict]`): the positives :func:`read_positives` returns.
        prompt (`str`, *optional*): the paraphrase request; ``{text}`` is replaced by the source.
    """
    import datasets

    return datasets.Dataset.from_list([{**r, "prompt": [{"role": "user", "content": prompt.replace("{text}", r["source"])}]}
                                       for r in rows])


@dataclass
class AdaptiveAttackArguments:
    """What the attacker trains on and its reward, parsed beside trl's ``GRPOConfig`` and ``ModelConfig``.

    Args:
        positives (`str`, *optional*): an `icw bench run` folder (or its ``responses.jsonl``) whose
            watermarked positives the attacker rewrites.
        families (`list[str]`, defaults to ``['tsp', 'wip', 'sa']``): families to attack.
        max_samples (`int`, defaults to ``100``): watermarked answers granted to the attacker (paper: 100).
        alpha (`float`, defaults to ``0.01``): detection level to evade (0.01: the 1%-FPR threshold).
        utility_weight (`float`, defaults to ``1.0``): reward weight of the chrF utility.
        evasion_bonus (`float`, defaults to ``1.0``): reward of a rewrite with p > alpha (no longer
            detected).
        z_penalty (`float`, defaults to ``0.1``): penalty per unit of positive z.
    """

    positives: str = field(default=None, metadata={
        "help": "an `icw bench run` folder (or its responses.jsonl) whose watermarked positives the attacker rewrites"})
    families: list[str] = field(default_factory=lambda: list(FAMILIES), metadata={"help": "families to attack"})
    max_samples: int = field(default=100, metadata={"help": "watermarked answers granted to the attacker (paper: 100)"})
    alpha: float = field(default=0.01, metadata={"help": "detection level to evade (0.01: the 1%-FPR threshold)"})
    utility_weight: float = field(default=1.0, metadata={"help": "reward weight of the chrF utility"})
    evasion_bonus: float = field(default=1.0, metadata={"help": "reward of a rewrite with p > alpha (no longer detected)"})
    z_penalty: float = field(default=0.1, metadata={"help": "penalty per unit of positive z"})

    def __post_init__(self) -> None:
        if not self.positives:
            raise ValueError("set --positives to an `icw bench run` folder with watermarked positives")
        self.families = [check_family(f) for f in self.families]
        positive_int.require(self.max_samples, "--max_samples")
        open_unit.require(self.alpha, "--alpha")
        for name in ("utility_weight", "evasion_bonus", "z_penalty"):  # 0 switches the term off
            non_negative_float.require(getattr(self, name), f"--{name}")


def make_parser(subparsers: Any = None, prog: str | None = None) -> Any:
    """The ``TrlParser`` of ``icw train adaptive-attack``: :class:`AdaptiveAttackArguments`, trl's
    ``GRPOConfig`` and ``ModelConfig``."""
    from trl import GRPOConfig, ModelConfig, TrlParser

    dataclass_types = (AdaptiveAttackArguments, GRPOConfig, ModelConfig)
    if subparsers is not None:
        return subparsers.add_parser("adaptive-attack", help="train the adaptive removal attacker",
                                     dataclass_types=dataclass_types)
    return TrlParser(dataclass_types, prog=prog)


def main(attack_args: AdaptiveAttackArguments, training_args: Any, model_args: Any) -> Any:
    """Train the attacker as parsed by :func:`make_parser`; writes the adapter and ``icw_attack.json``."""
    from trl import GRPOTrainer, get_peft_config

    from .common import load_policy, set_precision, train_resumable

    set_precision(training_args)
    model, tokenizer = load_policy(model_args)
    rows = read_positives(attack_args.positives, attack_args.families, attack_args.max_samples, training_args.seed)
    reward = EvasionReward(attack_args.alpha, attack_args.utility_weight, attack_args.evasion_bonus,
                           attack_args.z_penalty)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=training_args, train_dataset=attack_dataset(rows),
                          processing_class=tokenizer, peft_config=get_peft_config(model_args))
    train_resumable(trainer)
    out = Path(training_args.output_dir)
    trainer.save_model(str(out))
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(str(out))
        (out / ATTACK_FILE).write_text(json.dumps({
            "prompt": PARAPHRASE_PROMPT, "max_new_tokens": training_args.max_completion_length,
            "base_model": model_args.model_name_or_path, "families": attack_args.families,
            "num_samples": len(rows), "alpha": attack_args.alpha, "utility": "chrF"}, indent=2), encoding="utf-8")
    return trainer
