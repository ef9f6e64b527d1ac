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


def _fresh(tokenizer):
    """A view as a new process computes it: the in-memory cache bypassed, the disk cache used."""
    from icw.vocab import _CACHE

    _CACHE.pop(tokenizer, None)
    return vocabulary(tokenizer)


def _same_view(a, b):
    assert (a.name, a.fingerprint, a.surfaces) == (b.name, b.fingerprint, b.surfaces)
    for name in ("is_en", "is_word", "word_letter", "lead_letter", "lead_space"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name


@pytest.mark.parametrize("name", ["qwen3", "gpt2"])
def test_disk_cached_view_equals_the_computed_one(name, request, tmp_path, monkeypatch):
    from icw.vocab import _compute_view

    monkeypatch.setenv("ICW_CACHE", str(tmp_path))
    tok = request.getfixturevalue(name)
    first = _fresh(tok)  # computed and written
    (path,) = (tmp_path / "vocab").glob("*.npz")
    before = path.stat().st_mtime_ns
    second = _fresh(tok)  # read back
    assert path.stat().st_mtime_ns == before and second is not first
    _same_view(second, _compute_view(tok))


def test_disk_cache_is_invalidated_by_a_changed_tokenizer_and_survives_a_bad_file(tmp_path, monkeypatch):
    from icw.models import load_tokenizer

    monkeypatch.setenv("ICW_CACHE", str(tmp_path))
    tok = load_tokenizer.__wrapped__("gpt2")  # a private copy: it is changed below
    plain = _fresh(tok)
    tok.add_tokens(["<marker>"])  # a new (added) token: a different tokenizer, a different cache entry
    grown = _fresh(tok)
    assert grown.size == plain.size + 1 and grown.surfaces[-1] == "<marker>"
    assert len(list((tmp_path / "vocab").glob("*.npz"))) == 2
    for path in (tmp_path / "vocab").glob("*.npz"):  # a truncated file (a crash mid-write elsewhere)
        path.write_bytes(path.read_bytes()[:100])
    _same_view(_fresh(tok), grown)  # recomputed, and rewritten whole
    _same_view(_fresh(tok), grown)
    assert not list((tmp_path / "vocab").glob(".*"))  # no temporary file left behind


def test_disk_cache_under_concurrent_writers(tmp_path):
    """Processes that compute the same view at once all get it, and leave one whole file."""
    import subprocess
    import sys

    code = ("from icw.models import load_tokenizer\nfrom icw.vocab import vocabulary\n"
            "print(vocabulary(load_tokenizer('gpt2')).fingerprint)")
    env = {**__import__("os").environ, "ICW_CACHE": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = {p.communicate(timeout=300)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs) and len(outs) == 1
    assert [p.name for p in (tmp_path / "vocab").iterdir()] == [p.name for p in (tmp_path / "vocab").glob("*.npz")]
    assert len(list((tmp_path / "vocab").glob("*.npz"))) == 1


def test_a_model_folders_tokenizer_keeps_keys_shareable(tmp_path):
    """A checkpoint folder (a model trained here) carries SmolLM2's tokenizer: loaded from the folder it is named
    ``smollm2``, so a key built over it names a tokenizer any detector can load, not a path on this machine; a
    folder whose vocabulary is no embedded tokenizer's keeps its own name."""
    from icw import ICWKey
    from icw.models import load_tokenizer
    from icw.vocab import tokenizer_name

    load_tokenizer("smollm2").save_pretrained(tmp_path / "checkpoint")
    tok = load_tokenizer(str(tmp_path / "checkpoint"))
    key = ICWKey.create("wip", seed=3, tokenizer=tok)
    assert tokenizer_name(tok) == "smollm2" and "tokenizer=smollm2" in key.to_string()
    assert key == ICWKey.create("wip", seed=3, tokenizer=load_tokenizer("smollm2"))
    ICWKey.from_string(key.to_string()).check_tokenizer(load_tokenizer("smollm2"))  # a detector elsewhere
    other = load_tokenizer("smollm2")
    other.add_tokens(["icwnewword"])  # another vocabulary: same size no longer, so no alias
    other.save_pretrained(tmp_path / "other")
    assert tokenizer_name(load_tokenizer(str(tmp_path / "other"))) == str(tmp_path / "other")
