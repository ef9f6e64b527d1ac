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


def test_openai_seed_is_sent_only_when_set(server):
    """`icw bench run --backend openai --seed S` sends S with each request, so a seeding endpoint (vLLM, icw bench
    serve) answers the same again; without --seed nothing is sent, for providers that refuse the field."""
    def answers(**options) -> list[str]:
        got: dict[int, str] = {}
        backend = make_backend("openai", "tiny", base_url=server, max_new_tokens=12, concurrency=1, **options)
        backend.generate([Request(i, f"Question {i}?") for i in range(3)],
                         lambda reqs, texts, errors: got.update(zip([r.uid for r in reqs], texts, strict=True)))
        return [got[i] for i in range(3)]

    assert answers(seed=3) == answers(seed=3) != answers(seed=4)
    assert make_backend("openai", "tiny", base_url=server, seed=None).client.seed is None


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
    from icw.verification import verify

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


class _FlakyEndpoint:
    """A real HTTP server on 127.0.0.1 that answers chat completions from a script of replies:
    ``(status, content_type, body)`` in turn, then a valid completion for every later request."""

    def __init__(self, script):
        import http.server
        import threading

        self.script, self.calls = list(script), 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, ctype, body):
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(200, "application/json", json.dumps({"object": "list", "data": [{"id": "flaky"}]}))

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.calls += 1
                if outer.script:
                    self._send(*outer.script.pop(0))
                    return
                self._send(200, "application/json", json.dumps({
                    "id": "x", "object": "chat.completion", "created": 0, "model": "flaky",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "A real answer."}}]}))

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


GARBAGE = [(500, "application/json", '{"error": {"message": "overloaded"}}'),
           (200, "application/json", "{not json"),
           (200, "text/plain", "<html>proxy error</html>"),
           (200, "application/json", '{"unexpected": true}')]


def test_endpoint_garbage_is_retried_then_reported_clearly(monkeypatch):
    monkeypatch.setattr("icw.bench.backends.time.sleep", lambda s: None)  # no back-off waits in the test
    flaky = _FlakyEndpoint(GARBAGE)
    try:
        # enough retries: every kind of garbage counts as a failed try and the answer still arrives
        client = ChatClient(flaky.url, "flaky", retries=len(GARBAGE))
        assert client.complete("hi") == "A real answer." and flaky.calls == len(GARBAGE) + 1
        # no retries: each garbage reply is an error that says what the endpoint did, never a crash
        flaky.script, flaky.calls = list(GARBAGE), 0
        backend = OpenAIBackend("flaky", flaky.url, retries=0, concurrency=1)
        got = []
        requests = [Request(i, f"Question {i}?") for i in range(len(GARBAGE) + 1)]
        backend.generate(requests, lambda reqs, answers, errors: got.extend(zip(answers, errors, strict=True)))
    finally:
        flaky.close()
    errors = [e for a, e in got if a is None]
    assert len(got) == len(GARBAGE) + 1 and len(errors) == len(GARBAGE)
    assert [a for a, e in got if e is None] == ["A real answer."]
    assert any("HTTP 500" in e for e in errors), errors
    assert all(e.startswith("flaky at http://127.0.0.1:") for e in errors), errors
