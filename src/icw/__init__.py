"""icw: in-context watermarking for the Hugging Face ecosystem.

Keys (:class:`ICWKey`) render ICW instructions, build the logit bias that imitates them
(:mod:`icw.processors`) and parameterize the verifiers (:func:`verify`).
"""

from .keys import DEFAULT_DELTA, FAMILIES, ICWKey, ICWKeyError, KeyMismatchError
from .text import sentence_initials
from .verification import MultiKeyResult, TextTooLongError, VerificationResult, verify, verify_keys
from .vocab import vocabulary

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_DELTA",
    "FAMILIES",
    "ICWKey",
    "ICWKeyError",
    "KeyMismatchError",
    "MultiKeyResult",
    "TextTooLongError",
    "VerificationResult",
    "sentence_initials",
    "verify",
    "verify_keys",
    "vocabulary",
]

# pipeline("icw-detection"): registered with transformers once its pipelines module is loaded
from .pipeline import install_registration as _install_pipeline  # noqa: E402

_install_pipeline()
