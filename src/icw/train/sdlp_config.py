"""Configuration of SDLP (:class:`SDLPConfig`), as trl keeps each trainer's config in its own module."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transformers import TrainingArguments
from transformers import __version__ as transformers_version

from ..argtypes import non_negative_int, positive_float, positive_int
from ..keys import FAMILIES
from .hparams import SDLP_TRAINING, TRAIN_DELTA, TRAIN_TOP_K

#: Teacher top-k support as the config's integer fields store it (0: the full vocabulary).
_TOP_K_FIELD = {family: k or 0 for family, k in TRAIN_TOP_K.items()}


@dataclass
class SDLPConfig(TrainingArguments):
    r"""Configuration of :class:`SDLPTrainer`: ``transformers.TrainingArguments`` plus the SDLP fields.

    Only the parameters specific to SDLP, or whose defaults differ from ``TrainingArguments``, are
    listed; see ``transformers.TrainingArguments`` for the rest. Defaults come from
    :mod:`icw.train.hparams`: the paper ("Learning to Follow In-Context Watermark Instructions via
    Self-Distillation", Section 4.2) states the loss, not these numbers; they are the authors'
    reference implementation's (lr 7e-6, batch 8, 2-3 epochs; training deltas TSP 5.0, WIP 3.0,
    SA 8.0; teacher top-k 1000 for TSP and SA, the full vocabulary for WIP).

    Prefix-independent targets (ours, not the paper's; ``docs/training-transfer.md``): off-policy
    ``D_H1`` answers were written under their key's bias, so the response prefix reveals the key
    (WIP: earlier word initials show the green letters) and a student can lower the loss without
    reading the instruction. ``relabel_keys`` and ``lmbda`` remove that shortcut.

    Parameters:
        > Parameters that control the teacher's perturbation ``Delta_t``

        delta_tsp (`float`, *optional*, defaults to `5.0`):
            Strength added to the teacher's logits on the green set of TSP rows.
        delta_wip (`float`, *optional*, defaults to `3.0`):
            Strength added on the green word-initial tokens of WIP rows.
        delta_sa (`float`, *optional*, defaults to `8.0`):
            Strength added at active sentence starts of SA rows (replayed along the response).
        tsp_unused_only (`bool`, *optional*, defaults to `False`):
            Bias only the green tokens the response has not used yet (TSP rows), as
            :class:`~icw.processors.TokenSetPreferenceLogitsProcessor` ``unused_only`` does. The verifier
            counts distinct tokens; with a candidate pool of a few hundred tokens the static bias at 5.0
            makes SmolLM2-135M's teacher loop on green tokens, and an on-policy student learns the loops.

        > Parameters that control the loss

        top_k_tsp (`int`, *optional*, defaults to `1000`):
            Teacher top-k support ``I_t`` for TSP rows; both distributions are renormalized on it
            (0: the full vocabulary).
        top_k_wip (`int`, *optional*, defaults to `0`):
            Teacher top-k support for WIP rows (0: the full vocabulary, the reference implementation's choice).
        top_k_sa (`int`, *optional*, defaults to `1000`):
            Teacher top-k support for SA rows.
        loss_chunk_size (`int`, *optional*, defaults to `256`):
            Response positions per chunk when the output head is applied in the loss; bounds the
            ``(chunk, vocab)`` tensors alive at once.

        > Parameters that control the data

        max_response_length (`int`, *optional*, defaults to `1024`):
            Response tokens kept per row (EOS included); longer responses are cut.
        max_prompt_length (`int`, *optional*, defaults to `32768`):
            Longest student prompt accepted; a longer one raises (use a smaller TSP ``pool_size``
            for small-context models).
        instruction_template (`str` or `None`, *optional*, defaults to `None`):
            Custom instruction template for the student's prompt (`None`: the paper's).
        remove_unused_columns (`bool`, *optional*, defaults to `False`):
            Keep the dataset columns: the collator needs family, key and the token ids.

        > Parameters that control prefix-independent targets

        relabel_keys (`bool`, *optional*, defaults to `False`):
            Train each ``D_H1`` row under a fresh key of its family, independent of the key that
            wrote it: the teacher's ``Delta_t`` (WIP/TSP mask, SA replay of the new secret) and the
            student's instruction both use it, so the prefix says nothing about the training key.
        relabel_num_keys (`int`, *optional*, defaults to `0`):
            With ``relabel_keys``: draw the fresh keys from a pool of this many training keys per
            family (0: a new key per row).
        relabel_curriculum (`list[int]` or `None`, *optional*, defaults to `None`):
            Pool sizes of a curriculum, e.g. ``[1, 8, 0]``: ``D_cs`` is relabelled once per stage with
            that stage's pool (one key, eight keys, a key per row), each stage shuffled within itself,
            and the stages are read in order (``train_sampling_strategy="sequential"``). One epoch
            is the whole curriculum. Implies ``relabel_keys``.
        relabel_copies (`int`, *optional*, defaults to `1`):
            With ``relabel_keys``: train each ``D_H1`` response this many times, each time under its
            own fresh key (more distinct key/response pairs from the same answers).
        relabel_keep_original (`bool`, *optional*, defaults to `False`):
            With ``relabel_keys``: also train each row under the key that wrote it, beside its
            ``relabel_copies`` relabelled copies. Not with ``relabel_curriculum``. (On SA it broke held-out
            detection that the writers' keys alone reached: see ``relabel_families``.)
        relabel_families (`list[str]` or `None`, *optional*, defaults to `None`):
            With ``relabel_keys``: relabel only these families' ``D_H1`` rows; the others train under their
            writers' keys in as many copies, so every family keeps its share (`None`: every family). WIP
            transfers with fresh keys, SA only with its writers' keys, so a joint model wants ``["wip", "tsp"]``.
        lmbda (`float`, *optional*, defaults to `0.0`):
            Fraction of batches trained on-policy, as trl's GKD: the student samples the responses
            from instruction + query (transformers ``generate``) and the teacher (frozen base, query
            alone, ``Delta_t`` replayed along the student's tokens) scores them.
        on_policy_max_new_tokens (`int` or `None`, *optional*, defaults to `None`):
            Length cap of on-policy samples (`None`: ``max_response_length - 1``).
        on_policy_temperature (`float`, *optional*, defaults to `1.0`):
            Sampling temperature of on-policy samples (1.0: the student's own distribution, the one
            the loss compares with the teacher's).
        rollout_steps (`int`, *optional*, defaults to `1`):
            The on-policy samples of this many optimizer steps are drawn in one ``generate`` call. Decoding
            on a CPU is memory-bound (SmolLM2-135M samples ~3x as many completions a minute at 32 rows as at
            4), so the CPU recipe draws 8 steps of 4 rows at once; the price is staleness: rows of the group's
            later steps come from a policy up to ``rollout_steps - 1`` updates old (trl's GRPO
            ``steps_per_generation`` makes the same trade).

        > Parameters that control the model

        model_init_kwargs (`dict` or `None`, *optional*, defaults to `None`):
            Keyword arguments of ``from_pretrained`` when the model is given as a path.

        > Parameters whose defaults differ from ``TrainingArguments``

        learning_rate (`float`, *optional*, defaults to `7e-6`):
            Initial AdamW learning rate.
        per_device_train_batch_size (`int`, *optional*, defaults to `8`):
            Rows per device per step.
        num_train_epochs (`float`, *optional*, defaults to `2.0`):
            Epochs over ``D_cs`` (the reference implementation trains 2-3).
        logging_steps (`float`, *optional*, defaults to `10`):
            Log every N optimizer steps.
        bf16 (`bool` or `None`, *optional*, defaults to `None`):
            bf16 mixed precision; `None` leaves it to :func:`icw.precision.resolve_training_precision` (bf16
            autocast where the hardware has native bf16, fp32 where it would be emulated).

    Example:
        >>> config = SDLPConfig(output_dir="runs/sdlp", delta_wip=2.0)
        >>> config.learning_rate, config.delta("wip"), config.top_k("tsp"), config.top_k("wip")
        (7e-06, 2.0, 1000, None)
    """

    learning_rate: float = field(default=SDLP_TRAINING["learning_rate"],
                                 metadata={"help": "Initial AdamW learning rate (reference implementation: 7e-6)."})
    per_device_train_batch_size: int = field(default=SDLP_TRAINING["per_device_train_batch_size"],
                                             metadata={"help": "Rows per device per step (reference implementation: 8)."})
    num_train_epochs: float = field(default=SDLP_TRAINING["num_train_epochs"],
                                    metadata={"help": "Epochs over D_cs (reference implementation: 2-3)."})
    logging_steps: float = field(default=10, metadata={"help": "Log every N optimizer steps."})
    bf16: bool | None = field(
        default=None, metadata={"help": "bf16 mixed precision (default: where the hardware runs bf16 natively, "
                                        "decided by icw.precision; false forces fp32)."})
    remove_unused_columns: bool = field(
        default=False, metadata={"help": "Keep the dataset columns: the collator needs family, key and the token ids."})
    delta_tsp: float = field(default=TRAIN_DELTA["tsp"], metadata={"help": "Teacher bias strength for TSP rows."})
    delta_wip: float = field(default=TRAIN_DELTA["wip"], metadata={"help": "Teacher bias strength for WIP rows."})
    delta_sa: float = field(default=TRAIN_DELTA["sa"], metadata={"help": "Teacher bias strength for SA rows."})
    tsp_unused_only: bool = field(
        default=False, metadata={"help": "TSP rows: bias only the green tokens the response has not used yet (the "
                                         "verifier counts distinct tokens; a small pool's static bias loops)."})
    top_k_tsp: int = field(default=_TOP_K_FIELD["tsp"],
                           metadata={"help": "Teacher top-k support for TSP rows (0: full vocabulary)."})
    top_k_wip: int = field(default=_TOP_K_FIELD["wip"],
                           metadata={"help": "Teacher top-k support for WIP rows (0: full vocabulary)."})
    top_k_sa: int = field(default=_TOP_K_FIELD["sa"],
                          metadata={"help": "Teacher top-k support for SA rows (0: full vocabulary)."})
    max_response_length: int = field(
        default=1024, metadata={"help": "Response tokens kept per row (EOS included); longer responses are cut."})
    max_prompt_length: int = field(
        default=32768, metadata={"help": "Longest student prompt accepted; a longer one raises (use a smaller TSP "
                                         "pool_size for small-context models)."})
    loss_chunk_size: int = field(
        default=256, metadata={"help": "Response positions per chunk when applying the output head in the loss; "
                                       "bounds the (chunk, vocab) tensors alive at once."})
    instruction_template: str | None = field(
        default=None, metadata={"help": "Custom instruction template for the student (default: the paper's)."})
    model_init_kwargs: dict[str, Any] | None = field(
        default=None, metadata={"help": "Keyword arguments of from_pretrained when the model is given as a path."})
    relabel_keys: bool = field(
        default=False, metadata={"help": "Train each D_H1 row under a fresh key independent of the one that wrote it "
                                         "(teacher delta and student instruction both use it): the prefix then says "
                                         "nothing about the training key."})
    relabel_num_keys: int = field(
        default=0, metadata={"help": "With relabel_keys: draw the fresh keys from a pool of this many training keys "
                                     "per family (0: a new key per row)."})
    relabel_curriculum: list[int] | None = field(
        default=None, metadata={"help": "Pool sizes of a key curriculum, e.g. 1 8 0: D_cs relabelled once per stage "
                                        "with that pool (0: a key per row), stages read in order (one epoch is the "
                                        "curriculum). Implies relabel_keys."})
    relabel_copies: int = field(
        default=1, metadata={"help": "With relabel_keys: train each D_H1 response this many times, each under its "
                                     "own fresh key."})
    relabel_keep_original: bool = field(
        default=False, metadata={"help": "With relabel_keys: also train each row under the key that wrote it, beside "
                                         "its relabel_copies relabelled copies."})
    relabel_families: list[str] | None = field(
        default=None, metadata={"help": "With relabel_keys: relabel only these families' D_H1 rows, the others "
                                        "train under their writers' keys, in as many copies (default: every family)."})
    lmbda: float = field(
        default=0.0, metadata={"help": "Fraction of batches trained on-policy: the student samples the responses "
                                       "from instruction + query and the teacher scores them (as in trl's GKD)."})
    on_policy_max_new_tokens: int | None = field(
        default=None, metadata={"help": "Length cap of on-policy samples (default: max_response_length - 1)."})
    on_policy_temperature: float = field(
        default=1.0, metadata={"help": "Sampling temperature of on-policy samples (1.0: the student's own "
                                       "distribution, which the loss compares with the teacher's)."})

    rollout_steps: int = field(
        default=1, metadata={"help": "On-policy samples of this many optimizer steps are drawn in one generate() "
                                     "call (decoding on CPU is memory-bound: 32 rows cost ~3x 4 rows); rows of "
                                     "the group's later steps come from a policy up to rollout_steps - 1 updates "
                                     "old."})

    def __post_init__(self) -> None:
        super().__post_init__()
        for domain, names in ((positive_int, ("per_device_train_batch_size", "max_response_length", "max_prompt_length",
                                              "loss_chunk_size", "on_policy_max_new_tokens", "rollout_steps")),
                              (non_negative_int, ("top_k_tsp", "top_k_wip", "top_k_sa")),  # 0: the full vocabulary
                              (positive_float, ("num_train_epochs", "learning_rate", "logging_steps", "delta_tsp",
                                                "delta_wip", "delta_sa", "on_policy_temperature"))):
            for name in names:
                domain.require(getattr(self, name), f"--{name}")
        if not 0.0 <= self.lmbda <= 1.0:
            raise ValueError(f"lmbda is a fraction of batches: it must lie in [0, 1], got {self.lmbda}")
        if self.relabel_copies < 1:
            raise ValueError(f"relabel_copies must be >= 1, got {self.relabel_copies}")
        if self.relabel_num_keys < 0:
            raise ValueError(f"relabel_num_keys must be >= 0 (0: a fresh key per row), got {self.relabel_num_keys}")
        if self.relabel_keep_original and (self.relabel_curriculum or not self.relabel_keys):
            raise ValueError("relabel_keep_original adds relabelled copies to the writers' rows: set relabel_keys "
                             "(and no relabel_curriculum)")
        if self.relabel_families is not None and not set(self.relabel_families) <= set(FAMILIES):
            raise ValueError(f"relabel_families {self.relabel_families}: each must be one of {', '.join(FAMILIES)}")
        if self.relabel_curriculum:
            if self.relabel_num_keys or min(self.relabel_curriculum) < 0:
                raise ValueError(f"relabel_curriculum {self.relabel_curriculum} gives each stage's pool size (each >= 0, "
                                 "0: a key per row); leave relabel_num_keys at 0")
            if not hasattr(self, "train_sampling_strategy"):  # added in transformers 5.x
                raise ValueError(f"relabel_curriculum reads its stages in order through TrainingArguments."
                                 f"train_sampling_strategy, which transformers {transformers_version} lacks: upgrade it")
            if self.train_sampling_strategy not in ("random", "sequential"):
                raise ValueError(f"relabel_curriculum reads its stages in order; train_sampling_strategy "
                                 f"{self.train_sampling_strategy!r} would mix them")
            self.relabel_keys, self.train_sampling_strategy = True, "sequential"

    def delta(self, family: str) -> float:
        return float(getattr(self, f"delta_{family}"))

    def top_k(self, family: str) -> int | None:
        k = int(getattr(self, f"top_k_{family}"))
        return k if k > 0 else None
