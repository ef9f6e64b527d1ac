"""``pipeline("icw-detection")``: the ICW verifiers behind the transformers pipeline API.

A detector needs only a tokenizer, never LLM weights. The pipeline accepts:

* no ``model=`` at all: the tokenizer the key records (``pipeline("icw-detection", keys=key)``,
  offline for the embedded ``qwen3``/``gpt2``/``smollm2``); SA keys name none and need none, so a
  detector for SA keys alone holds no tokenizer;
* a tokenizer object (the offline way in, e.g. ``icw.models.load_tokenizer("qwen3")``);
* a Hub model id or a local model folder: transformers reads its ``config.json``, then
  :class:`ICWTokenizerOnlyModel` (registered as the task's model class, so it is tried first)
  loads the tokenizer and nothing else.

Plain aliases such as ``"qwen3"`` cannot go through ``pipeline()``, which resolves every string
with ``AutoConfig``; use :func:`detector` for them.

Scores come from :func:`icw.verification.verify` (no second implementation), so they agree number for
number with ``icw detect``.

Example:
    >>> import icw
    >>> from transformers import pipeline
    >>> from icw.models import load_tokenizer
    >>> det = pipeline("icw-detection", model=load_tokenizer("gpt2"), keys="icw:sa:seed=1,secret=HI")
    >>> det("Hello there. It works.")["num_aligned"]
    2

Registration: transformers has no plugin hook for pipelines, and importing
``transformers.pipelines`` costs seconds, so ``import icw`` does not import it. It registers the
task at once when transformers' pipelines are already loaded, and otherwise the moment they are
imported (a one-shot import hook), so ``pipeline("icw-detection", ...)`` always finds it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import warnings
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

TASK = "icw-detection"


class _KeyTokenizer:
    """The task's default "model": use the tokenizer the key records (offline for the embedded aliases).

    transformers resolves a missing ``model=`` to the task default before the pipeline class sees
    the key; this marker passes through untouched (it is path-like only so that transformers'
    revision lookup treats it as local, never contacting the Hub) and ``ICWDetectionPipeline``
    replaces it by ``load_tokenizer(key.tokenizer)``.
    """

    def __fspath__(self) -> str:
        return str(Path(__file__).resolve().parent)

    def __str__(self) -> str:
        return "the tokenizer the key records"


class _QuietDefault(logging.Filter):
    """Drop transformers' "No model was supplied, defaulted to ..." warning for this task's default only.

    ``pipeline()`` logs it whenever ``model=`` is missing, advising against a Hub default in production.
    Here the default is no Hub model but the tokenizer the key itself records, so the documented call
    ``pipeline("icw-detection", keys=key)`` stays silent; other tasks' warnings pass untouched.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return f"defaulted to {_KeyTokenizer()} " not in record.getMessage()


#: ``pipeline("icw-detection", keys=...)`` without ``model=`` uses the tokenizer the key records.
DEFAULT_MODEL = (_KeyTokenizer(), None)
#: Fields of :class:`~icw.verification.VerificationResult` every output carries.
OUTPUT_FIELDS = ("family", "z_score", "p_value", "is_watermarked", "num_tokens_scored", "num_aligned", "alpha",
                 "p_value_method", "key", "note")


class ICWTokenizerOnlyModel:
    """A stand-in "model" holding only a tokenizer (and the config, when one was read).

    transformers' ``Pipeline`` wants a model object; the verifiers need only the tokenizer, so this
    holder satisfies the pipeline's device/dtype protocol without any weights.

    Args:
        tokenizer: the Hugging Face tokenizer the detector scores texts with (required: ICW verification
            needs no weights).
        config (*optional*): the model's ``PretrainedConfig``, exposed as ``model.config`` (``None`` when
            there is none).
        name_or_path (`str`, *optional*): the name reported as ``model.name_or_path`` (defaults to the
            tokenizer's).
    """

    input_modalities = ("text",)
    output_modalities = ()
    dtype = None
    hf_device_map = None

    def __init__(self, tokenizer: Any, config: Any = None, name_or_path: str | None = None) -> None:
        if tokenizer is None or not callable(tokenizer):
            raise TypeError(f"an ICW detector needs a Hugging Face tokenizer, got {type(tokenizer).__name__}")
        self.tokenizer = tokenizer
        self.config = config
        self.name_or_path = name_or_path or getattr(tokenizer, "name_or_path", None)

    @classmethod
    def without_tokenizer(cls) -> ICWTokenizerOnlyModel:
        """The stand-in of a detector built from SA keys alone: SA counts sentences, not tokens."""
        model = cls.__new__(cls)
        model.tokenizer = model.config = model.name_or_path = None
        return model

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, config: Any = None, **kwargs: Any) -> ICWTokenizerOnlyModel:
        """Load the tokenizer of a Hub id or folder; model weights are never read."""
        from transformers import AutoConfig, AutoTokenizer

        hub = {k: kwargs[k] for k in ("revision", "token", "local_files_only", "trust_remote_code", "cache_dir")
               if kwargs.get(k) is not None}
        tokenizer = AutoTokenizer.from_pretrained(str(name_or_path), **hub)
        if config is None:  # pipeline() read it already but does not hand it over; it is a small JSON file
            try:
                config = AutoConfig.from_pretrained(str(name_or_path), **hub)
            except (OSError, ValueError):
                config = None
        return cls(tokenizer, config=config, name_or_path=str(name_or_path))

    @property
    def device(self) -> Any:
        import torch

        return torch.device("cpu")

    def to(self, *args: Any, **kwargs: Any) -> ICWTokenizerOnlyModel:
        return self  # nothing to move: verification runs on the CPU

    def can_generate(self) -> bool:
        return False

    def save_pretrained(self, save_directory: str | Path, **kwargs: Any) -> None:
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(save_directory)
        if self.config is not None:
            self.config.save_pretrained(save_directory)


def _result_dict(result: Any, with_highlights: bool) -> dict[str, Any]:
    out = {name: getattr(result, name) for name in OUTPUT_FIELDS}
    if with_highlights:
        out["highlights"] = [
            {"start": h.start, "end": h.end, "text": h.text, "aligned": h.aligned, "label": h.label}
            for h in result.highlights or []
        ]
    return out


def _renamed_key(keys: Any, key: Any) -> Any:
    """``keys=`` is the argument; ``key=`` is its deprecated spelling (accepted for one release)."""
    if key is None:
        return keys
    if keys is not None:
        raise TypeError("pass keys=... (key= is its deprecated spelling), not both")
    warnings.warn("the icw-detection argument key= is deprecated: use keys= (one key, or one per text)",
                  DeprecationWarning, stacklevel=3)
    return key


@lru_cache(maxsize=1)
def _pipeline_class() -> type:
    """Build the pipeline class on first use: its base class lives in ``transformers.pipelines``."""
    from transformers.pipelines import Pipeline

    from .keys import ICWKey, as_key, as_keys
    from .verification import DEFAULT_ALPHA, verify

    class ICWDetectionPipeline(Pipeline):
        """Verify texts against ICW keys; one dict per text.

        Call with a string (returns a dict), a list of strings (returns a list) or any other
        iterable of strings such as a generator or a ``datasets`` column (returns a lazy
        iterator, verified ``batch_size`` texts at a time), and per call
        ``keys=`` (one key, or one per text), ``alpha=`` and ``highlights=`` (default ``True``);
        ``key=`` is the deprecated spelling of ``keys=``.
        Every dict has ``family``, ``z_score`` (the paper's z), ``p_value`` (exact for TSP/WIP,
        Monte Carlo for SA), ``is_watermarked`` (``p_value <= alpha``), ``num_tokens_scored``,
        ``num_aligned`` and ``highlights`` (counted spans with character offsets).

        Args:
            model: what ``pipeline("icw-detection", model=...)`` passes: a tokenizer-only stand-in model
                (see :class:`ICWTokenizerOnlyModel`) or a tokenizer alias, folder or object.
            tokenizer (*optional*): the tokenizer that scores texts; ``None`` takes it from ``model`` or
                from the first key that names one (none for SA keys alone: each TSP/WIP key given
                later per call then uses the tokenizer it records).
            keys (`ICWKey`, `str` or a list of them, *optional*): the default key(s) of every call: one key,
                or one per text.
            alpha (`float`, defaults to 0.01): the default significance level: a text is watermarked when
                ``p_value <= alpha``.
            highlights (`bool`, defaults to `True`): whether each result lists the counted spans with
                character offsets.
            key (*optional*): deprecated spelling of ``keys``.
            **kwargs: passed to ``transformers.Pipeline`` (e.g. ``batch_size=``).
        """

        _load_tokenizer = False  # ICWTokenizerOnlyModel loads it; a tokenizer passed as model is used as is
        _load_processor = False
        _load_image_processor = False
        _load_feature_extractor = False
        _load_video_processor = False

        def __init__(self, model: Any, tokenizer: Any = None, keys: Any = None, alpha: float = DEFAULT_ALPHA,
                     highlights: bool = True, key: Any = None, **kwargs: Any) -> None:
            keys = _renamed_key(keys, key)
            if isinstance(model, _KeyTokenizer) or (model is None and tokenizer is None):
                own = _key_tokenizer(keys)
                model = ICWTokenizerOnlyModel.without_tokenizer() if own is None else ICWTokenizerOnlyModel(own)
            elif not isinstance(model, ICWTokenizerOnlyModel):
                # a tokenizer object passed as ``model=`` (the offline way in)
                model = ICWTokenizerOnlyModel(tokenizer if model is None else model)
            tokenizer = tokenizer if tokenizer is not None else model.tokenizer
            kwargs.setdefault("device", -1)  # verification is CPU work; never touch an accelerator
            super().__init__(model=model, tokenizer=tokenizer, **kwargs)
            self.keys = None if keys is None else as_key(keys) if isinstance(keys, (ICWKey, str, dict)) else [
                as_key(k) for k in keys]
            self.alpha = alpha
            self.highlights = highlights

        @property
        def key(self) -> Any:
            """Deprecated alias of :attr:`keys`."""
            warnings.warn("ICWDetectionPipeline.key is deprecated: use .keys", DeprecationWarning, stacklevel=2)
            return self.keys

        def _sanitize_parameters(self, keys: Any = None, alpha: float | None = None, highlights: bool | None = None,
                                 **kwargs: Any) -> tuple[dict, dict, dict]:
            if kwargs:
                raise TypeError(f"unknown icw-detection argument(s) {sorted(kwargs)}; use keys=, alpha=, highlights=")
            forward = {k: v for k, v in (("keys", keys), ("alpha", alpha), ("highlights", highlights)) if v is not None}
            return {}, forward, {}

        def __call__(self, inputs: Any, *, keys: Any = None, alpha: float | None = None,
                     highlights: bool | None = None, batch_size: int | None = None, key: Any = None,
                     **kwargs: Any) -> Any:
            """Detect in one text or a batch (verification is batched: one tokenizer call per batch)."""
            self._sanitize_parameters(**kwargs)
            key = _renamed_key(keys, key)
            key = key if key is not None else self.keys
            if key is None:
                raise ValueError('no key: pass keys=... to pipeline("icw-detection", keys=...) or to the call')
            alpha = self.alpha if alpha is None else alpha
            highlights = self.highlights if highlights is None else highlights
            if isinstance(inputs, str):
                return self._forward({"texts": [inputs]}, keys=as_keys(key, 1), alpha=alpha,
                                     highlights=highlights)[0]
            if isinstance(inputs, (list, tuple)):
                if not inputs:
                    raise ValueError("no texts to verify: pass a string or a non-empty list of strings")
                keys = as_keys(key, len(inputs))
                size = batch_size or self._batch_size or len(inputs)
                out: list[dict] = []
                for start in range(0, len(inputs), size):
                    out += self._forward({"texts": list(inputs[start:start + size])},
                                         keys=keys[start:start + size], alpha=alpha, highlights=highlights)
                return out
            if isinstance(inputs, Iterable) and not isinstance(inputs, (bytes, dict)):
                if not isinstance(key, (ICWKey, str, dict)):
                    raise ValueError("a stream of texts takes one shared key; pass a list to give one key per text")
                return self._stream(inputs, key, alpha, highlights, batch_size or self._batch_size or 64)
            raise TypeError(f"icw-detection takes a string or a list of strings, got {type(inputs).__name__}")

        def _stream(self, inputs: Iterable, key: Any, alpha: float, highlights: bool, size: int) -> Iterator[dict]:
            """Lazily verify a generator or a ``datasets`` column, ``size`` texts at a time."""
            chunk: list[str] = []
            for text in inputs:
                chunk.append(text)
                if len(chunk) == size:
                    yield from self._forward({"texts": chunk}, keys=as_keys(key, len(chunk)), alpha=alpha,
                                             highlights=highlights)
                    chunk = []
            if chunk:
                yield from self._forward({"texts": chunk}, keys=as_keys(key, len(chunk)), alpha=alpha,
                                         highlights=highlights)

        def save_pretrained(self, save_directory: str | Path, **kwargs: Any) -> None:
            """Save what the detector uses: the tokenizer (and the model config when one was read).

            Reload with ``pipeline("icw-detection", model=AutoTokenizer.from_pretrained(save_directory))``,
            or ``model=save_directory`` when a config was saved.
            """
            Path(save_directory).mkdir(parents=True, exist_ok=True)
            self.model.save_pretrained(save_directory)

        def preprocess(self, text: str, **kwargs: Any) -> dict[str, Any]:
            return {"texts": [text]}

        def _forward(self, model_inputs: dict[str, Any], keys: Any = None, alpha: float = DEFAULT_ALPHA,
                     highlights: bool = True) -> list[dict[str, Any]]:
            keys = self.keys if keys is None else keys
            results = verify(model_inputs["texts"], keys, self.tokenizer, alpha=alpha, highlights=highlights)
            return [_result_dict(r, highlights) for r in results]

        def postprocess(self, model_outputs: list[dict[str, Any]], **kwargs: Any) -> Any:
            return model_outputs[0] if len(model_outputs) == 1 else model_outputs

    ICWDetectionPipeline.__module__ = __name__
    ICWDetectionPipeline.__qualname__ = "ICWDetectionPipeline"
    return ICWDetectionPipeline


def _key_tokenizer(keys: Any) -> Any:
    """The tokenizer of a pipeline built without ``model=``: that of the first key naming one.

    Args:
        keys: the pipeline's ``keys=`` (one key, or one per text).

    Returns:
        The loaded tokenizer, or ``None`` when every key is SA (SA is verified without a tokenizer).
    """
    from .keys import ICWKey, as_key
    from .models import load_tokenizer

    if keys is None:
        raise ValueError('pipeline("icw-detection") without model= needs keys=...: it uses the tokenizer the key '
                         "records (SA keys need none); or pass model=load_tokenizer(...)")
    keys = [keys] if isinstance(keys, (ICWKey, str, dict)) else list(keys)
    name = next((k.tokenizer for k in map(as_key, keys) if k.tokenizer is not None), None)
    return None if name is None else load_tokenizer(name)


def register() -> None:
    """Register ``"icw-detection"`` with transformers' ``PIPELINE_REGISTRY`` (idempotent)."""
    from transformers.pipelines import PIPELINE_REGISTRY

    quiet = logging.getLogger("transformers.pipelines")
    if not any(isinstance(f, _QuietDefault) for f in quiet.filters):
        quiet.addFilter(_QuietDefault())
    if TASK in PIPELINE_REGISTRY.supported_tasks:
        return
    PIPELINE_REGISTRY.register_pipeline(
        TASK, pipeline_class=_pipeline_class(), pt_model=ICWTokenizerOnlyModel,
        default={"model": DEFAULT_MODEL}, type="text",
    )


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    """One-shot import hook: runs :func:`register` right after ``transformers.pipelines`` loads."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "transformers.pipelines":
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_register(module: Any) -> None:
            exec_module(module)
            register()

        spec.loader.exec_module = exec_and_register
        return spec


def install_registration() -> None:
    """Called by ``import icw``: register now if transformers' pipelines are loaded, else on their import."""
    if "transformers.pipelines" in sys.modules:
        register()
    elif not any(isinstance(f, _RegisterOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterOnImport())


def detector(keys: Any = None, tokenizer: Any = "qwen3", *, key: Any = None, **kwargs: Any) -> Any:
    """``pipeline("icw-detection")`` for a tokenizer alias (``qwen3``, ``gpt2``, ``smollm2``), folder or object.

    Args:
        keys (`ICWKey`, `str` or a list of them, *optional*): the key every call uses unless it
            passes its own (one key, or one per text). ``key=`` is its deprecated spelling.
        tokenizer (`str` or tokenizer, defaults to ``"qwen3"``): an alias, a folder or a tokenizer
            object; ``None`` uses the tokenizer the (first) key names, and none for SA keys alone.
        key (*optional*): deprecated spelling of ``keys``.
        **kwargs: passed to ``transformers.pipeline`` (``alpha=``, ``highlights=``, ``batch_size=``).

    Example:
        >>> from icw import ICWKey, detector
        >>> det = detector(keys=ICWKey.create("sa", secret="HI"), tokenizer="gpt2")
        >>> det("Hello there. It works.")["num_aligned"]
        2
    """
    key = _renamed_key(keys, key)
    from transformers import pipeline

    from .models import resolve_tokenizer

    register()
    if tokenizer is None:  # the task's default: the tokenizer the key records (none for SA keys alone)
        return pipeline(TASK, keys=key, **kwargs)
    return pipeline(TASK, model=resolve_tokenizer(tokenizer), keys=key, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "ICWDetectionPipeline":
        return _pipeline_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
