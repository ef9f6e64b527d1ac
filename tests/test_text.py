import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icw.acrostic import SentenceMoves
from icw.text import START, advance, sentence_initial_spans, sentence_initials
from icw.vocab import vocabulary


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


# ------------------------------------------------ CommonMark paragraphs (issue 11.3)
DOCS = Path(__file__).resolve().parents[1] / "docs" / "sentences.md"


def _conformance_rows() -> list[tuple[str, str, str]]:
    """(case, text, initials) of every row of the conformance table in docs/sentences.md."""
    lines = DOCS.read_text(encoding="utf-8").split("\n")
    start = lines.index("| Case | Text | Initials | Choice |") + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        span = re.fullmatch(r"(`+)(.*?)\1", cells[1])  # a code span; one space each side is padding
        body = span.group(2)
        if body.startswith(" ") and body.endswith(" ") and body.strip():
            body = body[1:-1]
        rows.append((cells[0], body.replace("\\n", "\n"), cells[2]))
    return rows


CONFORMANCE = _conformance_rows()


def test_conformance_table_is_complete():
    cases = {case for case, _, _ in CONFORMANCE}
    assert len(CONFORMANCE) >= 30
    for needed in ("soft wrap", "digit opener", "symbol opener", "closers", "non-ASCII initial", "heading",
                   "list items", "block quote", "table", "fenced code", "HTML line", "blank line"):
        assert needed in cases


@pytest.mark.parametrize(("case", "text", "expected"), CONFORMANCE, ids=[c for c, _, _ in CONFORMANCE])
def test_conformance_table(case, text, expected, gpt2):
    assert sentence_initials(text) == expected
    # ... and the processor, token by token, agrees (processor == extractor on every row)
    view = vocabulary(gpt2)
    ids = gpt2(text, add_special_tokens=False)["input_ids"]
    moves, state, letters = SentenceMoves(view), START, ""
    for token in ids:
        state, found = moves(state, token)
        letters += found
    assert letters == expected


def test_soft_wraps_are_spaces():
    """Re-wrapping a paragraph at any space changes nothing; a blank line anywhere adds a block."""
    text = "The quick brown fox jumps over the lazy dog. Another sentence follows here and there."
    spaces = [i for i, c in enumerate(text) if c == " "]
    for i in spaces:
        wrapped = text[:i] + "\n" + text[i + 1:]
        assert sentence_initials(wrapped) == "TA", wrapped
    assert sentence_initials(text.replace(" the lazy", "\n\nthe lazy")) == "TTA"


# Fragments for the block structure: line starts of every kind, soft wraps and blank lines.
BLOCK_FRAGMENTS = ["\n", "\n\n", "\n  ", "# ", "## ", "#", "####### ", "- ", "-", "* ", "*", "+ ", "1. ", "12) ",
                   "3.5", "> ", ">", "| ", "|", "---", "===", "___", "```", "~~~", "`", "<div>", "<!-- ", " -->",
                   "word", "Word", "x", ". ", "! ", ".", "**", "_", " ", "\t", "é", "\r\n", "2020"]
blocky = st.lists(st.sampled_from(BLOCK_FRAGMENTS), max_size=50).map("".join)
PROPERTY = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(blocky, st.lists(st.integers(min_value=0, max_value=400), max_size=10))
def test_chunked_equals_whole_on_block_structure(text, cuts):
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    state, found = START, []
    for a, b in zip(bounds, bounds[1:], strict=False):
        state, letters = advance(state, text[a:b], offset=a)
        found += letters
    whole_state, whole = advance(START, text)
    assert found == whole and state == whole_state


@pytest.mark.parametrize("name", ["qwen3", "gpt2"])
def test_processor_equals_extractor_on_block_structure(name, request):
    tok = request.getfixturevalue(name)
    moves = SentenceMoves(vocabulary(tok))

    @settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(blocky)
    def check(text):
        state, letters = START, ""
        for token in tok(text, add_special_tokens=False)["input_ids"]:
            state, found = moves(state, token)
            letters += found
        assert letters == sentence_initials(tok.decode(tok(text, add_special_tokens=False)["input_ids"]))

    check()


# Prose with every character the plain-text scan reads, and the line starts that send a text to the automaton.
PROSE_FRAGMENTS = ["Word", "word", "x", " ", "  ", "\t", "\r\n", "\n", "\n\n", "\n \n", ". ", ".", "!", "?", "...",
                   "\"", "'", ")", "]", "*", "_", "(", "2020", "3.5", ",", "é", "\u00a0", "\u2028", "\x0b", "=", "+",
                   "-", "#", "1. ", "e.g.", "U.S. "]
prose = st.lists(st.sampled_from(PROSE_FRAGMENTS), max_size=60).map("".join)


@settings(max_examples=3000, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(prose, st.integers(min_value=1, max_value=40))
def test_plain_prose_scan_equals_the_automaton(text, chunk):
    """Markup-free text is read by one regex scan (the common case); it must find what the automaton finds."""
    expected = advance(START, text)[1]
    assert sentence_initial_spans(text) == expected
    assert sentence_initials(text) == sentence_initials(text, chunk=chunk) == "".join(c for _, c in expected)


def test_plain_prose_scan_on_human_text():
    """gensim's human passages (``benchmarks/_common.py``), most of them markup-free, alone and six at a time."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from _common import human_passages

    from icw.text import _is_plain

    passages = [t for _, t in human_passages()]
    texts = passages + ["\n\n".join(passages[i:i + 6]) for i in range(0, len(passages), 6)]
    assert sum(map(_is_plain, texts)) > len(texts) // 2  # the scan is exercised
    for text in texts:
        expected = advance(START, text)[1]
        assert sentence_initial_spans(text) == expected
        assert sentence_initials(text) == "".join(c for _, c in expected)
