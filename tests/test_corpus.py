"""`icw detect --dataset`: a parquet / JSON Lines corpus through datasets.map with worker processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import datasets
import pyarrow.parquet as pq
import pytest

from icw import ICWKey, verify
from icw.corpus import detect_dataset

TEXTS = ["Apples fall. Bears run. Cats sleep.", "Some plain words here without much.", "",
         "Zebras yawn quietly near the river. Many birds sing loudly at dawn."]


def _run_cli(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "icw.cli", "detect", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_parquet_with_two_processes_matches_verify(tmp_path, gpt2):
    texts = TEXTS * 15
    ids = [f"doc-{i}" for i in range(len(texts))]
    datasets.Dataset.from_dict({"id": ids, "body": texts}).to_parquet(str(tmp_path / "corpus.parquet"))
    key = ICWKey.create("wip", 4, gpt2)
    out = _run_cli("--dataset", "corpus.parquet", "--column", "body", "--num-proc", "2", "--batch-size", "8",
                   "--key", key.to_string(), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["num_texts"] == len(texts) and summary["output"] == "corpus.icw-detect.parquet"
    assert summary["p_value_method"].startswith("exact") and summary["statistic"] and summary["null_hypothesis"]
    table = pq.read_table(tmp_path / "corpus.icw-detect.parquet")
    rows = table.to_pylist()
    assert [r["id"] for r in rows] == ids  # results next to the input ids, in order
    want = verify(texts, key, gpt2)
    assert [r["z_score"] for r in rows] == pytest.approx([w.z_score for w in want])
    assert [r["p_value"] for r in rows] == pytest.approx([w.p_value for w in want])
    assert [r["is_watermarked"] for r in rows] == [w.is_watermarked for w in want]
    assert summary["num_watermarked"] == sum(w.is_watermarked for w in want)
    meta = json.loads(table.schema.metadata[b"icw"])
    assert meta["key"] == key.to_string() and meta["p_value_method"] == want[0].p_value_method


def test_json_lines_folder_without_ids_and_an_explicit_output(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    for shard in range(2):
        (folder / f"part-{shard}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS),
                                                    encoding="utf-8")
    got = detect_dataset(str(folder), "icw:sa:seed=3,secret=ABC", output=tmp_path / "out" / "r.parquet")
    rows = pq.read_table(got.path).to_pylist()
    assert [r["row"] for r in rows] == list(range(2 * len(TEXTS)))
    assert rows[0]["num_aligned"] == 3 and rows[2]["note"] == "empty text: nothing to score"
    assert got.p_value_method.startswith("Monte Carlo")


def test_bad_corpus_input_is_one_clear_line(tmp_path):
    datasets.Dataset.from_dict({"text": TEXTS}).to_parquet(str(tmp_path / "c.parquet"))
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    for args, message in [(("--dataset", "c.parquet", "--column", "body"), "no column 'body'"),
                          (("--dataset", "notes.txt"), "expected parquet (.parquet) or JSON Lines"),
                          (("--dataset", "c.parquet", "a.txt"), "either text files or --dataset")]:
        out = _run_cli(*args, "--key", "icw:sa:seed=1,length=18", cwd=tmp_path)
        assert out.returncode == 2 and message in out.stderr, out.stderr
        assert "Traceback" not in out.stderr and out.stderr.strip().splitlines()[-1].startswith("icw: error:")
