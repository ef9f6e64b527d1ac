"""CLI polish: fast start, defaults in --help, progress bars on resume, a disjoint query source,
recipes that say where they saved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from icw.bench.runner import RESPONSES, load_records
from icw.questions import bundled_questions, check_not_test_questions
from icw.train.synthesis import SynthesisConfig, synthesize
from icw.verification import DEFAULT_MAX_CHARS

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
HEAVY = ("torch", "transformers", "evaluate", "datasets", "sklearn")


def _icw(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "icw.cli", *args], env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def _loaded_after(code: str) -> list[str]:
    """The heavy modules a fresh interpreter holds after running ``code``."""
    probe = f"import sys\n{code}\nprint(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"
    done = subprocess.run([sys.executable, "-c", probe], env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1].replace("'", '"'))


def test_cli_starts_without_heavy_imports():
    assert _loaded_after("import icw.cli") == []
    run_main = "from icw.cli import main\ntry:\n    main({})\nexcept SystemExit:\n    pass"
    assert _loaded_after(run_main.format('["key", "new", "--family", "sa", "--seed", "1"]')) == []
    assert _loaded_after(run_main.format('["--help"]')) == []
    assert _loaded_after(run_main.format('["hub", "metric-path", "icw_sa"]')) == []
    assert "transformers" in _loaded_after(run_main.format('["bench", "run", "--help"]'))


def test_detect_with_an_embedded_tokenizer_imports_no_torch(tmp_path):
    """``icw detect`` under a WIP/Qwen3 key loads the tokenizer without AutoTokenizer, whose import pulls in
    torch (issue 25: start-up); scipy.special (TSP's tails only) stays unloaded too."""
    from icw import ICWKey

    text = tmp_path / "text.txt"
    text.write_text("Some text to check. It was written by a person.\n")
    key = ICWKey.create("wip", seed=1, tokenizer="qwen3").to_string()
    loaded = _loaded_after(f"from icw.cli import main\nmain(['detect', '--key', {key!r}, {str(text)!r}])")
    assert "torch" not in loaded and "transformers" in loaded
    code = f"from icw.cli import main\nimport sys\nmain(['detect', '--key', {key!r}, {str(text)!r}])\n" \
           "print(sorted(m for m in sys.modules if m.startswith('scipy.special')))"
    done = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "[]", done.stderr[-2000:]


def test_lazy_parser_lists_the_same_commands_as_the_full_one(capsys):
    from icw.cli import build_parser

    helps = []
    for parser in (build_parser(), build_parser("key")):
        with pytest.raises(SystemExit):
            parser.parse_args(["--help"])
        helps.append(capsys.readouterr().out)
    assert helps[0] == helps[1]
    assert all(name in helps[0] for name in ("demo", "bench", "train", "hub"))


@pytest.mark.parametrize("args, expected", [
    (["key", "new"], ["(default: qwen3)", "(default: 0.01)", "(default: 0.2)", "(default: 13)", "(default: 18)"]),
    (["key", "calibrate"], ["(default: 0.01)", "(default: 0.95)"]),
    (["detect"], ["(default: 0.01)", f"(default: {DEFAULT_MAX_CHARS})", "(default: text)"]),
    (["demo"], ["(default: smollm2)", "(default: 2026)", "(default: 160)"]),
    (["hub", "model-card"], ["(default: peft/lora)"]),
    (["bench", "run"], ["(default: 600)"]),
    (["train", "synthesize"], ["(default: smollm2)", "(default: data/dcs)"]),
])
def test_help_shows_defaults(args, expected):
    done = _icw(*args, "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    text = " ".join(done.stdout.split())  # argparse wraps long help lines
    for default in expected:
        assert default in text, f"icw {' '.join(args)} --help lacks {default}"
    if args[0] not in ("bench", "train"):  # icw's own formatter; HfArgumentParser (bench, train) prints every default
        assert "(default: None)" not in text and "(default: False)" not in text


def test_resumed_bench_run_bars_say_role_and_what_is_done(tmp_path, tiny_qwen):
    """A real `icw bench run` on a tiny model: 2 of 4 queries, then all 4 (a resume)."""
    model, tok = tiny_qwen
    folder = tmp_path / "tiny-model"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    bench = tmp_path / "icwbench"
    assert _icw("bench", "build", "--out", str(bench), "--families", "sa", "--num-test", "4", "--num-train", "0",
                "--quiet").returncode == 0
    out = tmp_path / "run"
    base = ("bench", "run", "--dataset", str(bench), "--out", str(out), "--model", str(folder), "--families", "sa",
            "--max-new-tokens", "8", "--batch-size", "2")
    first = _icw(*base, "--limit", "2")
    assert first.returncode == 0, first.stderr[-2000:]
    assert "sa positives" in first.stderr and "sa negatives" in first.stderr
    assert "already done" not in first.stderr
    second = _icw(*base, "--limit", "4")
    assert second.returncode == 0, second.stderr[-2000:]
    assert "sa positives: 2 of 4 already done" in second.stderr
    assert "sa negatives: 2 of 4 already done" in second.stderr
    assert len(load_records(out)) == 8 == len((out / RESPONSES).read_text().splitlines())
    quiet = _icw(*base, "--limit", "4", "--progress", "false")  # nothing left, and no bars asked for
    assert quiet.returncode == 0 and "sa positives" not in quiet.stderr


def test_bench_test_questions_and_synthesis_default_are_disjoint(tmp_path):
    import datasets

    from icw.cli import main

    test, train = bundled_questions("test"), bundled_questions("train")
    assert not {q for q, _ in test} & {q for q, _ in train}
    out = tmp_path / "bench"
    for seed in ("0", "5"):  # whatever the shuffle, ICWBench's test questions are the file's test split
        assert main(["bench", "build", "--out", str(out / seed), "--families", "sa", "--shuffle-seed", seed,
                     "--quiet"]) == 0
        built = datasets.load_dataset("parquet", data_files=str(out / seed / "sa" / "test-*.parquet"))["train"]
        assert set(built["query"]) == {q for q, _ in test}
        built_train = datasets.load_dataset("parquet", data_files=str(out / seed / "sa" / "train-*.parquet"))["train"]
        assert set(built_train["query"]) == {q for q, _ in train}
    check_not_test_questions([q for q, _ in train], "the train split")  # no error


def test_synthesis_refuses_test_questions_before_loading_the_model(tmp_path):
    """`icw train synthesize` with a queries file holding two ICWBench test questions, through the CLI:
    a one-line error naming them, and no model loaded (nothing written, and fast)."""
    queries = tmp_path / "queries.txt"
    leaked = [q for q, _ in bundled_questions("test")[:2]]
    queries.write_text("\n".join(["What makes bread rise?", leaked[0].upper(), leaked[1]]) + "\n")
    out = tmp_path / "dcs"
    done = _icw("train", "synthesize", "--queries_file", str(queries), "--output_dir", str(out),
                "--model_name_or_path", str(tmp_path / "no-such-model"), "--families", "sa")
    assert done.returncode == 2, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("icw: error: queries_file ") and "2 queries are ICWBench test questions" in line
    assert leaked[0] in line and "Traceback" not in done.stderr
    assert not (out / "rows.jsonl").exists()


def test_synthesis_default_queries_are_offline_train_questions_and_it_says_where_it_saved(tmp_path, tiny_qwen,
                                                                                         capsys):
    model, tok = tiny_qwen
    config = SynthesisConfig(output_dir=str(tmp_path / "dcs"), families=["sa"], num_h1=[2], num_h0=[1],
                             max_new_tokens=4, batch_size=4, perplexity=False)
    data = synthesize(config, model, tok)
    train = {q for q, _ in bundled_questions("train")}
    assert len(data) == 3 and set(data["query"]) <= train
    out = capsys.readouterr().out
    assert f"saved D_cs (3 rows) to {Path(config.output_dir) / 'data.parquet'}" in out


def test_icw_train_offline_ends_in_one_line_naming_the_local_alternative(tmp_path):
    """``icw train <recipe>`` ends a Hub download that fails offline as the recipe scripts do (issue 23): one
    ``icw: error:`` line naming the local alternative, exit status 2, no ``ConnectionError`` traceback."""
    root = Path(__file__).resolve().parents[1]
    offline = {**ENV, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "icw.cli", "train", "synthesize", "--config",
                           str(root / "recipes/configs/qwen3-14b/synthesize.yaml"), "--output_dir", str(tmp_path / "out")],
                          env=offline, capture_output=True, text=True, timeout=300, cwd=root)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("icw: error: cannot reach the Hugging Face Hub for dataset_name 'vblagoje/lfqa'")
    assert "HF_HUB_OFFLINE=1" in line and "--model_name_or_path smollm2" in line
    assert "recipes/configs/smollm2-135m/synthesize.yaml" in line
