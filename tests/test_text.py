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
        ("Intro.\n~~~\nNot. This\n~~~\nAfter.", "IA"),  # tilde fences
        ("~~~\n```\nNot.\n~~~\nYes", "Y"),  # a fence closes only with its own character
        ("```\n~~~\nNot.\n```\nYes", "Y"),
        ("~~strike~~ text. ~ok", "SO"),  # fewer than three tildes are text
        ("<!-- a > b. Zed. --> Real text.", "R"),  # comments end at "-->", not ">"
        ("Text <!-- multi\nline. Zed --> continues. Here", "TH"),  # ... and may span lines
        ("<!-->Yes. <!--->Too", "YT"),  # empty comments
        ("A. <script>var x = 1; Bad. Worse</script> Next.", "AN"),
        ("<STYLE type=x>\np {} Qq.\n</Style >\nLast", "L"),  # any case, across lines
        ("<script>a</scriptx> No. </script>Yes", "Y"),  # only the exact end tag closes
        ("A <scripts>Bee. Cee", "AC"),  # not a script element: an ordinary tag
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


@pytest.mark.parametrize(
    "text",
    [
        "Intro.\n~~~\nNot. This\n~~~\nAfter. ~~ x\n  ~~~py\n``` No.\n ~~~ \nYes",
        "<!-- a > b. Zed. --> Real text. <!--> Ok <!--- x --->\n<!-- y\n-- z -->End.",
        "Go. <script src=x>\nif (a < b) { Bad. }</scr </script\n>\n<style>Pp.</STYLE> Last <stylex>q",
    ],
)
def test_streaming_equals_whole_text_for_raw_html_and_tilde_fences(text):
    whole_state, whole = advance(START, text)
    for cut in range(len(text) + 1):
        state, first = advance(START, text[:cut])
        end_state, second = advance(state, text[cut:], cut)
        assert first + second == whole
        assert end_state == whole_state
