"""A small OpenAI-compatible chat server around a transformers model (standard library only).

Serves ``GET /v1/models`` and ``POST /v1/chat/completions`` (non-streaming) for one model, so
the OpenAI-compatible backend, the judge and the endpoint attacks can run end to end offline,
against the embedded SmolLM2 or any local model. Requests are answered one at a time.

Run it::

    python -m icw.bench.server --model smollm2 --port 8000
    icw bench run --backend openai --base-url http://127.0.0.1:8000/v1 --model smollm2 ...

``max_tokens`` defaults to 256; ``temperature`` 0 means greedy decoding; ``seed`` makes
sampling repeatable.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_MAX_TOKENS = 256


class ChatModel:
    """Turns chat messages into one answer with the model's chat template.

    Args:
        model: a ``transformers`` causal LM.
        tokenizer: its tokenizer (with a chat template).
        name (`str`): the model name the API reports and accepts.
    """

    def __init__(self, model: Any, tokenizer: Any, name: str) -> None:
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.lock = threading.Lock()
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token

    def complete(self, messages: list[dict[str, str]], max_tokens: int = DEFAULT_MAX_TOKENS,
                 temperature: float = 0.7, top_p: float = 0.95, seed: int | None = None) -> tuple[str, int, int, str]:
        import torch

        from ..precision import autocast

        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        enc = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 else {
            "do_sample": False}
        with self.lock, torch.inference_mode(), autocast(self.model.device):  # bf16 where native
            if seed is not None:
                torch.manual_seed(seed)
            out = self.model.generate(**enc, max_new_tokens=max_tokens, pad_token_id=self.tokenizer.pad_token_id,
                                      **sampling)
        new = out[0, enc["input_ids"].shape[1] :]
        finish = "stop" if len(new) < max_tokens or int(new[-1]) == self.tokenizer.eos_token_id else "length"
        text = self.tokenizer.decode(new, skip_special_tokens=True).strip()
        return text, int(enc["input_ids"].shape[1]), int(len(new)), finish


def _error(status: int, message: str, kind: str = "invalid_request_error") -> tuple[int, dict]:
    return status, {"error": {"message": message, "type": kind, "code": status}}


def handle_chat(chat: ChatModel, body: dict[str, Any]) -> tuple[int, dict]:
    """Validate an OpenAI chat request and answer it (status, JSON body).

    Args:
        chat (`ChatModel`): the model that answers.
        body (`dict`): the request's JSON body (``model``, ``messages``, sampling options).
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("content"), str) and m.get("role") in ("system", "user", "assistant")
            for m in messages):
        return _error(400, "'messages' must be a non-empty list of {role, content} objects")
    if body.get("stream"):
        return _error(400, "streaming is not supported by this server")
    try:
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or DEFAULT_MAX_TOKENS)
        temperature = float(body.get("temperature", 0.7) if body.get("temperature") is not None else 0.7)
        top_p = float(body.get("top_p") or 0.95)
        seed = body.get("seed")
        seed = int(seed) if seed is not None else None
    except (TypeError, ValueError):
        return _error(400, "max_tokens, temperature, top_p and seed must be numbers")
    if max_tokens < 1 or temperature < 0:
        return _error(400, "max_tokens must be >= 1 and temperature >= 0")
    text, prompt_tokens, completion_tokens, finish = chat.complete(
        [{"role": m["role"], "content": m["content"]} for m in messages], max_tokens, temperature, top_p, seed)
    return 200, {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
        "model": chat.name,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def make_server(chat: ChatModel, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """An HTTP server (not yet serving) answering the OpenAI chat API with ``chat``.

    Args:
        chat (`ChatModel`): the model that answers.
        host (`str`, defaults to ``"127.0.0.1"``): the address to bind.
        port (`int`, defaults to 8000): the port to bind (0: any free port).
    """

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests and progress bars share stderr
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [
                    {"id": chat.name, "object": "model", "created": 0, "owned_by": "icw"}]})
            else:
                self._send(*_error(404, f"no route {self.path}", "not_found"))

        def do_POST(self) -> None:
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._send(*_error(404, f"no route {self.path}", "not_found"))
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
            except (ValueError, json.JSONDecodeError):
                self._send(*_error(400, "the request body is not JSON"))
                return
            if not isinstance(body, dict):
                self._send(*_error(400, "the request body must be a JSON object"))
                return
            try:
                self._send(*handle_chat(chat, body))
            except Exception as err:  # report, keep serving
                self._send(*_error(500, f"{type(err).__name__}: {err}", "server_error"))

    return ThreadingHTTPServer((host, port), Handler)


def serve_in_thread(model: Any, tokenizer: Any, name: str = "smollm2", host: str = "127.0.0.1",
                    port: int = 0) -> tuple[ThreadingHTTPServer, str]:
    """Start a server on a background thread; returns ``(server, base_url)``. ``port=0`` picks a
    free port. Stop it with ``server.shutdown()``.

    Args:
        model: a ``transformers`` causal LM.
        tokenizer: its tokenizer.
        name (`str`, defaults to ``"smollm2"``): the model name the API reports.
        host (`str`, defaults to ``"127.0.0.1"``): the address to bind.
        port (`int`, defaults to 0): the port to bind (0: any free port).
    """
    server = make_server(ChatModel(model, tokenizer, name), host, port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}/v1"


def main(argv: list[str] | None = None) -> None:
    """Serve a model on the OpenAI chat API until interrupted (``python -m icw.bench.server --help``)."""
    """Serve a model on the OpenAI chat API until interrupted (``python -m icw.bench.server --help``)."""
    parser = argparse.ArgumentParser(prog="python -m icw.bench.server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="'smollm2' (embedded), a local folder or a Hub id")
    parser.add_argument("--name", help="model name to answer to (default: --model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    from ..models import load_model

    model, tokenizer = load_model(args.model)
    server = make_server(ChatModel(model, tokenizer, args.name or args.model), args.host, args.port)
    print(f"serving {args.name or args.model} at http://{args.host}:{server.server_address[1]}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
