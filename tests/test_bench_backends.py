"""Generation backends: the OpenAI-compatible client against a real local server, vLLM plumbing."""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest
import torch

from icw.bench.backends import (
    BackendError,
    ChatClient,
    OpenAIBackend,
    Request,
    TransformersBackend,
    make_backend,
    request_processor,
    vllm_available,
)
from icw.keys import ICWKey
from icw.processors import logits_processor


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_openai_backend_round_trip_through_real_server(server):
    backend = OpenAIBackend("tiny", server, max_new_tokens=6, concurrency=2)
    got = []
    requests = [Request(i, f"Question {i}?") for i in range(3)]
    backend.generate(requests, lambda reqs, answers, errors: got.extend(zip([r.uid for r in reqs], answers, errors, strict=True)))
    assert sorted(uid for uid, _, _ in got) == [0, 1, 2]
    assert all(isinstance(a, str) and a and e is None for _, a, e in got)
    with pytest.raises(BackendError, match="bias mode"):
        backend.generate([Request(0, "q", ICWKey.create("sa", 1))], lambda *a: None)


def test_server_speaks_the_openai_protocol(server):
    with urllib.request.urlopen(server + "/models") as resp:
        assert json.load(resp)["data"][0]["id"] == "tiny"
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                       "temperature": 0}).encode()
    req = urllib.request.Request(server + "/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as resp:
        out = json.load(resp)
    assert out["object"] == "chat.completion" and out["usage"]["completion_tokens"] <= 3
    bad = urllib.request.Request(server + "/chat/completions", b'{"messages": "nope"}',
                                 {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(bad)
    assert info.value.code == 400


def test_endpoint_errors_are_reported_not_dropped(server):
    dead = f"http://127.0.0.1:{_free_port()}/v1"
    with pytest.raises(BackendError, match="cannot reach the endpoint"):
        OpenAIBackend("tiny", dead)
    client = ChatClient(dead, "tiny", retries=1)
    with pytest.raises(RuntimeError, match="connection error"):
        client.complete("hello")
    # a request the server rejects (400) fails at once with the server's message
    with pytest.raises(RuntimeError, match="HTTP 400"):
        ChatClient(server, "tiny").complete([{"role": "robot", "content": "x"}])
    backend = OpenAIBackend("tiny", dead, check=False, retries=0)
    got = []
    backend.generate([Request("a", "q")], lambda reqs, answers, errors: got.extend(zip(answers, errors, strict=True)))
    assert got[0][0] is None and "connection error" in got[0][1]


def test_unknown_model_and_backend(tmp_path):
    with pytest.raises(BackendError, match="cannot load model"):
        TransformersBackend(str(tmp_path / "missing"))
    with pytest.raises(BackendError, match="unknown backend"):
        make_backend("tgi", "smollm2")


def test_vllm_request_processor_matches_transformers_processor(qwen3, tiny_qwen):
    """The per-request function handed to vLLM applies exactly the transformers bias, step by step."""
    model, tok = tiny_qwen
    vocab = model.config.vocab_size
    for key in (ICWKey.create("wip", 3, qwen3), ICWKey.create("sa", 4), ICWKey.create("tsp", 5, qwen3, pool_size=500)):
        per_request = request_processor(key.to_string(), tok, delta=2.0)
        reference = logits_processor([key], tok, 2.0)
        text_ids = tok("Apples grow. Bananas too. Cherries", add_special_tokens=False)["input_ids"]
        torch.manual_seed(0)
        changed = 0
        for step in range(len(text_ids) + 1):
            logits = torch.randn(vocab)
            got = per_request(text_ids[:step], logits.clone())
            want = reference(torch.tensor([[0, *text_ids[:step]]]), logits.clone().unsqueeze(0))[0]
            assert torch.equal(got, want)
            changed += not torch.equal(got, logits)
        assert changed > 0


def test_vllm_backend_is_optional():
    reason = vllm_available()
    if reason is None:
        pytest.skip("vLLM and CUDA are present: covered by the GPU test below")
    with pytest.raises(BackendError, match="cannot run here"):
        make_backend("vllm", "smollm2")


@pytest.mark.gpu
def test_vllm_bias_mode_on_gpu(smollm2):
    reason = vllm_available()
    if reason:
        pytest.skip(reason)
    from icw.verify import verify

    backend = make_backend("vllm", "smollm2", max_new_tokens=64)
    tok = smollm2[1]
    keys = [ICWKey.create("wip", 10 + i, tok) for i in range(4)]
    got = {}
    backend.generate([Request(i, "Tell me about the ocean.", k) for i, k in enumerate(keys)] +
                     [Request(10 + i, "Tell me about the ocean.") for i in range(4)],
                     lambda reqs, answers, errors: got.update({r.uid: a for r, a in zip(reqs, answers, strict=True)}))
    pos = [verify(got[i], keys[i], tok).z_score for i in range(4)]
    neg = [verify(got[10 + i], keys[i], tok).z_score for i in range(4)]
    assert min(pos) > max(neg)
