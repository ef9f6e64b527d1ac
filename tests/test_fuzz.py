"""Property-based tests (hypothesis) of the sentence extractor, the SA processor's automaton and
the verifiers, on arbitrary unicode and on markdown-heavy fragments."""

from __future__ import annotations

import math
import string

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icw import ICWKey, verify
from icw.processors import SentenceAcrosticLogitsProcessor
from icw.text import START, advance, sentence_initial_spans, sentence_initials
from icw.verification import TextTooLongError
from icw.vocab import NON_ASCII, vocabulary

FUZZ = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# Fragments that drive the automaton through its states: fences (backtick and tilde), inline
# code, tags, comments, script/style elements, terminals with closers, line starts with markup,
# non-ASCII letters and spaces.
FRAGMENTS = ["```", "`", "``", "~~~", "~", "\n", " ", "\t", ". ", "! ", "? ", ".\" ", ")* ", "<", ">", "</b>", "<!--",
             "<!-- ", "-", "--", "-->", "<script>", "</script>", "<SCRIPT ", "<style>", "</Style", "<sc", "ript", "# ",
             "- ", "1. ", "> ", "**", "_", "Hello", "world", "x", "Q", "é", "Ünïcode", "\u00a0", "\u2028", "日本", "😀",
             "\x80", "\r\n", "<3 ", "a.b", "...", "?!"]
markdownish = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)
texts = st.one_of(st.text(max_size=300), markdownish, st.text(alphabet=string.printable, max_size=200))


def _ascii_view(text: str, per_byte: bool) -> str:
    """What the processor sees: every non-ASCII character (or each of its UTF-8 bytes) as NON_ASCII."""
    return "".join(c if ord(c) < 128 else NON_ASCII * (len(c.encode("utf-8", "surrogatepass")) if per_byte else 1)
                   for c in text)


# -------------------------------------------------------------------- extractor
@FUZZ
@given(texts)
def test_extractor_never_raises_and_yields_uppercase_ascii(text):
    spans = sentence_initial_spans(text)
    letters = sentence_initials(text)
    assert set(letters) <= set(string.ascii_uppercase)
    assert letters == "".join(c for _, c in spans)
    for pos, letter in spans:
        assert text[pos].upper() == letter


@FUZZ
@given(texts, st.lists(st.integers(min_value=0, max_value=300), max_size=12))
def test_chunked_advance_equals_whole_text(text, cuts):
    """The processor's invariant: feeding any chunking, state carried over, gives Phi(text)."""
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    state, found = START, []
    for a, b in zip(bounds, bounds[1:], strict=False):
        state, letters = advance(state, text[a:b], offset=a)
        found += letters
    whole_state, whole = advance(START, text)
    assert found == whole == sentence_initial_spans(text)
    assert state == whole_state


@FUZZ
@given(texts)
def test_non_ascii_as_0x80_changes_nothing(text):
    expected = sentence_initials(text)
    assert sentence_initials(_ascii_view(text, per_byte=False)) == expected
    assert sentence_initials(_ascii_view(text, per_byte=True)) == expected  # byte-level BPE surfaces


@pytest.mark.parametrize("name", ["qwen3", "gpt2"])
def test_sa_processor_tracks_sentence_initials_of_fuzzed_text(name, request):
    """Drive the real processor token by token over fuzzed texts: its tracked letters must be
    ``sentence_initials`` of the decoded continuation."""
    tok = request.getfixturevalue(name)
    view = vocabulary(tok)
    key = ICWKey.create("sa", seed=5)

    @FEW
    @given(texts)
    def check(text):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        proc = SentenceAcrosticLogitsProcessor(key, tok)
        prompt = [tok.eos_token_id]
        scores = torch.zeros(1, view.size)
        for step in range(len(ids) + 1):
            proc(torch.tensor([prompt + ids[:step]]), scores)
        proc.finish(torch.tensor([prompt + ids]))
        decoded = "".join(view.surfaces[i] for i in ids)
        assert proc.tracked_letters[0] == sentence_initials(decoded)
        assert sentence_initials(decoded) == sentence_initials(tok.decode(ids, skip_special_tokens=True))

    check()


# --------------------------------------------------------------------- verifiers
@pytest.fixture(scope="module")
def keyed(qwen3, gpt2):
    out = []
    for tok in (qwen3, gpt2):
        out += [(ICWKey.create(f, seed=9, tokenizer=tok if f != "sa" else None), tok) for f in ("tsp", "wip", "sa")]
    return out


def _check_result(r, family):
    assert r.family == family
    assert math.isfinite(r.z_score)
    assert 0.0 < r.p_value <= 1.0
    assert 0 <= r.num_aligned <= r.num_tokens_scored
    assert r.is_watermarked == (r.p_value <= r.alpha)


@FUZZ
@given(texts)
def test_verifiers_on_arbitrary_text(keyed, text):
    max_chars = 250
    for key, tok in keyed:
        if len(text) > max_chars:
            with pytest.raises(TextTooLongError):
                verify(text, key, tok, max_chars=max_chars)
            continue
        r = verify(text, key, tok, max_chars=max_chars, highlights=True)
        _check_result(r, key.family)
        again = verify([text, text], key, tok, max_chars=max_chars, highlights=True)
        assert again[0].to_dict() == again[1].to_dict() == r.to_dict()  # deterministic
        for h in r.highlights:
            assert 0 <= h.start < h.end <= len(text)


@pytest.mark.parametrize("family", ["tsp", "wip", "sa"])
def test_bytes_input_is_a_type_error(keyed, family):
    key, tok = next((k, t) for k, t in keyed if k.family == family)
    with pytest.raises(TypeError, match="bytes"):
        verify(b"Hello world. This is bytes.", key, tok)
    with pytest.raises(TypeError, match="bytes"):
        verify(["fine text", b"not fine"], key, tok)
