"""icw as datatrove pipeline steps (icw.integrations.datatrove): real LocalPipelineExecutor runs over jsonl and
parquet shards with 2 tasks, a killed run resumed, and bad input."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datatrove.data import Document
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader, ParquetReader
from datatrove.pipeline.writers import JsonlWriter, ParquetWriter

from icw import ICWKey, verify, verify_keys
from icw.integrations.datatrove import ICWDetector, ICWFilter
from icw.keys import ICWKeyError

ROOT = Path(__file__).resolve().parents[1]
MAX_CHARS = 20_000
SHARDS = 4


def human_texts() -> list[str]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _common import human_passages

    return [t for _, t in human_passages()]


def green_words(text: str, key: ICWKey) -> str:
    """A WIP-watermarked text made of human words: those starting with one of the key's letters."""
    return " ".join(w for w in text.split() if w[0].upper() in key.green_letters)


def secret_sentences(sentences: dict[str, list[str]], key: ICWKey, offset: int) -> str:
    """An SA-watermarked text made of human sentences whose initials spell the key's secret."""
    return " ".join(sentences[c][(offset + j) % len(sentences[c])] for j, c in enumerate(key.secret_string))


@pytest.fixture(scope="module")
def corpus(gpt2):
    """~330 documents: human passages (gensim's Lee corpus), human words and sentences rearranged to carry a
    WIP and an SA key, a blank text, a text without any (datatrove's readers skip it) and one over MAX_CHARS."""
    wip, sa = ICWKey.create("wip", seed=11, tokenizer=gpt2), ICWKey.create("sa", seed=12)
    human = human_texts()
    sentences: dict[str, list[str]] = {}
    for text in human[:350]:
        for s in re.split(r"(?<=[.!?])\s+", text):
            if s[:1].isupper() and s[-1:] in ".!?":
                sentences.setdefault(s[0], []).append(s)
    rows = [{"id": f"human-{i}", "text": t, "kind": "human"} for i, t in enumerate(human[:240])]
    rows += [{"id": f"wip-{i}", "text": green_words(t, wip), "kind": "wip"} for i, t in enumerate(human[240:300])]
    rows += [{"id": f"sa-{i}", "text": secret_sentences(sentences, sa, 3 * i), "kind": "sa"} for i in range(30)]
    rows += [{"id": "blank", "text": "  \n  ", "kind": "blank"}, {"id": "no-text", "text": "", "kind": "blank"},
             {"id": "long", "text": " ".join(human[300:400])[: MAX_CHARS + 5000], "kind": "human"}]
    return {"rows": rows, "wip": wip, "sa": sa}


def write_shards(folder: Path, rows: list[dict], fmt: str) -> Path:
    """The rows interleaved over SHARDS files (datatrove shards a task's input by file)."""
    folder.mkdir(parents=True)
    for s in range(SHARDS):
        part = rows[s::SHARDS]
        if fmt == "jsonl":
            (folder / f"part-{s}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
        else:
            pq.write_table(pa.Table.from_pylist(part), folder / f"part-{s}.parquet")
    return folder


def read_output(folder: Path) -> list[dict]:
    """Every document a writer wrote, as dicts (id, text, metadata), from jsonl(.gz) or parquet files."""
    docs = []
    for path in sorted(folder.glob("*")):
        if path.suffix == ".parquet":
            docs += pq.read_table(path).to_pylist()
        elif path.name.endswith((".jsonl.gz", ".jsonl")):
            raw = path.read_bytes()
            lines = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8").splitlines()
            docs += [json.loads(line) for line in lines if line.strip()]
    return docs


def scored(rows: list[dict]) -> list[dict]:
    """The rows a datatrove reader passes on (those with text) that fit within MAX_CHARS."""
    return [r for r in rows if r["text"] and len(r["text"]) <= MAX_CHARS]


def assert_matches_verify(docs: dict[str, dict], rows: list[dict], key: ICWKey, tokenizer) -> None:
    want = verify([r["text"] for r in rows], key, tokenizer)
    for row, w in zip(rows, want, strict=True):
        meta = docs[row["id"]]["metadata"]
        assert meta["icw_z_score"] == pytest.approx(w.z_score, rel=1e-12, abs=1e-12), row["id"]
        assert meta["icw_p_value"] == pytest.approx(w.p_value, rel=1e-12, abs=1e-300), row["id"]
        assert (meta["icw_is_watermarked"], meta["icw_num_tokens_scored"], meta["icw_num_aligned"],
                meta["icw_note"]) == (w.is_watermarked, w.num_tokens_scored, w.num_aligned, w.note or ""), row["id"]
        assert (meta["icw_key"], meta["icw_statistic"], meta["icw_null_hypothesis"]) == (
            key.to_string(), w.statistic, w.null_hypothesis)


def by_id(docs: list[dict]) -> dict[str, dict]:
    counts = Counter(d["id"] for d in docs)
    assert max(counts.values()) == 1, [i for i, c in counts.items() if c > 1][:5]
    return {d["id"]: d for d in docs}


def test_jsonl_two_tasks_match_verify(tmp_path, corpus, gpt2):
    rows, key = corpus["rows"], corpus["wip"]
    source = write_shards(tmp_path / "in", rows, "jsonl")
    pipeline = [JsonlReader(str(source)), ICWDetector(key, max_chars=MAX_CHARS, batch_size=32),
                JsonlWriter(str(tmp_path / "out"))]
    LocalPipelineExecutor(pipeline, tasks=2, workers=2, logging_dir=str(tmp_path / "logs")).run()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["00000.jsonl.gz", "00001.jsonl.gz"]
    assert sorted(p.name for p in (tmp_path / "logs" / "completions").iterdir()) == ["00000", "00001"]
    docs = by_id(read_output(tmp_path / "out"))
    assert set(docs) == {r["id"] for r in rows} - {"no-text"}  # datatrove's reader skips a document without text
    assert_matches_verify(docs, scored(rows), key, gpt2)
    assert all(docs[f"wip-{i}"]["metadata"]["icw_is_watermarked"] for i in range(60))
    assert docs["blank"]["metadata"]["icw_note"] == "empty text: nothing to score"
    long = docs["long"]["metadata"]
    assert (long["icw_p_value"], long["icw_is_watermarked"]) == (1.0, False)
    assert long["icw_note"].startswith(f"not scored: {MAX_CHARS + 5000:,} characters, more than max_chars")
    assert docs["human-0"]["metadata"]["kind"] == "human"  # the corpus's own fields are kept
    stats = json.loads((tmp_path / "logs" / "stats.json").read_text())
    detector = next(s for s in stats if s["name"].endswith("ICW detect"))["stats"]
    flagged = sum(d["metadata"]["icw_is_watermarked"] for d in docs.values())
    assert (detector["watermarked"], detector["nothing_scored"]) == (flagged, 2)  # counters in datatrove's stats


def test_parquet_two_tasks_with_a_set_of_keys_match_verify_keys(tmp_path, corpus):
    rows = [r for r in corpus["rows"] if r["text"]]
    keys = [ICWKey.create("sa", seed=100 + s) for s in range(9)] + [corpus["sa"]]
    source = write_shards(tmp_path / "in", rows, "parquet")
    pipeline = [ParquetReader(str(source)), ICWDetector(keys, max_chars=MAX_CHARS, batch_size=50),
                ParquetWriter(str(tmp_path / "out"))]
    LocalPipelineExecutor(pipeline, tasks=2, workers=2, logging_dir=str(tmp_path / "logs")).run()
    docs = by_id(read_output(tmp_path / "out"))
    assert set(docs) == {r["id"] for r in rows}
    texts = scored(rows)
    for row, want in zip(texts, verify_keys([r["text"] for r in texts], keys), strict=True):
        meta = docs[row["id"]]["metadata"]
        best = int(want.p_values.argmin())
        assert meta["icw_p_value"] == pytest.approx(want.adjusted_p_values.min(), rel=1e-12)
        assert meta["icw_z_score"] == pytest.approx(want.z_scores[best], rel=1e-12, abs=1e-12)
        assert meta["icw_fired"] == " ".join(want.keys[k] for k in want.fired)
        assert meta["icw_is_watermarked"] == want.is_watermarked and meta["icw_key"] == want.keys[best]
        assert "Holm" in meta["icw_p_value_method"]
    sa_key = corpus["sa"].to_string()
    assert all(docs[f"sa-{i}"]["metadata"]["icw_fired"] == sa_key for i in range(30))


def test_filter_routes_watermarked_documents_to_the_exclusion_writer(tmp_path, corpus):
    rows, key = [r for r in corpus["rows"] if r["text"]], corpus["sa"]
    source = write_shards(tmp_path / "in", rows, "parquet")
    step = ICWFilter(key, max_chars=MAX_CHARS, exclusion_writer=JsonlWriter(str(tmp_path / "flagged")))
    LocalPipelineExecutor([ParquetReader(str(source)), step, ParquetWriter(str(tmp_path / "kept"))], tasks=2,
                          workers=2, logging_dir=str(tmp_path / "logs")).run()
    kept, flagged = by_id(read_output(tmp_path / "kept")), by_id(read_output(tmp_path / "flagged"))
    want = {r["id"]: w.is_watermarked for r, w in zip(scored(rows), verify([r["text"] for r in scored(rows)], key),
                                                      strict=True)}
    assert set(flagged) == {i for i, w in want.items() if w} and not set(kept) & set(flagged)
    assert set(kept) | set(flagged) == {r["id"] for r in rows}
    assert {f"sa-{i}" for i in range(30)} <= set(flagged)
    assert {d["metadata"]["filter_reason"] for d in flagged.values()} == {"icw_watermarked"}
    keep_only = ICWFilter(key, keep_watermarked=True)
    docs = [Document(r["text"], r["id"]) for r in rows[-40:]]
    assert [d.id for d in keep_only.run(docs)] == [r["id"] for r in rows[-40:] if want.get(r["id"])]


KILLABLE = '''
"""The pipeline of the kill-and-resume test: rank 1 announces the N-th document it wrote, once, then waits to be killed."""
import os
import signal
import sys
from pathlib import Path

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter

from icw.integrations.datatrove import ICWDetector


class StopOnce(PipelineStep):
    name = "stop once"

    def __init__(self, marker, after):
        super().__init__()
        self.marker, self.after = marker, after

    def run(self, data, rank=0, world_size=1):
        for i, doc in enumerate(data):
            yield doc
            if rank == 1 and i + 1 == self.after and not Path(self.marker).exists():
                Path(self.marker).write_text(str(os.getpid()))
                signal.pause()  # until the test kills the run


if __name__ == "__main__":
    work, key = Path(sys.argv[1]), sys.argv[2]
    pipeline = [JsonlReader(str(work / "in")), ICWDetector(key, batch_size=16),
                JsonlWriter(str(work / "out"), compression=None), StopOnce(str(work / "stopped"), after=40)]
    LocalPipelineExecutor(pipeline, tasks=2, workers=2, logging_dir=str(work / "logs")).run()
'''


def test_a_killed_run_resumes_without_duplicates(tmp_path, corpus):
    rows, key = scored(corpus["rows"]), corpus["sa"]
    write_shards(tmp_path / "in", rows, "jsonl")
    (tmp_path / "killable.py").write_text(textwrap.dedent(KILLABLE), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, str(tmp_path / "killable.py"), str(tmp_path), key.to_string()]
    logs, out = tmp_path / "logs", tmp_path / "out"
    run = subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:  # kill the whole run once rank 1 is mid-way and rank 0 has completed
        deadline = time.monotonic() + 300
        while not ((tmp_path / "stopped").exists() and (logs / "completions" / "00000").exists()):
            assert run.poll() is None, run.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the run never reached rank 1's 40th document"
            time.sleep(0.05)
        os.killpg(run.pid, signal.SIGKILL)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        run.stderr.close()
    assert sorted(p.name for p in (logs / "completions").iterdir()) == ["00000"]
    partial = []
    for line in (out / "00001.jsonl").read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):  # the last line may be cut anywhere, even after an inner "}"
            partial.append(json.loads(line)["id"])
    rank1 = {r["id"] for r in rows[1::SHARDS] + rows[3::SHARDS]}  # rank 1's files: part-1 and part-3
    assert 0 < len(partial) < len(rank1) and set(partial) <= rank1  # a real partial output was left behind
    rank0_written = (out / "00000.jsonl").stat().st_mtime_ns

    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Skipping 1 already completed tasks" in again.stderr
    assert (out / "00000.jsonl").stat().st_mtime_ns == rank0_written  # the completed task was not redone
    docs = by_id(read_output(out))
    assert set(docs) == {r["id"] for r in rows}
    assert_matches_verify(docs, rows, key, None)


def test_bad_input_is_a_clear_error_or_a_note(gpt2):
    for kwargs, message in [({"keys": "icw:sa:seed=x"}, "key field seed must be a number"),
                            ({"keys": ["icw:sa:seed=1", "not a key"]}, "malformed key"),
                            ({"keys": None}, "keys= is required"), ({"keys": []}, "keys= is an empty list"),
                            ({"keys": ["icw:sa:seed=1", ICWKey.create("wip", 1, gpt2)]}, "several families"),
                            ({"keys": "icw:sa:seed=1", "alpha": 1.5}, "alpha must lie"),
                            ({"keys": "icw:sa:seed=1", "batch_size": 0}, "batch_size must be")]:
        with pytest.raises((ValueError, ICWKeyError), match=message):
            ICWDetector(**kwargs)
    docs = [Document("", "empty"), Document("   ", "blank"), Document(None, "none"), Document("x" * 50, "long"),
            Document("Apples fall. Bears run. Cats sleep.", "abc")]
    out = list(ICWDetector("icw:sa:seed=3,secret=ABC", max_chars=40, batch_size=2).run(docs))
    assert [d.id for d in out] == ["empty", "blank", "none", "long", "abc"]
    notes = [d.metadata["icw_note"] for d in out]
    assert notes[:3] == ["empty text: nothing to score"] * 3 and "more than max_chars=40" in notes[3]
    assert out[4].metadata["icw_num_aligned"] == 3 and all(d.metadata["icw_p_value"] == 1.0 for d in out[:4])
    assert {type(d.metadata["icw_note"]) for d in out} == {str}  # one type per field, as a parquet writer needs
    bare = next(ICWDetector("icw:sa:seed=3,secret=ABC", metadata_prefix="").run([Document("A b. C d.", "x")]))
    assert {"z_score", "p_value", "is_watermarked", "num_tokens_scored"} <= set(bare.metadata)


def test_optional_extra():
    """``import icw`` never imports datatrove; without it, the steps' module names the extra to install."""
    code = ("import sys, icw, icw.corpus, icw.multikey\n"
            "assert 'datatrove' not in sys.modules\n"
            "sys.modules['datatrove'] = None  # as if the extra were not installed\n"
            "import icw.integrations.datatrove\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" in out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        "ImportError: icw's datatrove steps need the datatrove extra: pip install 'icw[datatrove]' "
        "(cannot import datatrove)")


def _detect_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "icw.cli", "detect", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_icw_detect_executor_local_matches_verify_resumes_and_guards_its_folders(tmp_path, corpus, gpt2):
    """``icw detect --dataset DIR --executor local --tasks 2``: the datatrove pipeline from the command line."""
    rows, key = corpus["rows"], corpus["wip"]
    write_shards(tmp_path / "in", rows, "parquet")
    args = ("--dataset", "in", "--key", key.to_string(), "--executor", "local", "--tasks", "2", "--num-proc", "2",
            "--max-chars", str(MAX_CHARS), "--batch-size", "32")
    first = _detect_cli(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads(first.stdout)
    out = tmp_path / "in.icw-detect"
    assert summary["output"] == "in.icw-detect" and sorted(p.suffix for p in out.iterdir()) == [".parquet"] * 2
    assert sorted(p.name for p in (tmp_path / "in.icw-detect.logs" / "completions").iterdir()) == ["00000", "00001"]
    tables = [pq.read_table(p) for p in sorted(out.iterdir())]
    results = {r["id"]: r for t in tables for r in t.to_pylist()}
    assert len(results) == sum(len(t) for t in tables) == summary["num_texts"] == len(rows) - 1  # "no-text" skipped
    want = dict(zip([r["id"] for r in scored(rows)], verify([r["text"] for r in scored(rows)], key, gpt2), strict=True))
    for doc_id, w in want.items():
        got = results[doc_id]
        assert (got["z_score"], got["p_value"]) == (pytest.approx(w.z_score, abs=1e-12), pytest.approx(w.p_value))
        assert (got["is_watermarked"], got["num_tokens_scored"], got["note"]) == (
            w.is_watermarked, w.num_tokens_scored, w.note or "")
    assert results["long"]["note"].startswith("not scored") and results["long"]["p_value"] == 1.0
    assert summary["num_watermarked"] == sum(r["is_watermarked"] for r in results.values()) >= 60
    meta = json.loads(tables[0].schema.metadata[b"icw"])
    assert (meta["key"], meta["statistic"], summary["p_value_method"]) == (
        key.to_string(), w.statistic, w.p_value_method)

    again = _detect_cli(*args, cwd=tmp_path)  # the same run: datatrove skips both finished tasks
    assert again.returncode == 0 and "all 2 tasks have already been completed" in again.stderr, again.stderr[-3000:]
    assert json.loads(again.stdout)["num_texts"] == summary["num_texts"]

    other = ICWKey.create("wip", seed=12, tokenizer=gpt2).to_string()
    for extra, message in [(("--key", other), "records another run (it differs in key)"),
                           (("--logging-dir", "fresh-logs"), "already holds files that no run in fresh-logs wrote"),
                           (("--dataset", "missing"), "missing does not exist")]:
        got = _detect_cli(*args, *extra, cwd=tmp_path)  # the last value of an option wins
        assert got.returncode == 2 and message in got.stderr, got.stderr[-3000:]
        assert got.stderr.strip().splitlines()[-1].startswith("icw: error:")
    plain = _detect_cli("--dataset", "in", "--key", key.to_string(), "--tasks", "2", cwd=tmp_path)
    assert plain.returncode == 2 and "add --executor local" in plain.stderr
