"""Generation backends for ICWBench behind one small interface.

A backend turns :class:`Request` s (a user message, optionally a key for logit-bias decoding)
into answers and reports them batch by batch through a callback, so the runner can save
finished work as it comes:

* :class:`TransformersBackend`: batched ``generate`` with left padding (the embedded SmolLM2
  by default), through :func:`icw.generation.generate_responses`;
* :class:`OpenAIBackend`: any OpenAI-compatible chat endpoint (a provider, vLLM's or our own
  :mod:`icw.bench.server`), requests sent concurrently, failures retried then recorded;
* :class:`VLLMBackend`: vLLM offline inference; ``bias`` mode passes each request's key to
  :class:`ICWVLLMLogitsProcessor` through ``SamplingParams.extra_args`` (GPU only).

:class:`ChatClient` is the plain one-prompt client that the judge and the endpoint attacks use.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

from ..keys import ICWKey, as_key

#: ``on_result(requests, answers, errors)``: answers[i] is None exactly when errors[i] is set.
OnResult = Callable[[list["Request"], list["str | None"], list["str | None"]], None]
BACKENDS = ("transformers", "openai", "vllm")


class BackendError(ValueError):
    """A model or endpoint cannot be used (unknown model, unreachable server, missing extra).

    A ``ValueError`` so that the CLI prints it as a one-line user error."""


@dataclass
class Request:
    """One generation: ``user`` is the full user turn; ``key`` is set only for ``bias`` decoding.

    Args:
        uid: identifies the request in the results.
        user (`str`): the full user turn.
        key (`ICWKey`, *optional*): the key whose bias decodes the answer (``bias`` mode only).
    """

    uid: Any
    user: str
    key: ICWKey | None = None


class Backend:
    """Interface: ``name`` (recorded as the model), ``tokenizer`` (None for remote models),
    ``supports_bias`` and :meth:`generate`."""

    name: str = ""
    tokenizer: Any = None
    supports_bias: bool = False

    def generate(self, requests: Sequence[Request], on_result: OnResult, desc: str | None = "generate") -> None:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"backend": type(self).__name__, "model": self.name}


class TransformersBackend(Backend):
    """Batched local generation with transformers (left padding, the model's chat template).

    Args:
        model: ``"smollm2"`` (embedded), a local folder or a Hub id (online), or a
            ``(model, tokenizer)`` pair already loaded.
        max_new_tokens: cap on new tokens per answer.
        batch_size: prompts per ``generate`` call.
        delta: bias strength in ``bias`` mode (family default if None).
        generation_kwargs: passed to ``generate`` (default: :data:`icw.generation.DEFAULT_SAMPLING`).
        seed: base sampling seed (each batch reseeds from it, so runs repeat).
        adapter: a PEFT adapter folder loaded on top of ``model``.
        device: where to load ``model`` when it is a name (``None``: CPU); a loaded pair stays where it is.
    """

    supports_bias = True

    def __init__(self, model: Any = "smollm2", *, max_new_tokens: int = 600, batch_size: int = 8,
                 delta: float | None = None, generation_kwargs: dict[str, Any] | None = None, seed: int = 0,
                 adapter: str | None = None, device: str | None = None) -> None:
        from ..models import SMOLLM2_HUB_ID, MissingAssetError, load_model

        if isinstance(model, tuple):
            self.model, self.tokenizer = model
            self.name = getattr(self.model.config, "name_or_path", None) or type(self.model).__name__
        else:
            try:
                self.model, self.tokenizer = load_model(model, device=device)
            except MissingAssetError as err:
                raise BackendError(str(err)) from None
            except (OSError, ValueError) as err:
                raise BackendError(f"cannot load model {model!r} with transformers: {err}") from None
            self.name = SMOLLM2_HUB_ID if model == "smollm2" else str(model)
        if adapter:
            try:
                from peft import PeftModel
            except ImportError:
                raise BackendError("--adapter needs peft: pip install 'icw[train]'") from None
            self.model = PeftModel.from_pretrained(self.model, adapter).eval()
        self.adapter = adapter
        self.max_new_tokens, self.batch_size, self.delta = max_new_tokens, batch_size, delta
        self.generation_kwargs, self.seed = generation_kwargs, seed

    def generate(self, requests: Sequence[Request], on_result: OnResult, desc: str | None = "generate") -> None:
        from ..generation import generate_responses

        requests = list(requests)
        groups = {"plain": [r for r in requests if r.key is None], "bias": [r for r in requests if r.key is not None]}
        for mode, group in groups.items():
            if not group:
                continue

            def save(indices: list[int], answers: list[str], group: list[Request] = group) -> None:
                on_result([group[i] for i in indices], list(answers), [None] * len(indices))

            generate_responses(self.model, self.tokenizer, [r.user for r in group],
                               [r.key for r in group] if mode == "bias" else None, mode, delta=self.delta,
                               max_new_tokens=self.max_new_tokens, batch_size=self.batch_size, seed=self.seed,
                               generation_kwargs=self.generation_kwargs, progress=desc or False, on_batch=save)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "adapter": self.adapter, "batch_size": self.batch_size}


class ChatClient:
    """One-prompt chat completions against an OpenAI-compatible endpoint, with retries.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1`` or a provider's URL.
        model: the model name the endpoint serves.
        api_key: the provider's key (local servers accept anything).
        retries: extra attempts after a failed or empty answer.
        timeout: seconds per request.
        temperature: default sampling temperature (``None``: the endpoint's).
        max_tokens: default cap on answer tokens (``None``: the endpoint's).
        seed: sent with every request (``None``: none sent; not every provider takes one, vLLM and
            ``icw bench serve`` do).
    """

    def __init__(self, base_url: str | None, model: str, api_key: str | None = None, *, retries: int = 2,
                 timeout: float = 600.0, temperature: float | None = None, max_tokens: int | None = None,
                 seed: int | None = None) -> None:
        try:
            import openai
        except ImportError:
            raise BackendError("the OpenAI-compatible backend needs the openai package: pip install 'icw[bench]'") from None
        import os

        self._openai = openai
        self.base_url, self.model, self.retries = base_url, model, retries
        self.temperature, self.max_tokens, self.seed = temperature, max_tokens, seed
        key = api_key or os.environ.get("OPENAI_API_KEY") or "not-needed"
        # our retries (below) also cover empty answers, so the client's own are switched off
        self.client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout, max_retries=0)

    def check(self) -> None:
        """Fail early, with a message saying what to fix, if the endpoint cannot be reached."""
        try:
            self.client.models.list()
        except self._openai.APIConnectionError as err:
            raise BackendError(f"cannot reach the endpoint {self.base_url!r} ({err}); is the server running, "
                               "and is the URL right (it usually ends in /v1)?") from None
        except self._openai.AuthenticationError as err:
            raise BackendError(f"the endpoint {self.base_url!r} refused the API key: {err}") from None
        except self._openai.APIStatusError:
            pass  # some providers do not list models; the first request will tell

    def complete(self, prompt: str | list[dict[str, str]], *, max_tokens: int | None = None,
                 temperature: float | None = None, system: str | None = None) -> str:
        """Return the assistant's answer; raise :class:`RuntimeError` after the last failed try."""
        messages = prompt if isinstance(prompt, list) else (
            ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}])
        kwargs: dict[str, Any] = {}
        if (max_tokens or self.max_tokens) is not None:
            kwargs["max_tokens"] = max_tokens or self.max_tokens
        if (temperature if temperature is not None else self.temperature) is not None:
            kwargs["temperature"] = temperature if temperature is not None else self.temperature
        if self.seed is not None:
            kwargs["seed"] = self.seed
        last = "no attempt"
        for attempt in range(self.retries + 1):
            try:
                out = self.client.chat.completions.create(model=self.model, messages=messages, **kwargs)
                choices = getattr(out, "choices", None)
                if choices is None:  # e.g. a proxy's HTML page served as text: the client hands back a str
                    last = f"the endpoint did not return a chat completion: {str(out)[:200]!r}"
                else:
                    text = (choices[0].message.content or "") if choices else ""
                    if text.strip():
                        return text.strip()
                    last = "the endpoint returned an empty answer"
            except self._openai.APIConnectionError as err:
                last = f"connection error: {err}"
            except self._openai.APIStatusError as err:
                last = f"HTTP {err.status_code}: {err.message}"
                if err.status_code in (400, 401, 403, 404, 422):
                    break  # the same request will fail the same way
            except (self._openai.APIError, ValueError, TypeError) as err:
                last = f"{type(err).__name__}: {err}"
            if attempt < self.retries:
                time.sleep(min(2.0**attempt * 0.5, 8.0))
        raise RuntimeError(f"{self.model} at {self.base_url}: {last}")


class OpenAIBackend(Backend):
    """Chat completions from any OpenAI-compatible endpoint (instruction mode only: remote
    models take no logit bias). Requests go out ``concurrency`` at a time; an answer that
    still fails after the retries is reported as an error, never dropped.

    Args:
        model (`str`): the model name the endpoint serves.
        base_url (`str`, *optional*): the endpoint, e.g. ``http://127.0.0.1:8000/v1``.
        api_key (`str`, *optional*): the provider's key (``None``: ``$OPENAI_API_KEY``).
        max_new_tokens (`int`, defaults to 600): cap on new tokens per answer.
        temperature (`float`, *optional*): sampling temperature (``None``: the endpoint's default).
        concurrency (`int`, defaults to 4): parallel requests.
        retries (`int`, defaults to 2): extra attempts after a failed or empty answer.
        timeout (`float`, defaults to 600.0): seconds per request.
        check (`bool`, defaults to `True`): probe the endpoint once at start, for an early clear error.
        seed (`int`, *optional*): sampling seed sent with every request (``None``: none sent, the endpoint
            samples as it likes).
    """

    supports_bias = False

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, *,
                 max_new_tokens: int = 600, temperature: float | None = None, concurrency: int = 4,
                 retries: int = 2, timeout: float = 600.0, check: bool = True, seed: int | None = None) -> None:
        self.name, self.concurrency = model, max(1, concurrency)
        self.client = ChatClient(base_url, model, api_key, retries=retries, timeout=timeout,
                                 temperature=temperature, max_tokens=max_new_tokens, seed=seed)
        if check:
            self.client.check()

    def generate(self, requests: Sequence[Request], on_result: OnResult, desc: str | None = "generate") -> None:
        if any(r.key is not None for r in requests):
            raise BackendError("bias mode perturbs logits, which a chat endpoint does not expose: "
                               "use --backend transformers or vllm")

        def one(request: Request) -> tuple[str | None, str | None]:
            try:
                return self.client.complete(request.user), None
            except RuntimeError as err:
                return None, str(err)

        with ThreadPoolExecutor(self.concurrency) as pool, tqdm(total=len(requests), desc=desc, disable=desc is None) as bar:
            futures = {pool.submit(one, r): r for r in requests}
            for future in as_completed(futures):
                answer, error = future.result()
                on_result([futures[future]], [answer], [error])
                bar.update(1)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "base_url": self.client.base_url}


# ------------------------------------------------------------------------------------- vLLM
def vllm_available() -> str | None:
    """None when vLLM and a CUDA device are usable, else the reason they are not."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (pip install 'icw[vllm]')"
    import torch

    if not torch.cuda.is_available():
        return "vLLM needs a CUDA device and none is visible"
    return None


#: ``SamplingParams.extra_args`` entries read by :class:`ICWVLLMLogitsProcessor`.
VLLM_KEY_ARG, VLLM_DELTA_ARG = "icw_key", "icw_delta"


def request_processor(key: ICWKey | str, tokenizer: Any, delta: float | None = None) -> Callable:
    """A per-request ``(output_token_ids, logits) -> logits`` function applying the key's
    perturbation, the shape vLLM's ``AdapterLogitsProcessor`` expects.

    It wraps the transformers processor for one row: the generated ids are prefixed with a
    placeholder so the first call looks like a one-token prompt and later calls advance the
    SA automaton by exactly the newest token, as in ``generate``.

    Args:
        key (`ICWKey` or `str`): the request's key.
        tokenizer: the served model's tokenizer.
        delta (`float`, *optional*): bias strength (``None``: the family's default).
    """
    import torch

    from ..processors import logits_processor

    processor = logits_processor([as_key(key)], tokenizer, delta)

    def apply(output_token_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        ids = torch.tensor([[0, *output_token_ids]], dtype=torch.long)
        return processor(ids, logits.unsqueeze(0)).squeeze(0)

    return apply


def _vllm_processor_class() -> type:
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

    class ICWVLLMLogitsProcessor(AdapterLogitsProcessor):
        """vLLM logits processor applying each request's ICW key (``extra_args["icw_key"]``,
        optional ``extra_args["icw_delta"]``); requests without a key pass through."""

        def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
            super().__init__(vllm_config, device, is_pin_memory)
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(vllm_config.model_config.tokenizer)

        def is_argmax_invariant(self) -> bool:
            return False

        def new_req_logits_processor(self, params: Any) -> Callable | None:
            extra = getattr(params, "extra_args", None) or {}
            if not extra.get(VLLM_KEY_ARG):
                return None
            return request_processor(extra[VLLM_KEY_ARG], self.tokenizer, extra.get(VLLM_DELTA_ARG))

    return ICWVLLMLogitsProcessor


class VLLMBackend(Backend):
    """vLLM offline generation; ``bias`` mode sends each request's key through
    ``SamplingParams.extra_args`` to the ICW logits processor. Needs vLLM and a GPU.

    Args:
        model (`str`): a folder or Hub id vLLM can load.
        max_new_tokens (`int`, defaults to 600): cap on new tokens per answer.
        delta (`float`, *optional*): bias strength in ``bias`` mode (``None``: the family's default).
        seed (`int`, defaults to 0): sampling seed.
        temperature (`float`, defaults to 0.7): sampling temperature.
        top_p (`float`, defaults to 0.95): nucleus sampling threshold.
        **llm_kwargs: passed to ``vllm.LLM``.
    """

    supports_bias = True

    def __init__(self, model: str, *, max_new_tokens: int = 600, delta: float | None = None, seed: int = 0,
                 temperature: float = 0.7, top_p: float = 0.95, **llm_kwargs: Any) -> None:
        reason = vllm_available()
        if reason:
            raise BackendError(f"--backend vllm cannot run here: {reason}")
        from vllm import LLM

        path = model
        if model == "smollm2":
            from ..models import smollm2_path

            path = str(smollm2_path())
        self.name, self.delta, self.max_new_tokens, self.seed = model, delta, max_new_tokens, seed
        self.temperature, self.top_p = temperature, top_p
        self.llm = LLM(model=path, logits_processors=[_vllm_processor_class()], **llm_kwargs)
        self.tokenizer = self.llm.get_tokenizer()

    def sampling_params(self, request: Request) -> Any:
        from vllm import SamplingParams

        extra = {VLLM_KEY_ARG: request.key.to_string(), VLLM_DELTA_ARG: self.delta} if request.key else None
        return SamplingParams(max_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                              seed=self.seed, extra_args=extra)

    def generate(self, requests: Sequence[Request], on_result: OnResult, desc: str | None = "generate") -> None:
        requests = list(requests)
        chunk = 256  # save every few hundred answers rather than only at the end
        for start in range(0, len(requests), chunk):
            part = requests[start : start + chunk]
            messages = [[{"role": "user", "content": r.user}] for r in part]
            outputs = self.llm.chat(messages, [self.sampling_params(r) for r in part], use_tqdm=desc is not None)
            on_result(part, [o.outputs[0].text.strip() for o in outputs], [None] * len(part))


def make_backend(kind: str, model: str, **options: Any) -> Backend:
    """Build a backend by name (``transformers``, ``openai`` or ``vllm``).

    Args:
        kind (`str`): ``"transformers"``, ``"openai"`` or ``"vllm"``.
        model (`str`): the model (name, folder or Hub id).
        **options: the backend's keyword arguments; one given as ``None`` is unset (the backend's default).
    """
    options = {k: v for k, v in options.items() if v is not None}
    if kind == "transformers":
        keep = ("max_new_tokens", "batch_size", "delta", "generation_kwargs", "seed", "adapter", "device")
        return TransformersBackend(model, **{k: v for k, v in options.items() if k in keep})
    if kind == "openai":
        keep = ("base_url", "api_key", "max_new_tokens", "temperature", "concurrency", "retries", "timeout", "seed")
        return OpenAIBackend(model, **{k: v for k, v in options.items() if k in keep})
    if kind == "vllm":
        keep = ("max_new_tokens", "delta", "seed")
        return VLLMBackend(model, **{k: v for k, v in options.items() if k in keep})
    raise BackendError(f"unknown backend {kind!r}; choose one of {', '.join(BACKENDS)}")
