"""Shared fixtures: the embedded tokenizers and model, loaded once per session, fully offline (the offline
environment is set by the repository's root ``conftest.py``)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def qwen3():
    from icw.models import load_tokenizer

    return load_tokenizer("qwen3")


@pytest.fixture(scope="session")
def gpt2():
    from icw.models import load_tokenizer

    return load_tokenizer("gpt2")


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) of the embedded SmolLM2-135M-Instruct, converted once and cached."""
    from icw.models import load_model

    return load_model("smollm2")


@pytest.fixture(scope="session")
def tiny_qwen(qwen3):
    """A ~10M-parameter randomly initialised Qwen3 model with the real Qwen3 tokenizer."""
    from icw.testing import tiny_random_model

    return tiny_random_model("qwen3"), qwen3


@pytest.fixture(scope="module")
def server(tiny_qwen):
    """URL of icw's OpenAI-compatible server around the tiny model (model name "tiny"), on 127.0.0.1."""
    from icw.bench.server import serve_in_thread

    model, tok = tiny_qwen
    srv, url = serve_in_thread(model, tok, "tiny")
    yield url
    srv.shutdown()
