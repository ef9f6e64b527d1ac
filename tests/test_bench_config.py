"""``icw bench run`` options: built from the task/backend/extras dataclasses by HfArgumentParser,
read from ``--config`` YAML (the packaged task or a user's file), overridden by flags."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields
from importlib.resources import files

import pytest
import yaml

from icw.bench.runner import (
    RUN_PARTS,
    BackendConfig,
    ExtrasConfig,
    RunConfig,
    TaskConfig,
    _check_resume,
    config_from_args,
)
from icw.cli import build_parser, main


def _config(*argv: str) -> RunConfig:
    return config_from_args(build_parser().parse_args(["bench", "run", *argv]))


def test_the_packaged_task_file_is_the_home_of_the_task_defaults():
    shipped = yaml.safe_load(files("icw.bench").joinpath("tasks/icwbench.yaml").read_text())
    task = TaskConfig()
    assert shipped and all(getattr(task, name) == value for name, value in shipped.items())
    assert set(shipped) <= {f.name for f in fields(TaskConfig)} and isinstance(shipped["version"], int)
    # the parser's defaults are the task's: a bare command line gives the packaged task
    assert _config("--out", "o").parts()[0] == task


def test_config_file_sets_values_and_flags_override_it(tmp_path):
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text(yaml.safe_dump({
        "task": "my-task", "version": 3, "dataset": "data/bench", "families": ["sa"], "max_new_tokens": 50,
        "backend": "openai", "base_url": "http://127.0.0.1:9/v1", "concurrency": 2,
        "out": str(tmp_path / "run"), "attacks": "deletion", "judge_url": "http://127.0.0.1:9/v1", "judge_model": "j"}))
    config = _config("--config", str(run_yaml), "--max-new-tokens", "30", "--families", "wip", "tsp")
    task, backend, extras = config.parts()
    assert (task.task, task.version, task.dataset, task.families, task.max_new_tokens) == \
        ("my-task", 3, "data/bench", ["wip", "tsp"], 30)
    assert (backend.backend, backend.base_url, backend.concurrency, backend.model) == \
        ("openai", "http://127.0.0.1:9/v1", 2, "smollm2")
    assert (extras.out, extras.attacks, extras.judge_model) == (str(tmp_path / "run"), ["deletion"], "j")
    assert RunConfig.from_parts(task, backend, extras) == config
    # the packaged task by name, with --config=VALUE spelling
    assert _config("--config=icwbench", "--out", "o").task == "icwbench"


def test_every_historical_flag_spelling_still_parses():
    config = _config(
        "--dataset", "d", "--out", "o", "--families", "wip", "sa", "--split", "train", "--limit", "5",
        "--backend", "transformers", "--model", "m", "--base-model", "b", "--adapter", "a",
        "--api-key", "k", "--mode", "bias", "--max-new-tokens", "7", "--batch-size", "3",
        "--delta", "4.5", "--seed", "9", "--template", "heldout", "--key-seed-offset", "100",
        "--query-dataset", "q", "--query-column", "c", "--attacks", "deletion", "emoji", "--attack-url", "au",
        "--attack-model", "am", "--paraphrase-rounds", "2", "--ppl-models", "p1", "p2", "--judge-url", "ju",
        "--judge-model", "jm")
    assert config == RunConfig(
        dataset="d", out="o", families=["wip", "sa"], split="train", limit=5, backend="transformers", model="m",
        base_model="b", adapter="a", api_key="k", mode="bias", max_new_tokens=7, batch_size=3, delta=4.5, seed=9, template="heldout", key_seed_offset=100, query_dataset="q",
        query_column="c", attacks=["deletion", "emoji"], attack_url="au", attack_model="am", paraphrase_rounds=2,
        ppl_models=["p1", "p2"], judge_url="ju", judge_model="jm")
    remote = _config("--out", "o", "--backend", "openai", "--base-url", "u", "--concurrency", "2")
    assert (remote.base_url, remote.concurrency, remote.batch_size) == ("u", 2, None)
    # every field of the three parts is an option, and each part owns its own fields
    names = [f.name for part in RUN_PARTS for f in fields(part)]
    assert sorted(names) == sorted(f.name for f in fields(RunConfig)) and len(set(names)) == len(names)


def test_bad_options_and_config_files_are_one_line_errors(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("families: [sa]\nbogus: 1\n")
    not_a_mapping = tmp_path / "list.yaml"
    not_a_mapping.write_text("- sa\n")
    cases = [(["--config", str(bad), "--out", "o"], "unknown key(s) bogus"),
             (["--config", str(not_a_mapping), "--out", "o"], "expected a YAML mapping"),
             (["--config", "no-such-task", "--out", "o"], "no packaged task of that name (icwbench)"),
             (["--families", "sa"], "required: --out"),
             (["--out", "o", "--limit", "0"], "--limit: expected a whole number >= 1, got 0"),
             (["--out", "o", "--backend", "openai", "--mode", "bias"], "bias mode needs logit access"),
             (["--out", "o", "--concurrency", "8"], "the transformers backend does not use --concurrency (openai)"),
             (["--out", "o", "--backend", "openai", "--base-url", "u", "--batch-size", "8", "--adapter", "a"],
              "the openai backend does not use --batch-size (transformers), --adapter (transformers)"),
             (["--out", "o", "--backend", "vllm", "--batch-size", "8"], "the vllm backend does not use --batch-size")]
    for argv, message in cases:
        try:
            code = main(["bench", "run", *argv])
        except SystemExit as exit_:
            code = exit_.code
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("icw: error: ") and message in err and err.count("\n") == 1, (argv, err)


def test_cli_help_shows_groups_and_defaults_and_config_works_in_a_real_process(tmp_path):
    help_text = subprocess.run([sys.executable, "-m", "icw.cli", "bench", "run", "--help"],
                               capture_output=True, text=True, timeout=120).stdout
    assert "--config YAML" in help_text and "(default: 600)" in help_text and "(default: icw/ICWBench)" in help_text
    assert all(part._argument_group_name in help_text for part in (TaskConfig, BackendConfig, ExtrasConfig))
    bad = tmp_path / "bad.yaml"
    bad.write_text("max_new_tokenz: 5\n")
    done = subprocess.run([sys.executable, "-m", "icw.cli", "bench", "run", "--config", str(bad), "--out", "o"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("icw: error: ") and "max_new_tokenz" in done.stderr
    assert "Traceback" not in done.stderr


def test_resume_refuses_a_run_directory_of_another_task_version(tmp_path):
    config = RunConfig(out=str(tmp_path), families=["sa"])
    _check_resume(config, tmp_path)
    saved = json.loads((tmp_path / "run.json").read_text())
    assert (saved["task"], saved["version"]) == ("icwbench", 1)
    _check_resume(RunConfig(out=str(tmp_path), families=["wip"]), tmp_path)  # same task: more families is fine
    with pytest.raises(ValueError, match="version: 1 there vs 2 now"):
        _check_resume(RunConfig(out=str(tmp_path), families=["sa"], version=2), tmp_path)
    # run directories written before tasks were versioned still resume
    (tmp_path / "run.json").write_text(json.dumps({k: v for k, v in saved.items() if k not in ("task", "version")}))
    _check_resume(config, tmp_path)
