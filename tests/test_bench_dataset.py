"""ICWBench dataset: build from the bundled question file, round-trip through load_dataset, card, push."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from icw import ICWKey
from icw.bench.dataset import (
    COLUMNS,
    TRAIN_SEED_START,
    BenchBuildConfig,
    build,
    build_rows,
    bundled_questions_path,
    read_questions,
    split_queries,
)
from icw.cli import main as cli_main

datasets = pytest.importorskip("datasets")


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("icwbench")
    assert cli_main(["bench", "build", "--out", str(out), "--num-test", "6", "--num-train", "5",
                     "--pool-size", "400", "--quiet"]) == 0
    return out


def test_bundled_question_file():
    rows = [json.loads(line) for line in bundled_questions_path().read_text(encoding="utf-8").splitlines()]
    questions = [r["question"] for r in rows]
    assert len(questions) >= 200 and len(set(questions)) == len(questions)
    assert len({r["id"] for r in rows}) == len(rows)
    assert len({r["topic"] for r in rows}) >= 8  # varied topics
    assert all(q.endswith("?") and len(q.split()) >= 4 for q in questions)


def test_round_trip_per_config(bench, qwen3):
    test_queries = None
    all_test_seeds, all_train_seeds = set(), set()
    for family in ("tsp", "wip", "sa"):
        dd = datasets.load_dataset(str(bench), family)
        assert set(dd) == {"test", "train"}
        test, train = dd["test"], dd["train"]
        assert (test.num_rows, train.num_rows) == (6, 5)
        assert list(test.column_names) == list(COLUMNS)
        assert test.features["seed"].dtype == "int64"
        assert len(set(test["id"]) | set(train["id"])) == 11
        assert set(test["family"]) == set(train["family"]) == {family}
        # disjoint seed pools and disjoint queries
        assert not set(test["seed"]) & set(train["seed"])
        assert max(test["seed"]) < TRAIN_SEED_START <= min(train["seed"])
        assert not set(test["query"]) & set(train["query"])
        all_test_seeds |= set(test["seed"])
        all_train_seeds |= set(train["seed"])
        # the same test queries in every family
        test_queries = test_queries or test["query"]
        assert test["query"] == test_queries
        assert all(s.startswith("icw-questions:") for s in test["query_source"])
        # every key rebuilds its instruction
        for row in test.select(range(2)):
            key = ICWKey.from_string(row["key"])
            assert key.family == family and key.seed == row["seed"]
            assert key.instruction(qwen3) == row["instruction"]
    assert not all_test_seeds & all_train_seeds
    assert datasets.load_dataset(str(bench), "wip", split="test").num_rows == 6


def test_card_yaml_is_valid(bench):
    from huggingface_hub import DatasetCard

    card = DatasetCard.load(bench / "README.md")
    data = card.data.to_dict()
    assert [c["config_name"] for c in data["configs"]] == ["tsp", "wip", "sa"]
    assert data["configs"][1]["data_files"] == [{"split": "test", "path": "wip/test-*.parquet"},
                                                {"split": "train", "path": "wip/train-*.parquet"}]
    assert data["license"] == "apache-2.0" and data["language"] == ["en"]
    text = card.text
    for needle in ("Keys and seeds", "seed 0 + i", "1,000,000 + i", "Learning to Follow In-Context Watermark",
                   "@article", "Liu, Yepeng"):
        assert needle in text, needle
    assert datasets.get_dataset_config_names(str(bench)) == ["tsp", "wip", "sa"]


def test_rebuild_resumes_and_detects_changed_settings(bench, tmp_path):
    out = tmp_path / "b"
    cfg = BenchBuildConfig(out=str(out), num_test=3, num_train=2, families=("sa",))
    build(cfg, progress=False)
    path = out / "sa" / "test-00000-of-00001.parquet"
    stamp = path.stat().st_mtime_ns
    build(cfg, progress=False)  # same settings: finished splits are kept
    assert path.stat().st_mtime_ns == stamp
    build(BenchBuildConfig(out=str(out), num_test=4, num_train=2, families=("sa",)), progress=False)
    assert datasets.load_dataset(str(out), "sa", split="test").num_rows == 4


def test_own_question_files(tmp_path):
    plain = tmp_path / "qs.txt"
    plain.write_text("What is a?\n\nWhat is b?\nWhat is c?\nWhat is a?\n", encoding="utf-8")
    pairs = read_questions(plain)
    assert pairs[0] == ("What is a?", "qs:0") and len(pairs) == 4
    test, train = split_queries(pairs, 2, None)
    assert len(test) == 2 and len(train) == 1  # the duplicate is dropped
    jl = tmp_path / "qs.jsonl"
    jl.write_text('{"id": 7, "query": "Why?"}\n{"question": "How?"}\n', encoding="utf-8")
    assert read_questions(jl) == [("Why?", "qs:7"), ("How?", "qs:1")]


def test_lfqa_sampling_on_a_local_copy(tmp_path):
    """The --lfqa path, run on a local folder laid out like vblagoje/lfqa (no Hub access)."""
    from icw.bench.dataset import lfqa_queries

    for split, n in (("train", 30), ("validation", 4), ("test", 8)):
        rows = [{"q_id": f"{split}{i}", "title": f"{split} question {i}?", "selftext": ""} for i in range(n)]
        (tmp_path / "data").mkdir(exist_ok=True)
        datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "data" / f"{split}-00000-of-00001.parquet"))
    test, train = lfqa_queries(10, 12, dataset_id=str(tmp_path))
    assert len(test) == 10 and len(train) == 12
    assert {s.split(":")[1] for _, s in test} == {"test", "validation"}  # topped up from validation
    assert all(s.startswith("lfqa:train:") for _, s in train)
    assert not {q for q, _ in test} & {q for q, _ in train}
    assert lfqa_queries(10, 12, dataset_id=str(tmp_path)) == (test, train)  # seeded
    with pytest.raises(ValueError, match="fewer than --num-test"):
        lfqa_queries(20, 0, dataset_id=str(tmp_path))


def test_full_size_tsp_instruction(qwen3):
    """Without a pool the TSP instruction lists gamma |V_en| ~ 17,700 Qwen3 tokens (~100 KB)."""
    (row,) = build_rows("tsp", "test", [("Why?", "x:0")], qwen3)
    key = ICWKey.from_string(row["key"])
    assert len(key.token_set(qwen3)) == int(0.2 * 88492)
    assert 80_000 < len(row["instruction"]) < 200_000


def test_bad_input(tmp_path, capsys):
    with pytest.raises(FileNotFoundError):
        read_questions(tmp_path / "missing.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no questions"):
        read_questions(empty)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": 1}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="among question, query, title"):
        read_questions(bad)
    with pytest.raises(ValueError, match="either --questions FILE or --lfqa"):
        BenchBuildConfig(out="x", questions="q.txt", lfqa=True)
    with pytest.raises(ValueError, match="unknown ICW family"):
        BenchBuildConfig(out="x", families=("tsp", "abc"))
    assert cli_main(["bench", "build", "--out", str(tmp_path / "o"), "--num-test", "999", "--quiet"]) == 2
    assert "needs at least that many questions" in capsys.readouterr().err
    assert cli_main(["bench", "push", str(tmp_path), "--repo-id", "me/x", "--dry-run"]) == 2
    assert "run icw bench build first" in capsys.readouterr().err


def test_push_dry_run(bench, capsys):
    assert cli_main(["bench", "push", str(bench), "--repo-id", "my-org/ICWBench", "--dry-run"]) == 0
    out = capsys.readouterr().out
    for family in ("tsp", "wip", "sa"):
        assert f"would push config {family} (test: 6 rows, train: 5 rows) -> datasets/my-org/ICWBench" in out
    assert "README.md -> datasets/my-org/ICWBench/README.md" in out
    assert cli_main(["bench", "push", str(bench), "--repo-id", "no-slash", "--dry-run"]) == 2


def test_a_folder_rebuilt_at_the_same_path_is_read_anew(tmp_path):
    """datasets caches a local folder by name and layout: the runner must read the new build, not the old."""
    from icw.bench.runner import load_family

    out = tmp_path / "bench"
    sizes = []
    for num_test in (3, 5):
        assert cli_main(["bench", "build", "--out", str(out), "--num-test", str(num_test), "--num-train", "2",
                         "--families", "sa", "--quiet"]) == 0
        sizes.append(len(load_family(str(out), "sa")))
    assert sizes == [3, 5]
