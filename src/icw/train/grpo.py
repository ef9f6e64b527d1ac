r"""GRPO with verifiable ICW rewards (the paper's Section 4.3), on ``trl.GRPOTrainer``.

The policy loss is trl's ``loss_type="grpo"``: each sequence's token losses are averaged over its
own length, then over the group (the paper's per-sequence normalisation, as in DeepSeekMath);
trl's default ``"dapo"`` normalises over all tokens of the batch instead, so :class:`ICWGRPOConfig`
sets ``"grpo"``.

Reward of a completion ``y`` for a row with key ``kappa`` (a dataset column, which trl passes
to reward functions as a keyword argument):

    r(y) = rejected_reward              if |y| < min_completion_tokens, or SA and a gate fires
         = max(z(y; kappa), z_floor)    otherwise (the verifier's z, as in the paper)

with ``rejected_reward < z_floor``: a short or gated answer always scores below every honest
attempt, however poor. (The paper's reference implementation gives such answers 0, which beats an
honest attempt with negative z and so teaches a weak policy to stop early; the floor and the
rejection value are ours.) The SA gates catch what the paper saw RL alone learn: visually
highlighted initials (``**B**ecause``, ``<b>B</b>``), orphan letters that stand alone at a
sentence start (``T he``, ``B.``), letter headings (``# B``, ``- B:``) and the secret written out.

trl's log carries, beside its own ``reward``, ``reward_std`` and ``frac_reward_zero_std``, what tells a
run that learns from one that does not, per family present in the batch: ``icw/<family>/z`` (the mean
verifier z before the floor), ``icw/<family>/detected`` (the share of completions at p <= 0.01) and
``icw/<family>/rejected`` (the share too short or gated).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..argtypes import any_float, non_negative_int
from ..generation import user_message
from ..keys import ICWKey, as_key
from ..text import sentence_initial_spans
from ..verification import verify
from .hparams import GRPO_MIN_COMPLETION_TOKENS, GRPO_TRAINING

#: Single letters that are English words, so a sentence may start with them alone.
WORD_LETTERS = frozenset("AI")
_EMPHASIS = re.compile(r"(\*\*|__|==|\*|_|~~)\s*[A-Za-z]\s*\1(?=[A-Za-z])|(\*\*|__|==|\*|_)[A-Za-z]\2(?![A-Za-z])")
_HTML_EMPHASIS = re.compile(r"<(b|strong|mark|em|i|u|span)\b[^>]*>\s*[A-Za-z]\s*</\1>", re.IGNORECASE)
_LETTER_HEADING = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*|>[ \t]*|[-*+][ \t]+|\d+[.)][ \t]+)?[*_=]*[A-Za-z][*_=]*[ \t]*(?:[:.)\-\u2013\u2014|][ \t]*)?$"
    r"|^[ \t]*(?:#{1,6}[ \t]*|[-*+][ \t]+)?[*_]*[A-Za-z][*_]*[ \t]*[:)\-\u2013\u2014|]",
    re.MULTILINE)
#: The secret counts as written out when this many of its consecutive letters appear in order.
SECRET_RUN = 8


def sa_gates(text: str, key: ICWKey | str) -> list[str]:
    """The SA reward-hacking gates that fire on ``text`` (empty when the text is clean).

    Args:
        text (`str`): the completion.
        key (`ICWKey` or `str`): the row's SA key (its secret is what "written out" looks for).

    Example:
        >>> key = ICWKey.create("sa", secret="BEHOLDTRAMPS")
        >>> sa_gates("Bees make honey. Every hive works.", key)
        []
        >>> sa_gates("**B**ees make honey. Every hive works.", key)
        ['highlighted initials']
        >>> sa_gates("Behold tramps, it said.", key)
        ['secret written out']
    """
    key = as_key(key)
    reasons = []
    if _EMPHASIS.search(text) or _HTML_EMPHASIS.search(text):
        reasons.append("highlighted initials")
    for pos, letter in sentence_initial_spans(text):
        nxt = text[pos + 1 : pos + 2]
        # markup right after the letter is the highlight gate's case, not an orphan
        if letter not in WORD_LETTERS and not (nxt.isalpha() or nxt in "'\u2019-*_=~<"):
            reasons.append("orphan letters")
            break
    if _LETTER_HEADING.search(text):
        reasons.append("letter headings")
    secret = key.secret_string
    run = min(SECRET_RUN, len(secret))
    letters = re.sub(r"[^A-Z]", "", text.upper())
    if any(secret[i : i + run] in letters for i in range(len(secret) - run + 1)):
        reasons.append("secret written out")
    return reasons


def _text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):  # conversational: a list of messages
        return "".join(m.get("content", "") for m in completion if isinstance(m, dict) and m.get("role") == "assistant")
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return str(completion)


class ICWReward:
    """A trl reward function: the verifier's z of each completion under its row's key (see the module docstring).

    Args:
        tokenizer: the tokenizer TSP/WIP keys were built for (the policy's).
        min_completion_tokens: completions with fewer tokens are rejected (reference implementation: 200).
        sa_gates: apply the SA anti-hacking gates (a completion that trips one is rejected).
        num_permutations: SA permutation-null size for z.
        z_floor: honest attempts score ``max(z, z_floor)``.
        rejected_reward: the reward of a rejected completion; must lie below ``z_floor``.

    Example:
        What trl calls with a batch (``key`` is the dataset column; completions may also be
        conversational message lists):

        >>> from icw.models import load_tokenizer
        >>> key = ICWKey.create("sa", secret="BEHOLDTRAMPS").to_string()
        >>> answer = "Bees hum. Every hive works. Honey is sweet. Others rest. Later they fly. Days pass."
        >>> reward = ICWReward(load_tokenizer("gpt2"), min_completion_tokens=10)
        >>> [round(r, 1) for r in reward(completions=[answer, "Bees hum.", "**B**ees hum. " + answer],
        ...                              key=[key] * 3)]
        [3.7, -3.0, -3.0]
    """

    __name__ = "icw_z"

    def __init__(self, tokenizer: Any, min_completion_tokens: int = 200, sa_gates: bool = True,
                 num_permutations: int = 1000, z_floor: float = -2.0, rejected_reward: float = -3.0) -> None:
        if not rejected_reward < z_floor:
            raise ValueError(f"rejected_reward ({rejected_reward}) must lie below z_floor ({z_floor}), or a short or "
                             "gated answer can outscore an honest attempt")
        self.tokenizer = tokenizer
        self.min_completion_tokens = int(min_completion_tokens)
        self.sa_gates = sa_gates
        self.num_permutations = num_permutations
        self.z_floor = float(z_floor)
        self.rejected_reward = float(rejected_reward)

    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (),
                 completion_ids: Sequence[Sequence[int]] | None = None, key: Sequence[str] | None = None,
                 log_metric: Callable[[str, float], None] | None = None, **kwargs: Any) -> list[float]:
        if key is None:
            raise ValueError("the GRPO dataset needs a 'key' column with each row's serialized key")
        texts = [_text(c) for c in completions]
        if completion_ids is None:
            completion_ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        keys = [as_key(k) for k in key]
        results = verify(texts, keys, self.tokenizer, num_permutations=self.num_permutations, num_null_keys=1)
        rewards, rejected = [], []
        for text, ids, k, result in zip(texts, completion_ids, keys, results, strict=True):
            rejected.append(len(ids) < self.min_completion_tokens
                            or self.sa_gates and k.family == "sa" and bool(sa_gates(text, k)))
            rewards.append(self.rejected_reward if rejected[-1] else max(float(result.z_score), self.z_floor))
        if log_metric is not None:  # trl passes it: per-family means in the training log
            for family in sorted({k.family for k in keys}):
                rows = [i for i, k in enumerate(keys) if k.family == family]
                log_metric(f"icw/{family}/z", sum(results[i].z_score for i in rows) / len(rows))
                log_metric(f"icw/{family}/detected", sum(results[i].is_watermarked for i in rows) / len(rows))
                log_metric(f"icw/{family}/rejected", sum(rejected[i] for i in rows) / len(rows))
        return rewards


@dataclass
class ICWRewardArguments:
    r"""The ICW part of ``recipes/grpo.py``'s configuration, parsed beside trl's ``GRPOConfig``.

    GRPO's own optimisation defaults come from :data:`icw.train.hparams.GRPO_TRAINING` (the paper's
    ``loss_type="grpo"``, Section 4.3; lr 1e-6 and 8 rollouts per prompt from the authors' reference
    implementation, which the paper does not state); see ``trl.GRPOConfig`` for its other fields.

    Parameters:
        > Parameters that control the reward ``r(y) = z(y; kappa)``

        min_completion_tokens (`int`, *optional*, defaults to `200`):
            Completions with fewer tokens get ``rejected_reward`` (the reference implementation's rule
            against short answers; it gave them 0).
        z_floor (`float`, *optional*, defaults to `-2.0`):
            Honest attempts get ``max(z, z_floor)``.
        rejected_reward (`float`, *optional*, defaults to `-3.0`):
            Reward of short or gated completions; below ``z_floor``, so they never beat an honest attempt.
        sa_gates (`bool`, *optional*, defaults to `True`):
            Reject SA completions that hack the verifier (see :func:`sa_gates`).

        > Parameters that control the prompts

        instruction_template (`str` or `None`, *optional*, defaults to `None`):
            Custom instruction template in the prompt (`None`: the paper's).
    """

    min_completion_tokens: int = field(
        default=GRPO_MIN_COMPLETION_TOKENS, metadata={"help": "Completions shorter than this many tokens get rejected_reward "
                                       "(reference implementation: 200)."})
    z_floor: float = field(default=-2.0, metadata={"help": "Honest attempts get max(z, z_floor)."})
    rejected_reward: float = field(
        default=-3.0, metadata={"help": "Reward of short or gated completions; below z_floor, so they never beat an "
                                        "honest attempt."})
    sa_gates: bool = field(default=True, metadata={"help": "Zero the reward of SA completions that hack the verifier "
                                                           "(highlighted initials, orphan letters, letter headings, "
                                                           "the secret written out): they get rejected_reward."})
    instruction_template: str | None = field(
        default=None, metadata={"help": "Custom instruction template in the prompt (default: the paper's)."})

    def __post_init__(self) -> None:
        non_negative_int.require(self.min_completion_tokens, "--min_completion_tokens")  # 0: no length rule
        any_float.require(self.z_floor, "--z_floor")
        any_float.require(self.rejected_reward, "--rejected_reward")


def grpo_dataset(dataset: Any, tokenizer: Any, template: str | None = None) -> Any:
    """``D_H1`` rows as GRPO prompts: a conversational ``prompt`` (instruction + query) and the ``key``.

    Args:
        dataset: ``D_H1`` rows of ``D_cs`` (a ``datasets.Dataset`` with ``query`` and ``key`` columns).
        tokenizer: renders a TSP key's green list in the instruction.
        template (`str`, *optional*): a custom instruction template (see :func:`icw.templates.template_for`;
            ``None``: the paper's).
    """
    if "key" not in dataset.column_names:
        raise ValueError("the GRPO dataset needs a 'key' column: build it with `icw train synthesize`")

    def to_prompt(row: dict[str, Any]) -> dict[str, Any]:
        content = user_message(row["query"], as_key(row["key"]), "instruction", tokenizer, template)
        return {"prompt": [{"role": "user", "content": content}]}

    keep = {"prompt", "key", "family"}
    return dataset.map(to_prompt, remove_columns=[c for c in dataset.column_names if c not in keep],
                       desc="building GRPO prompts")


def seeded_grpo_trainer() -> type:
    """trl's ``GRPOTrainer`` whose completions are sampled from per-row seeds (:mod:`icw.train.sampling`): the
    run's seed, the optimizer step and the completion's place in the step's global batch, so that a run gives
    the same completions, rewards and losses on 1 or N processes (trl samples from each process's global random
    state, which N processes seeded alike share). vLLM generation keeps its own sampling."""
    from trl import GRPOTrainer

    from .sampling import row_seeded_generation, row_seeds

    class SeededGRPOTrainer(GRPOTrainer):
        def _generate_single_turn(self, prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
            if self.use_vllm:
                return super()._generate_single_turn(prompt_ids, *args, **kwargs)
            rows = len(prompt_ids)
            seeds = row_seeds(self.args.seed, self.state.global_step, self.accelerator.process_index * rows, rows)
            with row_seeded_generation(self.accelerator.unwrap_model(self.model), seeds):
                return super()._generate_single_turn(prompt_ids, *args, **kwargs)

    return SeededGRPOTrainer


def make_parser(subparsers: Any = None, prog: str | None = None) -> Any:
    """The ``TrlParser`` of ``recipes/grpo.py`` and ``icw train grpo``: :class:`~icw.train.common.DCSArguments`
    (script), trl's ``GRPOConfig`` (training, defaults from :data:`~icw.train.hparams.GRPO_TRAINING`),
    ``ModelConfig`` and :class:`ICWRewardArguments`. With ``subparsers`` it is added there as ``grpo``."""
    from trl import GRPOConfig, ModelConfig, TrlParser

    from .common import DCSArguments

    dataclass_types = (DCSArguments, GRPOConfig, ModelConfig, ICWRewardArguments)
    if subparsers is not None:
        parser = subparsers.add_parser("grpo", help="GRPO with the verifier z as reward",
                                       dataclass_types=dataclass_types)
    else:
        parser = TrlParser(dataclass_types, prog=prog)
    parser.set_defaults(**GRPO_TRAINING)  # a recipe YAML and the command line still override these
    return parser


def main(script_args: Any, training_args: Any, model_args: Any, reward_args: ICWRewardArguments | None = None) -> Any:
    """Train as parsed by :func:`make_parser` (``recipes/grpo.py``, ``icw train grpo``)."""
    from trl import get_peft_config
    from trl.import_utils import is_vllm_available

    from .common import load_policy, set_precision, train_and_save

    reward_args = reward_args or ICWRewardArguments()
    if training_args.use_vllm and not is_vllm_available():
        raise ValueError("use_vllm is set but vLLM is not installed: pip install 'icw[vllm]' or set use_vllm: false")
    set_precision(training_args)
    model, tokenizer = load_policy(model_args)
    dataset = grpo_dataset(script_args.load(label=1, seed=training_args.seed), tokenizer,
                           reward_args.instruction_template)
    reward = ICWReward(tokenizer, reward_args.min_completion_tokens, reward_args.sa_gates,
                       z_floor=reward_args.z_floor, rejected_reward=reward_args.rejected_reward)
    trainer = seeded_grpo_trainer()(model=model, reward_funcs=[reward], args=training_args, train_dataset=dataset,
                                    processing_class=tokenizer, peft_config=get_peft_config(model_args))
    train_and_save(trainer, tokenizer, script_args, model_args, "grpo", settings=asdict(reward_args))
    return trainer
