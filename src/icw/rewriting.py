"""What rewriting attacks share: the paraphrase prompt and the semantic-utility score.

Both the benchmark (:mod:`icw.bench.attacks`, :mod:`icw.bench.report`) and the adaptive attacker's
training (:mod:`icw.train.adaptive_attack`) use them, so they live here, below both.
"""

from __future__ import annotations

from collections.abc import Sequence

#: Written beside a trained attacker's adapter (``icw train adaptive-attack``): its base model, prompt
#: and generation length, read back by ``icw bench run --attacks adaptive --attack-adapter DIR``.
ATTACK_FILE = "icw_attack.json"

#: The paraphrase request (``{text}`` is the text to rewrite), in our own words.
PARAPHRASE_PROMPT = ("Rewrite the following text in your own words. Keep every fact and the overall length, "
                     "change the wording and sentence structure, and reply with the rewritten text only.\n\n"
                     "Text:\n{text}")


def semantic_utility(sources: Sequence[str], attacked: Sequence[str | None]) -> list[float | None]:
    """How much of each source an attacked text keeps: sentence chrF (``sacrebleu``) in [0, 1].

    The paper measures utility with P-SP (paraphrastic sentence embeddings), which needs a model
    from the Hub; chrF (character n-gram F-score, recall weighted with beta = 2) runs offline. It
    is stricter than P-SP: a faithful paraphrase that changes most words scores well below 1, so
    compare attacks with each other at the same constraint, not with the paper's P-SP numbers.
    A missing attacked text (a failed attack) has no utility (``None``).

    Args:
        sources (`Sequence[str]`): the watermarked answers before the attack (references).
        attacked (`Sequence[str | None]`): the same answers after the attack.

    Example:
        >>> semantic_utility(["The cat sat on the mat."], ["The cat sat on the mat."])
        [1.0]
        >>> round(semantic_utility(["The cat sat on the mat."], ["A cat was sitting on a mat."])[0], 2)
        0.21
    """
    try:
        from sacrebleu.metrics import CHRF
    except ImportError:
        raise ValueError("the utility score (chrF) needs sacrebleu: pip install 'icw[bench]'") from None
    if len(sources) != len(attacked):
        raise ValueError(f"got {len(sources)} sources and {len(attacked)} attacked texts")
    chrf = CHRF()
    return [None if text is None else chrf.sentence_score(text, [source]).score / 100.0
            for source, text in zip(sources, attacked, strict=True)]
