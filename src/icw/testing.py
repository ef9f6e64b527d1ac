"""Randomly initialised stand-in models for tests and benchmarks.

Real architectures with random weights: fast unit tests (:func:`tiny_random_model`) and GPU
speed or memory measurements where the shape matters and the weights do not (:func:`random_model`).
:func:`scripted_model` sets a tiny model's weights so that it always answers one given text: a
real model that an offline judge endpoint can serve when a test needs a readable reply.
Nothing is downloaded; the tokenizers are the embedded ones of :mod:`icw.models`.
"""

from __future__ import annotations

from typing import Any

from .models import load_tokenizer

#: Shapes of real Qwen3 checkpoints, for randomly initialised stand-ins (GPU timings need the real
#: architecture, not the weights). Fields: hidden size, MLP size, layers, attention heads, tied embeddings.
QWEN3_SHAPES = {
    "qwen3-0.6b": (1024, 3072, 28, 16, True),
    "qwen3-1.7b": (2048, 6144, 28, 16, True),
    "qwen3-4b": (2560, 9728, 36, 32, True),
    "qwen3-8b": (4096, 12288, 36, 32, False),
    "qwen3-14b": (5120, 17408, 40, 40, False),
}


def tiny_random_model(tokenizer: str = "qwen3", seed: int = 0, hidden_size: int = 64, num_layers: int = 2) -> Any:
    """A small randomly initialised Qwen3-architecture model over a real tokenizer's vocabulary,
    for fast tests where the weights do not matter. Returns the model alone (the tokenizer is
    ``load_tokenizer(tokenizer)``).

    Args:
        tokenizer (`str`, defaults to ``"qwen3"``): the embedded tokenizer whose vocabulary the model uses.
        seed (`int`, defaults to 0): seed of the random weights.
        hidden_size (`int`, defaults to 64): the model's hidden size.
        num_layers (`int`, defaults to 2): the number of decoder layers.
    """
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    tok = load_tokenizer(tokenizer)
    config = Qwen3Config(vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
                         num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         max_position_embeddings=4096, tie_word_embeddings=True,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config).eval()


def scripted_model(reply: str, tokenizer: str = "qwen3", hidden_size: int = 64) -> Any:
    """A one-layer Qwen3-architecture model whose greedy answer to any prompt is ``reply``, then end of text.

    The weights spell out a chain: every token outside the reply embeds to state 0, the reply's
    ``k``-th token embeds to state ``k + 1``, and state ``k`` predicts the reply's ``k``-th token
    (the end-of-text token last). Attention and MLP outputs are zeroed, so the next token depends on
    the last one only. Served with :mod:`icw.bench.server`, it gives tests an offline judge with a
    known, parsable reply (a random model answers garbage). The reply's tokens must be distinct and
    none may end the prompt (the chat template ends with the assistant header's newline).

    Args:
        reply (`str`): the answer, e.g. ``'{"coverage": 4}'``.
        tokenizer (`str`, defaults to ``"qwen3"``): the embedded tokenizer whose vocabulary the model uses.
        hidden_size (`int`, defaults to 64): the model's hidden size (more than the reply's tokens).
    """
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    tok = load_tokenizer(tokenizer)
    ids = [*tok.encode(reply, add_special_tokens=False), tok.eos_token_id]
    if len(set(ids)) != len(ids) or len(ids) >= hidden_size:
        raise ValueError(f"the reply {reply!r} needs distinct tokens, fewer than hidden_size={hidden_size}")
    config = Qwen3Config(vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=16, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                         tie_word_embeddings=False, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for layer in model.model.layers:  # no mixing: the residual stream is the last token's embedding
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embed, head = model.model.embed_tokens.weight, model.lm_head.weight
        embed.zero_()
        embed[:, 0] = 1.0
        head.zero_()
        for k, token in enumerate(ids):
            head[token, k] = 10.0
            if k + 1 < len(ids):
                embed[token].zero_()
                embed[token, k + 1] = 1.0
    return model


def random_model(shape: str, device: str = "cpu", dtype: Any = None, seed: int = 0) -> tuple[Any, Any]:
    """``(model, tokenizer)``: a randomly initialised model with the shape of a real Qwen3 checkpoint
    (a key of :data:`QWEN3_SHAPES`) and the real Qwen3 tokenizer, built directly on ``device``.

    For speed and memory measurements on a GPU, where the architecture matters and the weights
    do not (nothing is downloaded).

    Args:
        shape (`str`): a key of :data:`QWEN3_SHAPES`, e.g. ``"qwen3-0.6b"``.
        device (`str`, defaults to ``"cpu"``): where the weights are created.
        dtype (*optional*): the ``torch`` dtype of the weights (``None``: float32).
        seed (`int`, defaults to 0): seed of the random weights.

    Example:
        >>> model, tok = random_model("qwen3-0.6b", device="cuda", dtype=torch.bfloat16)  # doctest: +SKIP
    """
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    if shape not in QWEN3_SHAPES:
        raise ValueError(f"unknown model shape {shape!r}; choose from {sorted(QWEN3_SHAPES)}")
    hidden, mlp, layers, heads, tied = QWEN3_SHAPES[shape]
    tok = load_tokenizer("qwen3")
    config = Qwen3Config(vocab_size=151936, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=8, head_dim=128,
                         max_position_embeddings=40960, tie_word_embeddings=tied,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(seed)
    with torch.device(device):  # initialise in place: an 8B model never passes through host memory
        model = AutoModelForCausalLM.from_config(config, dtype=dtype or torch.float32)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model.eval(), tok
