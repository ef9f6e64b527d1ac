import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from icw import ICWKey, verify, vocabulary
from icw.vocab import ALPHABET


def test_qwen3_conformance_with_the_paper(qwen3):
    view = vocabulary(qwen3)
    assert len(view.v_en) == 88_492
    assert len(view.v_en_word) == 41_547
    assert view.size == len(qwen3) == 151_669


@pytest.mark.parametrize("name", ["qwen3", "gpt2"])
def test_definitions_hold_token_by_token(name, request):
    tok = request.getfixturevalue(name)
    view = vocabulary(tok)
    special = set(tok.all_special_ids) | set(tok.added_tokens_decoder)
    for i in view.v_en[:: max(1, len(view.v_en) // 3000)]:
        text = tok.convert_tokens_to_string([tok.convert_ids_to_tokens(int(i))])
        assert i not in special
        assert view.surfaces[i].isascii() and any(c.isalpha() for c in view.surfaces[i])
        assert text.strip() and text.isascii()
    for i in view.v_en_word[:: max(1, len(view.v_en_word) // 3000)]:
        s = view.surfaces[i]
        assert s[0] == " " and s[1].isalpha() and ALPHABET[view.word_letter[i]] == s[1].upper()
    # tokens outside V_en: non-ASCII bytes or no letter at all
    outside = np.flatnonzero(~view.is_en)
    for i in outside[:: max(1, len(outside) // 2000)]:
        s = view.surfaces[i]
        assert i in special or not s.isascii() or "\x80" in s or not any(c.isalpha() for c in s)
    assert abs(view.letter_fractions.sum() - 1) < 1e-12


def test_views_are_cached_and_fingerprinted(qwen3, gpt2):
    assert vocabulary(qwen3) is vocabulary(qwen3)
    assert vocabulary(qwen3).fingerprint != vocabulary(gpt2).fingerprint
    assert vocabulary(gpt2).name == "gpt2"


@pytest.fixture(scope="module")
def sentencepiece_style():
    """A real SentencePiece-style (Metaspace, U+2581 word marks) tokenizer trained here on a small corpus."""
    corpus = ["The quick brown fox jumps over the lazy dog.", "Many people enjoy reading books in the evening.",
              "Rain falls when water vapour condenses into droplets.", "Bicycles stay upright because of steering."] * 20
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    backend.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "</s>"]))
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="</s>")


def test_sentencepiece_style_word_starts(sentencepiece_style):
    tok = sentencepiece_style
    view = vocabulary(tok)
    assert len(view.v_en_word) > 0
    for i in view.v_en_word:
        assert tok.convert_ids_to_tokens(int(i)).startswith("\u2581")
    ids = tok("The quick brown fox")["input_ids"]
    words = [i for i in ids if view.is_word[i]]
    assert len(words) == 4  # every word of the sentence starts with a marked token
    key = ICWKey.create("wip", seed=3, tokenizer=tok)
    result = verify("The quick brown fox jumps over the lazy dog.", key, tok)
    assert result.num_tokens_scored == len({i for i in tok("The quick brown fox jumps over the lazy dog.")["input_ids"] if view.is_word[i]})
