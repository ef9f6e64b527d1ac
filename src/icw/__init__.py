"""icw: in-context watermarking for the Hugging Face ecosystem.

Keys (:class:`ICWKey`) render ICW instructions, build the logit bias that imitates them
(:func:`logits_processor` and the three processors) and parameterize the verifiers
(:func:`verify`, and the ``pipeline("icw-detection")`` detector, :class:`ICWDetectionPipeline`).

``import icw`` stays light: the processors (torch) and the detector (``transformers.pipelines``)
are imported on first use.
"""

from typing import Any

from .keys import DEFAULT_DELTA, FAMILIES, ICWKey, ICWKeyError, KeyMismatchError
from .multikey import MultiKeyResult, verify_keys
from .text import sentence_initials
from .verification import TextTooLongError, VerificationResult, verify
from .vocab import vocabulary

__version__ = "0.1.0"

#: Public names imported on first access: (module, attribute).
_LAZY = {
    "logits_processor": ("processors", "logits_processor"),
    "TokenSetPreferenceLogitsProcessor": ("processors", "TokenSetPreferenceLogitsProcessor"),
    "WordInitialPreferenceLogitsProcessor": ("processors", "WordInitialPreferenceLogitsProcessor"),
    "SentenceAcrosticLogitsProcessor": ("processors", "SentenceAcrosticLogitsProcessor"),
    "ICWDetectionPipeline": ("pipeline", "ICWDetectionPipeline"),
    "detector": ("pipeline", "detector"),
    "new_key": ("screening", "new_key"),
}

__all__ = [
    "DEFAULT_DELTA",
    "FAMILIES",
    "ICWDetectionPipeline",
    "ICWKey",
    "ICWKeyError",
    "KeyMismatchError",
    "MultiKeyResult",
    "SentenceAcrosticLogitsProcessor",
    "TextTooLongError",
    "TokenSetPreferenceLogitsProcessor",
    "VerificationResult",
    "WordInitialPreferenceLogitsProcessor",
    "detector",
    "logits_processor",
    "new_key",
    "sentence_initials",
    "verify",
    "verify_keys",
    "vocabulary",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


# pipeline("icw-detection"): registered with transformers once its pipelines module is loaded
from .pipeline import install_registration as _install_pipeline  # noqa: E402

_install_pipeline()
