import pytest

from icw.text import START, advance, sentence_initial_spans, sentence_initials


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello world. This is fine! Is it? yes.", "HTIY"),
        ("one.two three", "O"),  # no whitespace after the period: not a sentence end
        ("He said \"stop.\" Then left. (Really.) Done", "HTRD"),  # closing quotes/brackets
        ("**Bold.** Next one", "BN"),
        ("# Title\n## Sub title\nBody text here.", "TSB"),
        ("- first item\n- second item\n1. numbered\n> quoted text", "FSNQ"),
        ("Intro.\n```python\nx = 1. y = 2\n```\nAfter code.", "IA"),
        ("Use `print(x). Then` carefully. Ok", "UO"),
        ("A <b>bold</b> move. <br>Next", "AN"),
        ("a < b. Clearly", "AC"),
        ("2020 was a year. 3 cats ran.", "WC"),  # the first ASCII letter, skipping digits
        ("Élan vital. Über alles. ok", "LBO"),  # non-ASCII letters are skipped
        ("", ""),
        ("   \n\n  ", ""),
        ("... and then? nothing", "AN"),
    ],
)
def test_extractor(text, expected):
    assert sentence_initials(text) == expected


def test_spans_point_at_the_letters():
    text = "First one. second one!\n- third"
    spans = sentence_initial_spans(text)
    assert [text[i].upper() for i, _ in spans] == [c for _, c in spans] == list("FST")


def test_streaming_equals_whole_text():
    text = "Intro line.\n```\ncode. Here\n```\nThen <i>x</i> ok. `a. B` Next! done"
    for cut in range(len(text) + 1):
        state, first = advance(START, text[:cut])
        _, second = advance(state, text[cut:], cut)
        assert "".join(c for _, c in first + second) == sentence_initials(text)
