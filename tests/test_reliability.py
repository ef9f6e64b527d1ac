"""Regression tests of issue 12 (reliability), each through the public surface where it was found:
the CLI in a real subprocess, the metrics through ``evaluate.load`` on their folders, the stores
through real ``icw bench`` runs of a tiny random model."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from icw import ICWKey, verify
from icw.jsonl import JSONLError, TornLineWarning, append_jsonl, dumps, iter_jsonl

SEPARATORS = "\u2028\u2029\u0085"
SA_KEY = "icw:sa:seed=3,length=18"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def icw(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The real ``icw`` command in a subprocess (text output)."""
    return subprocess.run([sys.executable, "-m", "icw.cli", *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=timeout)


def icw_main(*args: str) -> subprocess.CompletedProcess:
    """``icw.cli.main`` in this process (same parser and error handling; the CLI's ~10 s import paid once)."""
    from icw.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse
            code = exc.code
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def assert_user_error(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit status 2 and one ``icw: error:`` line (no traceback) containing every fragment."""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("icw: error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


# ------------------------------------------------------------------------------ 1. JSON Lines
def test_jsonl_escapes_line_separators_and_reads_torn_last_line_with_a_warning(tmp_path):
    path = tmp_path / "rows.jsonl"
    rows = [{"text": f"a{sep}b", "i": i} for i, sep in enumerate(SEPARATORS)]
    append_jsonl(path, rows)
    raw = path.read_bytes()
    assert raw.count(b"\n") == 3 and all(sep.encode() not in raw for sep in SEPARATORS)
    assert len(raw.decode().splitlines()) == 3  # even str.splitlines() finds 3 records now
    assert [r for _, r in iter_jsonl(path)] == rows
    with path.open("ab") as fh:
        fh.write(b'{"text": "torn')  # a writer killed mid-line
    with pytest.warns(TornLineWarning, match=r"rows.jsonl:4"):
        assert [r for _, r in iter_jsonl(path)] == rows
    append_jsonl(path, [{"text": "after"}])  # the resumed writer cuts the torn line off first
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r for _, r in iter_jsonl(path)] == [*rows, {"text": "after"}]
    path.write_bytes(path.read_bytes().replace(b'{"text": "after"}', b'{"text": "torn\n{"text": "after"}'))
    with pytest.raises(JSONLError, match=r"rows.jsonl:4: not valid JSON"):
        list(iter_jsonl(path))  # a malformed line before the last: an error naming file and line
    path.write_bytes(b'{"complete": true}')
    append_jsonl(path, [{"next": 1}])  # a valid record that only lacked its newline is kept
    assert [r for _, r in iter_jsonl(path)] == [{"complete": True}, {"next": 1}]
    assert dumps("\ud800") == '"\\ud800"'  # a lone surrogate is escaped, not a UTF-8 encoding error


def _tiny_model_folder(tiny_qwen, folder: Path) -> Path:
    model, tok = tiny_qwen
    if not (folder / "config.json").exists():
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
    return folder


def test_line_separators_survive_build_run_kill_resume_and_report(tmp_path, tiny_qwen):
    """Questions with U+2028/U+2029/U+0085 go through `icw bench build` (question file), a real
    `icw bench run` killed with SIGKILL and resumed (the store), and `icw bench report`: every
    record is kept, none regenerated, none dropped."""
    questions = tmp_path / "questions.jsonl"
    qs = [f"Why{sep}is the sky blue, part {i}?" for i, sep in enumerate(SEPARATORS * 2)]
    questions.write_text("".join(json.dumps({"question": q}, ensure_ascii=False) + "\n" for q in qs),
                         encoding="utf-8")
    bench = tmp_path / "bench"
    got = icw_main("bench", "build", "--out", bench, "--questions", questions, "--num-test", 6, "--num-train", 0,
              "--families", "sa")
    assert got.returncode == 0, got.stderr[-2000:]
    model = _tiny_model_folder(tiny_qwen, tmp_path / "tiny")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "icw.cli", "bench", "run", "--dataset", str(bench), "--out", str(out), "--model",
           str(model), "--families", "sa", "--max-new-tokens", "16", "--batch-size", "1"]
    store = out / "responses.jsonl"
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 180
    while time.time() < deadline and (not store.exists() or store.read_bytes().count(b"\n") < 4):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    before = {(r["id"], r["role"]): r for _, r in iter_jsonl(store, on_torn=None)}
    assert 4 <= len(before) < 12, "the kill should land mid-run"
    assert {r["query"] for r in before.values()} <= set(qs)  # the raw separators are inside the records
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [r for _, r in iter_jsonl(store, on_torn=None)]
    assert len(records) == 12 == len({(r["id"], r["role"]) for r in records})  # 6 queries x 2 roles, once each
    assert all(records[i] == r for i, r in enumerate(before.values()))  # finished records kept as written
    assert {r["query"] for r in records} == set(qs)
    rep = icw_main("bench", "report", out, "--no-figures", "--num-bootstrap", 20)
    assert rep.returncode == 0, rep.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert results["families"]["sa"]["num_positive"] == 6 == results["families"]["sa"]["num_negative"]


class _GrowsAfterTornRead(io.BufferedReader):
    """A file reader that lets another writer finish its line right after reading it torn."""

    def readline(self, size: int = -1) -> bytes:
        line = super().readline(size)
        if line and not line.endswith(b"\n"):
            with open(self.name, "ab") as fh:  # the concurrent appender completes its record now
                fh.write(b'tail"}\n{"text": "next"}\n')
        return line


def test_a_torn_last_line_is_skipped_even_when_the_writer_finishes_it_during_the_read(tmp_path):
    path = tmp_path / "rows.jsonl"
    append_jsonl(path, [{"text": "first"}])
    with path.open("ab") as fh:
        fh.write(b'{"text": "half')  # a writer mid-line, as another process's reader sees it
    with _GrowsAfterTornRead(io.FileIO(path, "rb")) as fh:
        seen = []
        assert [r for _, r in iter_jsonl(fh, on_torn=lambda name, number: seen.append(number))] == [{"text": "first"}]
    assert seen == [2]
    assert [r for _, r in iter_jsonl(path)] == [{"text": "first"}, {"text": "halftail"}, {"text": "next"}]


def test_detect_jsonl_splits_only_on_newline_and_skips_a_torn_last_line(tmp_path):
    texts = [f"Alpha beta.{sep}Gamma delta. Epsilon." for sep in SEPARATORS]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts) + '{"text": "to',
                    encoding="utf-8")
    got = icw("detect", "--jsonl", "--key", SA_KEY, path)
    assert got.returncode == 0, got.stderr
    rows = [json.loads(line) for line in got.stdout.splitlines()]
    assert [r["source"] for r in rows] == [f"{path}:{i}" for i in (1, 2, 3)]
    assert f"{path}:4: skipped an incomplete last line" in got.stderr
    expected = [r.z_score for r in verify(texts, SA_KEY)]
    assert [r["z_score"] for r in rows] == expected
    path.write_text('{"text": "a"}\n{"text": \n{"text": "b"}\n', encoding="utf-8")
    assert_user_error(icw_main("detect", "--jsonl", "--key", SA_KEY, path), f"{path}:2: not valid JSON")


def test_synthesis_resumes_after_a_torn_last_line(tiny_qwen, tmp_path):
    from icw.train.synthesis import SynthesisConfig, synthesize

    model, tok = tiny_qwen
    config = SynthesisConfig(output_dir=str(tmp_path), families=["sa"], num_h1=[2], num_h0=[1], max_new_tokens=4,
                             batch_size=1, perplexity=False)
    queries = [f"Question{sep} number {i}?" for i, sep in enumerate(SEPARATORS)]
    synthesize(config, model, tok, queries)
    log = tmp_path / "rows.jsonl"
    lines = log.read_bytes().split(b"\n")[:3]
    log.write_bytes(lines[0] + b"\n" + lines[1][: len(lines[1]) // 2])  # killed while writing row 2
    dataset = synthesize(config, model, tok, queries)
    assert len(dataset) == 3
    assert log.read_bytes().startswith(lines[0] + b"\n")
    assert sorted(dataset["id"]) == sorted(json.loads(line)["id"] for line in lines)


# ------------------------------------------------------------------------------- 2. metrics
def test_metrics_refuse_inputs_evaluate_would_silently_reshape():
    import evaluate

    from icw.evaluate_metrics import metric_path

    sa = evaluate.load(metric_path("icw_sa"))
    text = "A bare string of 29 letters."
    with pytest.raises(TypeError, match=r"got one str .*pass predictions=\[text\]"):
        sa.compute(predictions=text, keys=SA_KEY)
    assert sa.compute(predictions=[text], keys=SA_KEY)["num_texts"] == 1
    detection = evaluate.load(metric_path("icw_detection"))
    with pytest.raises(ValueError, match="reference 0 must be 0 .* or 1 .*got 1.9"):
        detection.compute(predictions=[3.0, 0.1, 2.0, 0.2], references=[1.9, 0, 1, 0])
    with pytest.raises(ValueError, match="prediction 0 must be a finite number"):
        detection.compute(predictions=["3.0", 0.1], references=[1, 0])
    with pytest.raises(ValueError, match="reference 0 must be 0 .*got 0.5"):
        detection.add(prediction=0.5, reference=0.5)
    got = detection.compute(predictions=[3.0, 0.1, 2.0, 0.2], references=[1.0, 0, 1, 0], num_bootstrap=10)
    assert got["roc_auc"] == 1.0 and got["num_positive"] == 2


# ------------------------------------------------------------------ 5. one-line errors
@pytest.fixture(scope="module")
def wordpiece(tmp_path_factory) -> Path:
    """A tiny BERT-style WordPiece tokenizer folder, built offline with ``tokenizers``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["[UNK]", "[CLS]", "[SEP]", "the", "sky", "is", "blue", "##s", "."])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()
    folder = tmp_path_factory.mktemp("wordpiece")
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(folder)
    return folder


def test_wordpiece_tokenizer_is_a_one_line_error(wordpiece, tmp_path):
    supported = "icw supports byte-level BPE tokenizers"
    assert_user_error(icw("vocab", "--tokenizer", wordpiece), "WordPiece decoder", supported)
    assert_user_error(icw_main("key", "new", "--family", "wip", "--seed", 1, "--tokenizer", wordpiece), supported)
    key = ICWKey.create("wip", 1, "gpt2")  # a tokenizer name works wherever a tokenizer does
    text = tmp_path / "t.txt"
    text.write_text("The sky is blue.")
    assert_user_error(icw_main("detect", "--key", key, "--tokenizer", wordpiece, text), supported)


def test_bench_report_bad_records_and_options(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    store = run / "responses.jsonl"
    good = {"model": "m", "family": "sa", "id": "q0", "role": "positive", "z_score": 1.0}
    cases = {
        "[1, 2]": "responses.jsonl:2: expected a JSON object, got list",
        '"text"': "responses.jsonl:2: expected a JSON object, got str",
        '{"family": "sa", "id": "q1", "role": "negative"}': "responses.jsonl:2: expected a string field 'model'",
        '{"model": "m", "family": "sa", "id": "q1"}': "responses.jsonl:2: expected a string field 'role'",
        '{"model": "m", "family": "sa", "id": "q1", "role": "negative", "z_score": "high"}': "'z_score' must be",
        "[" * 100_000 + "]" * 100_000: "responses.jsonl:2: JSON nested too deeply",
        "{not json}": "responses.jsonl:2: not valid JSON",
    }
    for line, message in cases.items():
        store.write_text(json.dumps(good) + "\n" + line + "\n" + json.dumps(good) + "\n")
        assert_user_error(icw_main("bench", "report", run, "--no-figures"), message)
    neg = {**good, "role": "negative", "z_score": 0.0}
    store.write_text(json.dumps(good) + "\n" + json.dumps(neg) + "\n")
    assert_user_error(icw_main("bench", "report", run, "--no-figures", "--num-bootstrap", 0), "--num-bootstrap", ">= 1")
    (run / "run.json").write_text("{oops")
    assert_user_error(icw_main("bench", "report", run, "--no-figures"), "run.json: not valid JSON")


def test_malformed_results_json_for_model_card(tmp_path):
    results = tmp_path / "results.json"
    for content, message in (("{oops", "not valid JSON"), ("[]", "object"), ('{"model": "m", "families": []}',
                                                                              "families")):
        results.write_text(content)
        assert_user_error(icw_main("hub", "model-card", results, "--out", tmp_path / "card"), message)


def test_tokenizer_names_are_accepted_everywhere(qwen3):
    key = ICWKey.create("tsp", 4, "qwen3", pool_size=500)
    assert key == ICWKey.create("tsp", 4, qwen3, pool_size=500)
    text = "The quick brown fox jumps over the lazy dog near the river bank."
    assert verify(text, key, tokenizer="qwen3").to_dict() == verify(text, key, qwen3).to_dict()


# --------------------------------------------------------------------- 6. bounded input
def test_detect_reads_an_endless_input_with_a_bound():
    assert_user_error(icw("detect", "--key", SA_KEY, "/dev/zero", timeout=60), "/dev/zero has more than 100,000")
    assert_user_error(icw_main("detect", "--jsonl", "--key", SA_KEY, "--max-chars", 1000, "/dev/zero"),
                      "/dev/zero:1: line longer than")
    with open("/dev/zero", "rb") as zero:
        got = subprocess.run([sys.executable, "-m", "icw.cli", "detect", "--key", SA_KEY, "--max-chars", "50"],
                             stdin=zero, capture_output=True, text=True, env=ENV, timeout=60)
    assert_user_error(got, "standard input has more than 50 characters")


# ------------------------------------------------------------- 7. validate, then write
def _bench_folder(tmp_path: Path, name: str, key: str) -> Path:
    import datasets

    folder = tmp_path / name
    (folder / "sa").mkdir(parents=True)
    rows = [{"id": "sa-test-00000", "family": "sa", "seed": 0, "key": key, "instruction": "x", "query": "Why?",
             "query_source": "t:0"}]
    datasets.Dataset.from_list(rows).to_parquet(str(folder / "sa" / "test-00000-of-00001.parquet"))
    (folder / "README.md").write_text("---\nconfigs:\n- config_name: sa\n  data_files:\n  - split: test\n"
                                      "    path: sa/test-*\n---\n")
    return folder


def test_bench_run_and_build_validate_before_writing(tmp_path, tiny_qwen):
    model = _tiny_model_folder(tiny_qwen, tmp_path / "tiny")
    bad = _bench_folder(tmp_path, "bad", "icw:sa:seed=1,length=18.5")
    out = tmp_path / "run1"
    assert_user_error(icw_main("bench", "run", "--dataset", bad, "--out", out, "--model", model, "--families", "sa"),
                      "row 0 (id 'sa-test-00000')", "length")
    assert not out.exists()
    good = _bench_folder(tmp_path, "good", SA_KEY)
    out = tmp_path / "run2"
    out.mkdir()
    (out / "responses.jsonl").write_text('{"model": "m"}\n{"model": "m", "family": "sa", "role": "positive"}\n')
    assert_user_error(icw_main("bench", "run", "--dataset", good, "--out", out, "--model", model, "--families", "sa"),
                      "responses.jsonl:1: expected a string field 'family'")
    assert sorted(p.name for p in out.iterdir()) == ["responses.jsonl"]  # no run.json
    built = tmp_path / "built"
    assert_user_error(icw_main("bench", "build", "--out", built, "--gamma", 2, "--families", "tsp"), "gamma")
    assert not built.exists()
    assert_user_error(icw_main("bench", "build", "--out", built, "--pool-size", 10**9, "--families", "tsp"), "pool_size")
    assert not built.exists()


# ------------------------------------------------------------------------- 8. odd keys
@pytest.mark.parametrize(("key", "field"), [
    ("icw:sa:seed=1,seed=2", "seed is given twice"),
    ('{"family": "sa", "seed": 1, "seed": 2}', "seed is given twice"),
    ('{"family": "sa", "secret": "stra\u00dfe"}', "secret must be ASCII letters"),
    ("icw:sa:secret=stra%C3%9Fe", "secret must be ASCII letters"),
    ('{"family": "sa", "seed": 1, "length": 1e400}', "length must be a whole number"),
    ('{"family": "sa", "seed": 1, "length": 18.5}', "length must be a whole number"),
    ('{"family": "tsp", "seed": 1, "pool_size": 1000000000000, "tokenizer": "qwen3", "vocab": "x"}', "pool_size"),
    ('{"family": "tsp", "seed": 1, "pool_size": 100.5, "tokenizer": "qwen3", "vocab": "x"}', "pool_size must be a whole"),
    ('{"family": "sa", "seed": ' + "[" * 50_000, "not valid JSON|nested too deeply"),
])
def test_odd_keys_are_refused_naming_the_field(key, field, tmp_path):
    import re

    text = tmp_path / "t.txt"
    text.write_text("Some text. More text.")
    line = assert_user_error(icw_main("detect", "--key", key, text))
    assert re.search(field, line), line


def test_tsp_pool_larger_than_v_en_is_refused(qwen3):
    with pytest.raises(ValueError, match=r"pool_size=1,000,000 exceeds the 88,492 English tokens"):
        ICWKey.create("tsp", 1, qwen3, pool_size=1_000_000)


def test_more_keys_than_prompts_under_num_return_sequences(tiny_qwen):
    from icw.processors import SentenceAcrosticLogitsProcessor, WordInitialPreferenceLogitsProcessor

    model, tok = tiny_qwen
    tok.padding_side = "left"
    enc = tok(["Tell me about cats", "Why is the sky blue? Explain"], return_tensors="pt", padding=True)
    for make, family in ((WordInitialPreferenceLogitsProcessor, "wip"), (SentenceAcrosticLogitsProcessor, "sa")):
        def generate(n: int, make=make, family=family) -> None:
            keys = [ICWKey.create(family, i, tok if family == "wip" else None) for i in range(n)]
            model.generate(**enc, logits_processor=[make(keys, tok)], max_new_tokens=2, do_sample=True,
                           num_return_sequences=3, pad_token_id=tok.pad_token_id)

        with pytest.raises(ValueError, match="got 3 keys for a batch of 6 rows: key 1 would cover rows of different"):
            generate(3)
        generate(2)  # one per prompt
        generate(6)  # one per row


# ------------------------------------------------------------ 9. several processes, one store
WRITER = """
import sys
from icw.bench.runner import ResultStore
store = ResultStore(sys.argv[1])
for i in range(int(sys.argv[3])):
    store.append([{"model": "m", "family": "sa", "id": f"{sys.argv[2]}-{i}", "role": role, "attack": "none",
                   "text": "Some text. " * 500 + "\\u2028" + str(i), "z_score": float(i)} for role in ("positive", "negative")])
"""


def test_two_processes_append_to_one_store_while_detect_reads_it(tmp_path):
    store = tmp_path / "run" / "responses.jsonl"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(store), name, "150"], env=ENV)
               for name in ("a", "b")]
    reads = 0
    while any(w.poll() is None for w in writers):
        if store.exists():  # a reader never fails on a record being written
            got = icw("detect", "--jsonl", "--key", SA_KEY, store, timeout=120)
            assert got.returncode in (0, 2), got.stderr
            if got.returncode == 2:
                assert_user_error(got, "no texts given")  # only before the first line lands
            reads += 1
    assert all(w.wait() == 0 for w in writers) and reads >= 1
    records = [r for _, r in iter_jsonl(store, on_torn=None)]
    assert len(records) == 600 == len({(r["id"], r["role"]) for r in records})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no torn line anywhere
        list(iter_jsonl(store))
    rep = icw_main("bench", "report", store.parent, "--no-figures", "--num-bootstrap", 10)
    assert rep.returncode == 0, rep.stderr
    assert json.loads((store.parent / "results.json").read_text())["families"]["sa"]["num_positive"] == 300
