"""Perplexity of answers under a reference model: the one implementation behind ICWBench's quality
scores and the cold-start dataset's ``perplexity`` column.

For a response ``y`` to a query ``q`` under a model ``M``::

    PPL(y | q) = exp(-1/|y| * sum_t log p_M(y_t | chat(q), y_<t))

where ``chat(q)`` is ``q`` rendered with ``M``'s chat template (generation prompt included), so the
response is scored where the model would have written it.

Conventions (the same for every caller):

* an empty response has no perplexity: ``None`` (JSON ``null``, never NaN);
* a query and response longer than the model's context keep the response: the prompt is trimmed
  from the front, and when the response alone is longer, only its last tokens are scored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .generation import chat_prompt, context_limit


def perplexities(model: Any, tokenizer: Any, queries: Sequence[str], responses: Sequence[str],
                 batch_size: int = 4) -> list[float | None]:
    """Perplexity of each response given its query under ``model`` (teacher forcing, batched).

    Args:
        model (`PreTrainedModel`): the reference causal LM.
        tokenizer (`PreTrainedTokenizerBase`): its tokenizer (the chat template renders the query).
        queries (`Sequence[str]`): the user queries.
        responses (`Sequence[str]`): one response per query.
        batch_size (`int`, defaults to 4): responses scored per forward pass.

    Returns:
        `list[float | None]`: one perplexity per response, ``None`` for an empty response.

    Example:
        >>> from icw.models import load_model
        >>> model, tok = load_model()
        >>> [round(p) > 1 for p in perplexities(model, tok, ["Say hi."], ["Hi! How can I help you today?"])]
        [True]
        >>> perplexities(model, tok, ["Say hi."], [""])
        [None]
    """
    import torch

    if len(queries) != len(responses):
        raise ValueError(f"got {len(queries)} queries and {len(responses)} responses")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    limit = context_limit(model) or 1 << 30
    rows = []
    for query, response in zip(queries, responses, strict=True):
        prompt = tokenizer(chat_prompt(tokenizer, query), add_special_tokens=False)["input_ids"]
        answer = tokenizer(response, add_special_tokens=False)["input_ids"] if response else []
        answer = answer[-limit:]  # a response longer than the context: score its last `limit` tokens
        rows.append(((prompt + answer)[-limit:], len(answer)))  # trim the prompt's front, keep the response
    out: list[float | None] = [None] * len(rows)
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    order = [i for i, (_, n) in enumerate(rows) if n]
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        width = max(len(rows[i][0]) for i in batch)
        input_ids = torch.full((len(batch), width), pad, device=device)
        attention = torch.zeros((len(batch), width), device=device, dtype=torch.long)
        scored = torch.zeros((len(batch), width), device=device)
        for b, i in enumerate(batch):
            ids, n = rows[i]
            input_ids[b, : len(ids)] = torch.tensor(ids, device=device)
            attention[b, : len(ids)] = 1
            scored[b, len(ids) - n : len(ids)] = 1
        with torch.inference_mode():
            logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), input_ids[:, 1:], reduction="none")
        weight = scored[:, 1:]  # token t is predicted at position t - 1
        mean = (nll * weight).sum(1) / weight.sum(1).clamp(min=1)
        for i, value in zip(batch, mean.tolist(), strict=True):
            out[i] = math.exp(value)
    return out
