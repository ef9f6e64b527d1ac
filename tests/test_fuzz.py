"""Property-based tests (hypothesis) of the sentence extractor, the SA processor's automaton and
the verifiers, on arbitrary unicode and on markdown-heavy fragments."""

from __future__ import annotations

import contextlib
import io
import json
import math
import string
import subprocess
import sys

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


# ------------------------------------------------------------------------ the CLI (issue 12)
# The only outcomes allowed for any input: a result (exit 0), or exit 2 with one `icw: error:` line
# (argparse's own errors read `icw <command>: error:`). A traceback fails the test.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
KEY_FIELDS = ["family", "seed", "gamma", "pool_size", "num_letters", "length", "letters", "secret", "tokenizer", "vocab"]
key_dicts = st.dictionaries(st.sampled_from(KEY_FIELDS), st.sampled_from(["sa", "wip", "tsp", "gpt2"]) | json_values,
                            max_size=6)
key_strings = st.one_of(
    key_dicts.map(json.dumps),
    key_dicts.map(lambda d: "icw:" + str(d.get("family", "sa")) + ":" +
                  ",".join(f"{k}={v}" for k, v in d.items() if k != "family")),
    st.text(max_size=40),
    st.sampled_from(["icw:sa:seed=3,length=18", "icw:sa:secret=HELLO", "icw:sa:seed=1,seed=2", "{" * 3000]),
)
JSONL_FRAGMENTS = [b'{"text": "', b'"}', b"\n", b"\r\n", "\u2028".encode(), "\u0085".encode(), b"Hello. World! ",
                   b"\xff", b"\x00", b"[", b"]", b"{", b"}", b'"', b"\\", b"\\u2028", b"1e400", b"NaN", b"\xef\xbb\xbf"]
input_bytes = st.one_of(st.binary(max_size=300), st.lists(st.sampled_from(JSONL_FRAGMENTS), max_size=30).map(b"".join),
                        st.lists(json_values.map(lambda v: json.dumps(v).encode()), max_size=5).map(b"\n".join))


def _cli(*argv: str) -> tuple[int, str, str]:
    from icw.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse rejects the arguments themselves
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def _assert_result_or_error(code: int, out: str, err: str) -> None:
    if code == 0:
        return
    errors = [line for line in err.splitlines() if line.startswith("icw") and ": error:" in line]
    assert code == 2 and len(errors) == 1, (code, err[-2000:])


@pytest.fixture(scope="module")
def cli_tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("cli-fuzz")


@FEW
@given(data=input_bytes, jsonl=st.booleans(), key=st.one_of(st.just("icw:sa:seed=3,length=18"), key_strings),
       max_chars=st.sampled_from(["5", "200", "100000"]))
def test_cli_detect_on_arbitrary_bytes_and_keys(cli_tmp, data, jsonl, key, max_chars):
    path = cli_tmp / "input.txt"
    path.write_bytes(data)
    code, out, err = _cli("detect", *(["--jsonl"] if jsonl else []), "--max-chars", max_chars, "--key", key, str(path))
    _assert_result_or_error(code, out, err)
    if code == 0:
        rows = [json.loads(line) for line in out.splitlines()]
        assert rows and all(0.0 < r["p_value"] <= 1.0 and "statistic" in r for r in rows)


@FEW
@given(family=st.sampled_from(["sa", "wip", "tsp", "xyz"]), seed=st.integers(-5, 2**70),
       gamma=st.none() | st.sampled_from(["0.2", "2", "0", "nan", "-inf", "1e400", "0.5x"]),
       pool_size=st.none() | st.sampled_from(["5", "100", "10", "1000000000000", "1.5", "-3"]),
       length=st.none() | st.sampled_from(["0", "1", "13", "18", "26", "64", "1e400", "-1"]),
       tokenizer=st.sampled_from(["gpt2", "qwen3", "", "no/such-tokenizer", "."]), instruction=st.booleans())
def test_cli_key_new_on_arbitrary_parameters(family, seed, gamma, pool_size, length, tokenizer, instruction):
    argv = ["key", "new", "--family", family, "--seed", str(seed), "--tokenizer", tokenizer]
    for flag, value in (("--gamma", gamma), ("--pool-size", pool_size), ("--length", length)):
        if value is not None:
            argv += [flag, value]
    code, out, err = _cli(*argv, *(["--instruction"] if instruction else []))
    _assert_result_or_error(code, out, err)
    if code == 0 and not instruction:
        assert ICWKey.from_string(out.strip()).family == family


@FEW
@given(lines=st.lists(st.one_of(json_values.map(json.dumps), st.text(max_size=30),
                                st.fixed_dictionaries({"model": st.sampled_from(["m", 1]),
                                                       "family": st.sampled_from(["sa", "wip", "zz"]),
                                                       "id": st.sampled_from(["q0", "q1", 2, None, [1]]),
                                                       "role": st.sampled_from(["positive", "negative", 0]),
                                                       "z_score": st.none() | st.floats() | st.text(max_size=3)},
                                                      optional={"attack": json_values}).map(json.dumps)),
                      max_size=8),
       run_json=st.none() | json_values.map(json.dumps) | st.text(max_size=20), bootstrap=st.sampled_from(["0", "5"]))
def test_cli_bench_report_on_arbitrary_records(cli_tmp, lines, run_json, bootstrap):
    run = cli_tmp / "run"
    run.mkdir(exist_ok=True)
    (run / "responses.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    (run / "run.json").unlink(missing_ok=True)
    if run_json is not None:
        (run / "run.json").write_text(run_json, encoding="utf-8", errors="surrogatepass")
    _assert_result_or_error(*_cli("bench", "report", str(run), "--no-figures", "--num-bootstrap", bootstrap))


def test_cli_fuzz_cases_in_a_real_subprocess(tmp_path):
    """A few of the fuzzed shapes through the real `icw` executable: same outcomes out of process."""
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"text": "ok."}\n\xff\xfe\n')
    cases = [(["detect", "--jsonl", "--key", "icw:sa:seed=3", str(bad)], "not UTF-8"),
             (["key", "new", "--family", "sa", "--seed", "1", "--length", "64"], "length"),
             (["bench", "report", str(tmp_path)], "has no responses.jsonl")]
    for argv, fragment in cases:
        got = subprocess.run([sys.executable, "-m", "icw.cli", *argv], capture_output=True, text=True, timeout=300)
        errors = [line for line in got.stderr.splitlines() if line.startswith("icw: error:")]
        assert got.returncode == 2 and len(errors) == 1 and fragment in errors[0], got.stderr[-2000:]
