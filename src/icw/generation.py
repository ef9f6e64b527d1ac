"""Batched answer generation with transformers: plain, ICW-instructed, or logit-perturbed.

One home for the chat-template and left-padding details that the demo, ICWBench, the
cold-start synthesis and the Space all need.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
from tqdm.auto import tqdm

from .keys import ICWKey, as_keys
from .precision import autocast
from .processors import logits_processor

Mode = Literal["plain", "instruction", "bias"]
MODES = ("plain", "instruction", "bias")
#: Sampling used when the caller gives none (small models loop under greedy decoding).
DEFAULT_SAMPLING = {"do_sample": True, "temperature": 0.7, "top_p": 0.95}


def user_message(query: str, key: ICWKey | None = None, mode: Mode = "plain", tokenizer: Any = None,
                 template: str | None = None) -> str:
    """The user turn: the query, with the key's instruction prepended in ``instruction`` mode.

    Args:
        query (`str`): the user's question.
        key (`ICWKey`, *optional*): the key whose instruction is prepended (needed in ``instruction`` mode).
        mode (`str`, defaults to ``"plain"``): ``plain``, ``instruction`` or ``bias`` (only ``instruction``
            changes the message).
        tokenizer (*optional*): renders a TSP key's green list in the instruction.
        template (`str`, *optional*): a custom instruction template (see
            :func:`icw.templates.template_for`).
    """
    if mode == "instruction":
        if key is None:
            raise ValueError("instruction mode needs a key")
        return key.prompt(query, tokenizer, template)
    return query


def chat_prompt(tokenizer: Any, content: str, system: str | None = None) -> str:
    """Render one user turn with the tokenizer's chat template (plain text if it has none).

    Args:
        tokenizer: the tokenizer whose chat template renders the turn.
        content (`str`): the user message.
        system (`str`, *optional*): a system message placed before it.
    """
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return content + "\n"


def context_limit(model: Any) -> int | None:
    """The model's context window in tokens (``config.max_position_embeddings``), None when unknown.

    Args:
        model: a ``transformers`` model.
    """
    return getattr(getattr(model, "config", None), "max_position_embeddings", None) or None


def prompt_overflow(model: Any, tokenizer: Any, prompts: Sequence[str], max_new_tokens: int = 0
                    ) -> tuple[int, int] | None:
    """``(tokens, limit)`` when the longest prompt plus ``max_new_tokens`` exceeds the model's context.

    A model reading past its context answers garbage (a TSP instruction that lists all of ``V_en``
    runs to ~9k-18k tokens), so callers warn (ICWBench) or refuse (the Space). The longest prompt
    by characters is the one tokenized.

    Args:
        model (`PreTrainedModel` or `None`): the local model; ``None`` (a remote backend) never overflows.
        tokenizer (`PreTrainedTokenizerBase`): its tokenizer.
        prompts (`Sequence[str]`): the prompts about to be sent.
        max_new_tokens (`int`, defaults to 0): room to keep for the answer.

    Returns:
        `tuple[int, int] | None`: the longest prompt's length and the context limit, or ``None`` when it fits.

    Example:
        >>> from icw.models import load_tokenizer
        >>> from icw.testing import tiny_random_model
        >>> model, tok = tiny_random_model(), load_tokenizer("qwen3")
        >>> prompt_overflow(model, tok, ["Why is the sky blue?"], max_new_tokens=100) is None
        True
        >>> prompt_overflow(model, tok, ["Why is the sky blue?", "Why" + " not" * 5000])
        (5001, 4096)
    """
    limit = context_limit(model)
    if not prompts or tokenizer is None or not limit:
        return None
    length = len(tokenizer(max(prompts, key=len), add_special_tokens=False)["input_ids"])
    return (length, limit) if length + max_new_tokens > limit else None


@torch.inference_mode()
def generate_responses(
    model: Any,
    tokenizer: Any,
    queries: Sequence[str],
    keys: ICWKey | str | Sequence[ICWKey | str] | None = None,
    mode: Mode = "plain",
    *,
    delta: float | None = None,
    template: str | None = None,
    max_new_tokens: int = 600,
    batch_size: int = 8,
    seed: int | None = 0,
    generation_kwargs: dict[str, Any] | None = None,
    progress: bool | str = False,
    on_batch: Callable[..., None] | None = None,
    return_token_ids: bool = False,
) -> list[str] | tuple[list[str], list[list[int]]]:
    """Generate one answer per query.

    Args:
        model: a causal LM (``transformers`` ``PreTrainedModel``).
        tokenizer: its tokenizer (with a chat template, or plain prompts are used).
        queries: the user queries.
        keys: one key (shared) or one per query; needed for ``instruction`` and ``bias``.
        mode: ``plain`` (query alone), ``instruction`` (instruction + query) or ``bias``
            (query alone, decoded with the family's logit perturbation).
        delta: bias strength for ``bias`` mode (the family default otherwise).
        template: a custom instruction template for ``instruction`` mode.
        max_new_tokens: the longest answer, in tokens.
        batch_size: queries generated together.
        seed: the batch starting at query ``i`` samples with ``torch.manual_seed(seed + i)`` (``None``: unseeded).
        generation_kwargs: passed to ``generate``, on top of :data:`DEFAULT_SAMPLING`.
        progress: show a progress bar (a string sets its description).
        on_batch: called with (query indices, answers) after each batch, so callers can save
            finished work as it comes (with ``return_token_ids``: (indices, answers, token ids)).
        return_token_ids: also return the sampled token ids of each answer (up to, not including,
            the first EOS), e.g. so training sees exactly what was sampled.

    Returns:
        The decoded answers (special tokens removed), in query order; with ``return_token_ids``,
        ``(answers, token_ids)``.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    queries = list(queries)
    key_list = as_keys(keys, len(queries)) if keys is not None else [None] * len(queries)
    if mode != "plain" and keys is None:
        raise ValueError(f"{mode} mode needs keys")
    kwargs = {**DEFAULT_SAMPLING, **(generation_kwargs or {})}  # a streamer alone must not switch off sampling
    if not kwargs.get("do_sample"):
        kwargs = {k: v for k, v in kwargs.items() if k not in ("temperature", "top_p")}
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    device = next(model.parameters()).device
    # bias batches must share a family (one processor per batch); keep input order otherwise
    order = sorted(range(len(queries)), key=lambda i: key_list[i].family if mode == "bias" else "")
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if mode == "bias":
        batches = [b for chunk in batches for b in _split_by_family(chunk, key_list)]
    answers: list[str] = [""] * len(queries)
    token_ids: list[list[int]] = [[] for _ in queries]
    bar = tqdm(total=len(queries), desc=progress if isinstance(progress, str) else mode, disable=not progress)
    for batch in batches:
        prompts = [chat_prompt(tokenizer, user_message(queries[i], key_list[i], mode, tokenizer, template)) for i in batch]
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        processors = [logits_processor([key_list[i] for i in batch], tokenizer, delta)] if mode == "bias" else []
        if seed is not None:
            torch.manual_seed(seed + batch[0])
        with autocast(device):  # bf16 where the hardware has it natively (icw.precision)
            out = model.generate(**enc, logits_processor=processors, max_new_tokens=max_new_tokens,
                                 pad_token_id=tokenizer.pad_token_id, **kwargs)
        generated = out[:, enc["input_ids"].shape[1] :]
        texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
        for i, text, seq in zip(batch, texts, generated.tolist(), strict=True):
            answers[i] = text.strip()
            token_ids[i] = seq[: seq.index(tokenizer.eos_token_id)] if tokenizer.eos_token_id in seq else seq
        if on_batch is not None:
            extra = ([token_ids[i] for i in batch],) if return_token_ids else ()
            on_batch(batch, [answers[i] for i in batch], *extra)
        bar.update(len(batch))
    bar.close()
    return (answers, token_ids) if return_token_ids else answers


def _split_by_family(batch: list[int], keys: list[ICWKey]) -> list[list[int]]:
    groups: dict[str, list[int]] = {}
    for i in batch:
        groups.setdefault(keys[i].family, []).append(i)
    return list(groups.values())
