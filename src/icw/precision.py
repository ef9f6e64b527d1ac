"""Which precision icw computes in: bf16 where the hardware runs it natively, fp32 where it would be emulated.

One decision for training (SDLP, GRPO, SFT, the adaptive attacker, the lab scripts) and decoding (ICWBench's
transformers backend, cold-start synthesis, the Space). On a CPU, bf16 is native with AVX-512 BF16 or AMX
(``lscpu`` flags ``avx512_bf16`` / ``amx_bf16``; what oneDNN reports as
``torch.ops.mkldnn._is_mkldnn_bf16_supported()``): there a full-weights SmolLM2-135M training step runs 1.9-2.7x
and batched sampling 1.3x faster under bf16 autocast than in fp32, and a short run learns the same
(``docs/training.md``). On an AVX2-only CPU autocast emulates bf16 and a GRPO step took 52x its fp32 time, so
fp32 there. On a GPU, bf16 where ``torch.cuda.is_bf16_supported()``.

``ICW_PRECISION=fp32`` or ``bf16`` overrides the decision for a whole run (``auto``, the default, decides by
the hardware); ``benchmarks/train_step.py --precision`` sets it to measure both on one machine.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any

import torch

PRECISIONS = ("auto", "fp32", "bf16")


def requested() -> str:
    """``ICW_PRECISION`` (``auto``, ``fp32`` or ``bf16``; unset: ``auto``), checked."""
    value = os.environ.get("ICW_PRECISION", "auto").strip().lower() or "auto"
    if value not in PRECISIONS:
        raise ValueError(f"ICW_PRECISION={value!r}: set it to one of {', '.join(PRECISIONS)} (or unset it)")
    return value


def native_bf16(device: str | torch.device = "cpu") -> bool:
    """Whether ``device`` runs bf16 matmuls natively (CPU: AVX-512 BF16 or AMX; CUDA: ``is_bf16_supported``).

    Args:
        device (`str` or `torch.device`): ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...
    """
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if kind == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return False


def use_bf16(device: str | torch.device = "cpu") -> bool:
    """The decision: bf16 on ``device`` unless ``ICW_PRECISION`` says otherwise (``auto``: where native).

    Args:
        device (`str` or `torch.device`): where the model runs.

    Example:
        >>> import os
        >>> os.environ["ICW_PRECISION"] = "fp32"
        >>> use_bf16("cpu")
        False
        >>> del os.environ["ICW_PRECISION"]
        >>> use_bf16("cpu") == native_bf16("cpu")
        True
    """
    choice = requested()
    return choice == "bf16" or (choice == "auto" and native_bf16(device))


def describe(device: str | torch.device = "cpu") -> str:
    """One line for a run's output and report card, e.g. ``bf16 autocast (native bf16 on this CPU)``.

    Args:
        device (`str` or `torch.device`): where the model runs.
    """
    kind = torch.device(device).type
    where = "this GPU" if kind == "cuda" else "this CPU"
    native = "native bf16" if native_bf16(device) else "no native bf16"
    how = "bf16 autocast" if use_bf16(device) else "fp32"
    override = f", ICW_PRECISION={requested()}" if requested() != "auto" else ""
    return f"{how} ({native} on {where}{override})"


@contextlib.contextmanager
def autocast(device: str | torch.device = "cpu") -> Iterator[None]:
    """bf16 autocast around decoding where :func:`use_bf16` says so; a no-op otherwise.

    The weights stay fp32 (a model being trained keeps its fp32 master copy); matmuls run in bf16 and
    ``generate`` casts each step's logits back to fp32 before the logits processors and sampling.

    Args:
        device (`str` or `torch.device`): the model's device.
    """
    kind = torch.device(device).type
    if kind in ("cpu", "cuda") and use_bf16(device):
        with torch.autocast(kind, dtype=torch.bfloat16):
            yield
    else:
        yield


def resolve_training_precision(training_args: Any) -> str:
    """Set a ``TrainingArguments``' mixed precision by :func:`use_bf16`; return the line the run prints.

    ``bf16`` left unset (``None``, :class:`~icw.train.sdlp_config.SDLPConfig`'s default) or trl's default ``True``
    becomes the decision; an explicit ``bf16: false`` stays fp32 (``ICW_PRECISION`` overrides both);
    ``bf16: true`` on hardware without native bf16 falls back to fp32 with a warning, since autocast there is
    emulated and several times slower.

    Args:
        training_args (`transformers.TrainingArguments`): its ``bf16`` and ``mixed_precision`` are set in place.
    """
    device = "cpu" if training_args.use_cpu or not torch.cuda.is_available() else "cuda"
    if requested() != "auto" or training_args.bf16 is None:
        decided, line = use_bf16(device), describe(device)
    elif not training_args.bf16:
        decided, line = False, "fp32 (bf16: false)"
    else:
        decided, line = native_bf16(device), describe(device)
        if not decided:
            warnings.warn(f"{line}: bf16 autocast would be emulated, several times slower than fp32; training in "
                          "fp32 (set bf16: false to silence this)", stacklevel=2)
    training_args.bf16 = decided
    training_args.mixed_precision = "bf16" if decided else "no"
    return line


def machine(device: str | torch.device = "cpu") -> dict[str, Any]:
    """What a run's report card records about where it ran: CPU model, cores, precision, torch.

    Args:
        device (`str` or `torch.device`): where the model runs.
    """
    import platform

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    info = {"cpu": cpu, "cores": cores, "precision": describe(device), "torch": torch.__version__}
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info
