"""Every recipe YAML parses with the recipe's TrlParser (which rejects unknown keys), the SA
anti-hacking gates, the GRPO reward rules and the `icw train` CLI wiring."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from icw import ICWKey
from icw.train import grpo, sdlp, sft, synthesis

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "recipes" / "configs").glob("*/*.yaml"))


PARSERS = {"synthesize": synthesis.make_parser, "sdlp": sdlp.make_parser, "grpo": grpo.make_parser,
           "sft": sft.make_parser}


def test_every_model_has_every_recipe():
    models = {p.parent.name for p in CONFIGS}
    assert models == {"qwen3-14b", "gpt-oss-20b", "smollm2-135m"}
    for model in models:
        assert {p.stem for p in CONFIGS if p.parent.name == model} == set(PARSERS)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recipe_yaml_parses_with_trl_parser(path):
    import torch

    # GPU recipes ask for bf16, which TrainingArguments refuses on a machine without a GPU unless use_cpu is set
    extra = [] if path.stem == "synthesize" or torch.cuda.is_available() else ["--use_cpu", "true"]
    parsed = PARSERS[path.stem]().parse_args_and_config(["--config", str(path), *extra])
    if path.stem == "sdlp":
        _, config, model_args = parsed
        assert isinstance(config, sdlp.SDLPConfig) and model_args.model_name_or_path
        if path.parent.name != "smollm2-135m":  # the paper's reference hyperparameters
            assert config.learning_rate == 7e-6 and config.top_k("tsp") == 1000 and config.top_k("wip") is None
            assert (config.delta("tsp"), config.delta("wip"), config.delta("sa")) == (5.0, 3.0, 8.0)
    if path.stem == "grpo":
        _, config, _, reward_args = parsed
        if path.parent.name != "smollm2-135m":
            assert config.num_generations == 8 and reward_args.min_completion_tokens == 200
            assert config.learning_rate == 1e-6


def test_recipes_have_trl_script_shape_and_take_defaults_from_the_paper_table():
    """``main(*make_parser().parse_args_and_config())`` in every recipe; ``make_parser(subparsers)``
    adds the sub-command to a TrlParser sub-command tree, as trl's scripts do; defaults from hparams."""
    import argparse
    import inspect

    from trl import TrlParser

    from icw.train import hparams

    tree = argparse.ArgumentParser(prog="x").add_subparsers(dest="command", parser_class=TrlParser)
    for name, make in PARSERS.items():
        module = inspect.getmodule(make)
        assert list(inspect.signature(module.make_parser).parameters)[:2] == ["subparsers", "prog"]
        sub = module.make_parser(tree)
        assert isinstance(sub, TrlParser) and tree.choices[name] is sub
        assert "main(*parser.parse_args_and_config())" in (ROOT / "recipes" / f"{name}.py").read_text()
    config = sdlp.SDLPConfig(output_dir="o", use_cpu=True)
    assert {f: config.delta(f) for f in hparams.TRAIN_DELTA} == hparams.TRAIN_DELTA
    assert {f: config.top_k(f) for f in hparams.TRAIN_TOP_K} == hparams.TRAIN_TOP_K
    assert all(getattr(config, k) == v for k, v in hparams.SDLP_TRAINING.items())
    _, grpo_config, _, reward_args = grpo.make_parser().parse_args_and_config(["--use_cpu", "true"])
    assert all(getattr(grpo_config, k) == v for k, v in hparams.GRPO_TRAINING.items())
    assert reward_args.min_completion_tokens == hparams.GRPO_MIN_COMPLETION_TOKENS
    # a recipe YAML / the command line still override the table
    _, grpo_config, _, _ = grpo.make_parser().parse_args_and_config(["--use_cpu", "true", "--learning_rate", "3e-6"])
    assert grpo_config.learning_rate == 3e-6


def test_unknown_yaml_key_is_rejected(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "recipes/configs/smollm2-135m/sdlp.yaml").read_text() + "torch_dtype: bfloat16\n")
    with pytest.raises(ValueError, match="torch_dtype"):
        sdlp.make_parser().parse_args_and_config(["--config", str(bad)])


def test_accelerate_configs_load():
    from accelerate.commands.config.config_args import load_config_from_file

    for name in ("ddp", "zero3", "fsdp2", "cpu", "cpu-ddp"):
        config = load_config_from_file(str(ROOT / "recipes" / "accelerate_configs" / f"{name}.yaml"))
        assert config.num_processes >= 1


SA = ICWKey.create("sa", seed=1, secret="BEHSCTPLAWMONRIDUG")


@pytest.mark.parametrize("text,reason", [
    ("**B**ees make honey in hives. Every colony has a queen.", "highlighted initials"),
    ("<b>B</b>ees make honey in hives. Every colony has a queen.", "highlighted initials"),
    ("B ees make honey in hives. Every colony has a queen.", "orphan letters"),
    ("Bees make honey.\n\n# B\n\nEvery colony has a queen.", "letter headings"),
    ("Bees make honey.\n- E: every colony has a queen.", "letter headings"),
    ("The code is B-E-H-S-C-T-P-L-A. Bees make honey.", "secret written out"),
])
def test_sa_gates_fire_on_hacks(text, reason):
    assert reason in grpo.sa_gates(text, SA)


def test_sa_gates_pass_natural_prose():
    text = ("Bees make honey from nectar. Each worker visits many flowers. Honey keeps for years because it is "
            "dry and acidic. I think that is remarkable. A hive can hold thousands of bees.")
    assert grpo.sa_gates(text, SA) == []


def test_reward_is_z_with_length_rule_and_gates(qwen3):
    wip = ICWKey.create("wip", seed=4, tokenizer=qwen3)
    reward = grpo.ICWReward(qwen3, min_completion_tokens=5)
    clean = "Bees make honey from nectar. Each worker visits many flowers every day."
    texts = [clean, "Too short.", "**B**ees make honey from nectar. Each worker visits many flowers every day.", clean]
    keys = [wip.to_string(), wip.to_string(), SA.to_string(), SA.to_string()]
    ids = qwen3(texts, add_special_tokens=False)["input_ids"]
    got = reward(prompts=[""] * 4, completions=[[{"role": "assistant", "content": t}] for t in texts],
                 completion_ids=ids, key=keys)
    from icw.verification import verify

    assert got[0] == pytest.approx(max(verify(clean, wip, qwen3).z_score, reward.z_floor))
    assert got[1] == reward.rejected_reward < reward.z_floor  # shorter than the minimum: below any honest attempt
    assert got[2] == reward.rejected_reward  # gated
    assert got[3] == pytest.approx(max(verify(clean, SA, num_null_keys=1).z_score, reward.z_floor))
    with pytest.raises(ValueError, match="key"):
        reward(prompts=[""], completions=["x"], completion_ids=[[1]])


def test_grpo_dataset_builds_instructed_prompts(qwen3):
    from datasets import Dataset

    key = ICWKey.create("sa", seed=2).to_string()
    ds = Dataset.from_list([{"family": "sa", "key": key, "query": "Why?", "response": "Because.", "label": 1,
                             "z": 0.0, "perplexity": 1.0, "id": "sa-h1-0"}])
    out = grpo.grpo_dataset(ds, qwen3)
    assert set(out.column_names) == {"prompt", "key", "family"}
    assert out[0]["prompt"][0]["content"] == ICWKey.from_string(key).prompt("Why?", qwen3)


def test_synthesis_plan_draws_paper_key_parameters(qwen3):
    config = synthesis.SynthesisConfig(families=["tsp", "sa"], num_h1=[6, 4], num_h0=[2], pool_size=300)
    items = synthesis.plan(config, [f"q{i}" for i in range(40)])
    assert [sum(1 for it in items if it["family"] == f and it["label"] == 1) for f in ("tsp", "sa")] == [6, 4]
    assert len({it["query"] for it in items}) == len(items)  # no query reused while they last
    keys = [synthesis.training_key(it["family"], it["seed"], qwen3, config) for it in items]
    assert {k.gamma for k in keys if k.family == "tsp"} <= {0.1, 0.2, 0.3}
    assert {k.length for k in keys if k.family == "sa"} <= {18, 19, 20}
    assert min(it["seed"] for it in items) >= synthesis.TRAIN_SEED_OFFSET  # disjoint from evaluation seeds
    with pytest.raises(ValueError, match="unknown family"):
        synthesis.plan(synthesis.SynthesisConfig(families=["xyz"]), ["q"])


def test_icw_train_cli_reports_bad_config(tmp_path, capsys):
    from icw.cli import main
    from icw.questions import bundled_questions

    leaked = tmp_path / "leaked.txt"  # an ICWBench test question: refused before the model loads
    leaked.write_text(bundled_questions("test")[0][0] + "\n", encoding="utf-8")
    assert main(["train", "synthesize", "--output_dir", str(tmp_path), "--families", "sa",
                 "--queries_file", str(leaked)]) == 2
    assert "is an ICWBench test question" in capsys.readouterr().err
    assert main(["train", "sdlp", "--no_such_field", "1"]) == 2
    assert main(["train", "sft", "--no_such_field", "1"]) == 2



@pytest.mark.parametrize("native", [True, False])
def test_the_precision_is_decided_in_one_place_by_the_hardware(native, monkeypatch):
    """icw.precision decides for every recipe: bf16 where native, fp32 where emulated, an explicit bf16: false
    kept, ICW_PRECISION over all of them; the shipped CPU configs leave the choice to it."""
    from icw import precision

    monkeypatch.setattr(precision, "native_bf16", lambda device="cpu": native)
    monkeypatch.delenv("ICW_PRECISION", raising=False)
    for name in ("sdlp", "grpo", "sft"):
        assert "\nbf16:" not in (ROOT / f"recipes/configs/smollm2-135m/{name}.yaml").read_text()
    sdlp_args = sdlp.make_parser().parse_args_and_config(
        ["--config", str(ROOT / "recipes/configs/smollm2-135m/sdlp.yaml")])[1]
    assert sdlp_args.bf16 is None  # unset: the machine decides
    grpo_args = grpo.make_parser().parse_args_and_config(
        ["--config", str(ROOT / "recipes/configs/smollm2-135m/grpo.yaml")])[1]
    assert grpo_args.bf16  # trl's default
    assert precision.resolve_training_precision(sdlp_args).startswith("bf16" if native else "fp32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = precision.resolve_training_precision(grpo_args)
    assert len([w for w in caught if "emulated" in str(w.message)]) == (0 if native else 1)
    for args in (sdlp_args, grpo_args):
        assert args.bf16 is native and args.mixed_precision == ("bf16" if native else "no")
    assert ("no native bf16" in line) is not native
    explicit = sdlp.make_parser().parse_args_and_config(
        ["--config", str(ROOT / "recipes/configs/smollm2-135m/sdlp.yaml"), "--bf16", "false"])[1]
    assert precision.resolve_training_precision(explicit) == "fp32 (bf16: false)" and not explicit.bf16
    for forced in ("fp32", "bf16"):
        monkeypatch.setenv("ICW_PRECISION", forced)
        args = sdlp.make_parser().parse_args_and_config(
            ["--config", str(ROOT / "recipes/configs/smollm2-135m/sdlp.yaml"), "--bf16", "false"])[1]
        assert precision.resolve_training_precision(args).startswith("bf16" if forced == "bf16" else "fp32")
        assert args.bf16 is (forced == "bf16") and precision.use_bf16("cpu") is (forced == "bf16")
    monkeypatch.setenv("ICW_PRECISION", "fp16")
    with pytest.raises(ValueError, match="ICW_PRECISION='fp16'"):
        precision.use_bf16("cpu")


def test_a_signal_during_training_saves_the_step_and_a_second_one_acts_at_once():
    """SaveOnSignalCallback in process: the first SIGINT / SIGTERM asks for a save and a stop at the step's end
    (none at the last step, which finishes anyway), a second one is what the process did before, the handlers
    are put back when training ends, and an ignored signal stays ignored. The whole recipe path is
    tests/test_train_smoke.py's kill-and-resume test."""
    import signal
    import threading

    from transformers import TrainerControl, TrainerState, TrainingArguments

    from icw.train.common import SaveOnSignalCallback

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be set from the main thread")
    args = TrainingArguments(output_dir="unused", use_cpu=True, report_to="none")
    # a worker that inherited SIGINT ignored or either signal blocked (the callback rightly leaves an ignored one alone:
    # the end of this test) would fail the checks: they start from a foreground process's handlers, unblocked, and
    # what the worker had comes back after
    inherited = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
        for signum, again in ((signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, "SIG_DFL")):
            callback, state, control = SaveOnSignalCallback(), TrainerState(global_step=7, max_steps=10), TrainerControl()
            callback.on_train_begin(args, state, control)
            callback.on_step_end(args, state, control)
            assert not control.should_save and not control.should_training_stop
            signal.raise_signal(signum)
            callback.on_step_end(args, state, control)
            assert control.should_save and control.should_training_stop and callback.stopped_at == 7
            last = TrainerControl()
            callback.on_step_end(args, TrainerState(global_step=10, max_steps=10), last)
            assert not last.should_save and callback.stopped_at == 7
            if again is KeyboardInterrupt:
                with pytest.raises(KeyboardInterrupt):
                    signal.raise_signal(signum)
            else:  # raising it again would end pytest: the handler it would go back to is the one from before
                assert callback._previous[signum] is before[signum]
                callback.on_train_end(args, state, control)
            assert {s: signal.getsignal(s) for s in before} == before
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        callback, state, control = SaveOnSignalCallback(), TrainerState(global_step=7, max_steps=10), TrainerControl()
        callback.on_train_begin(args, state, control)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        signal.raise_signal(signal.SIGINT)
        callback.on_step_end(args, state, control)
        assert not control.should_save and callback.received is None
        callback.on_train_end(args, state, control)
    finally:
        for signum, handler in inherited.items():
            signal.signal(signum, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


# ------------------------------------------------- the recipe scripts as a new user runs them
RECIPE_SCRIPTS = sorted((ROOT / "recipes").glob("*.py"))
#: No test here may reach the Hub: every check of a Hub-bound config runs offline.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _recipe(script: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **OFFLINE}, timeout=300)


def test_every_recipe_script_is_checked():
    assert {p.stem for p in RECIPE_SCRIPTS} == set(PARSERS)


@pytest.mark.parametrize("script", RECIPE_SCRIPTS, ids=lambda p: p.name)
def test_recipe_help_lists_its_yaml_option(script):
    """``--config`` is read by TrlParser before argparse runs, so argparse alone never listed it."""
    out = _recipe(script, "--help")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--config YAML" in out.stdout and f"smollm2-135m/{script.stem}.yaml" in out.stdout


def test_recipe_that_needs_the_hub_names_the_local_alternative_offline(tmp_path):
    """The paper-scale config offline: one ``icw: error:`` line (exit 2) naming what to use instead."""
    config = str(ROOT / "recipes/configs/qwen3-14b/synthesize.yaml")
    out = _recipe(ROOT / "recipes/synthesize.py", "--config", config, "--output_dir", str(tmp_path / "out"))
    assert out.returncode == 2, out.stderr[-2000:]
    (line,) = out.stderr.strip().splitlines()  # one line: no traceback
    assert line.startswith("icw: error: cannot reach the Hugging Face Hub for dataset_name 'vblagoje/lfqa'")
    assert "HF_HUB_OFFLINE=1" in line and "--queries_file FILE" in line
    assert "--model_name_or_path smollm2" in line and "recipes/configs/smollm2-135m/synthesize.yaml" in line
    # the bundled questions instead of the Hub dataset: the model is what cannot be fetched next
    out = _recipe(ROOT / "recipes/synthesize.py", "--config", config, "--output_dir", str(tmp_path / "out"),
                  "--dataset_name", "")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("icw: error:")]
    assert "model_name_or_path 'Qwen/Qwen3-14B'" in line and "--model_name_or_path smollm2" in line
    assert not (tmp_path / "out" / "rows.jsonl").exists()


def test_hub_unreachable_reads_the_whole_exception_chain():
    from icw.recipe_runner import hub_unreachable

    class OfflineModeIsEnabled(ConnectionError):  # huggingface_hub's, by name
        pass

    class ConnectError(Exception):  # httpx's: not an OSError
        pass

    def raised(inner: Exception, outer: Exception) -> Exception:
        try:
            try:
                raise inner
            except Exception as err:
                raise outer from err
        except Exception as err:
            return err

    assert hub_unreachable(ConnectionError("Couldn't reach 'x' on the Hub (OfflineModeIsEnabled)"))
    assert hub_unreachable(raised(OfflineModeIsEnabled("offline"), OSError("cannot load model")))
    assert hub_unreachable(raised(ConnectError("no route"), ValueError("wrapped")))
    assert not hub_unreachable(ValueError("bad value")) and not hub_unreachable(BrokenPipeError())


def _documented_cpu_recipe() -> dict[str, dict[str, object]]:
    """The settings table of docs/training.md's "The CPU recipe" section, per config file."""
    import yaml

    text = (ROOT / "docs" / "training.md").read_text().split("## The CPU recipe", 1)[1].split("\n## ", 1)[0]
    table: dict[str, dict[str, object]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].endswith(".yaml"):
            table.setdefault(cells[0], {})[cells[1]] = yaml.safe_load(cells[2])
    return table


def test_shipped_cpu_configs_are_the_documented_recipe():
    """recipes/configs/smollm2-135m/{synthesize,sdlp,grpo}.yaml hold exactly the settings docs/training.md
    documents (no field more, none less, the same values), and each parses with its recipe's parser."""
    import yaml

    documented = _documented_cpu_recipe()
    assert set(documented) == {"synthesize.yaml", "sdlp.yaml", "grpo.yaml"}
    for name, fields in documented.items():
        path = ROOT / "recipes" / "configs" / "smollm2-135m" / name
        assert yaml.safe_load(path.read_text()) == fields, name
        parsed = PARSERS[path.stem]().parse_args_and_config(["--config", str(path)])
        for field, value in fields.items():  # each field reaches the dataclass that owns it, unchanged
            got = next(getattr(p, field) for p in parsed if hasattr(p, field))
            got = getattr(got, "value", got)  # transformers' enums (lr_scheduler_type, save_strategy)
            assert got == value or (field == "report_to" and value == "none" and got in ([], ["none"], "none")) \
                or (isinstance(value, str) and value.startswith("~/") and got == os.path.expanduser(value)), \
                (name, field, got, value)  # the runs folder's paths are expanded where they are parsed
    # GRPO generates many prompts a step as one batch (with one, the advantages cancel from step to step)
    _, grpo_config, _, _ = grpo.make_parser().parse_args_and_config(
        ["--config", str(ROOT / "recipes/configs/smollm2-135m/grpo.yaml")])
    assert grpo_config.generation_batch_size // grpo_config.num_generations >= 8
    # one generate() an optimizer step, consumed by its micro-batches (no stale-policy rollouts)
    assert grpo_config.steps_per_generation == grpo_config.gradient_accumulation_steps
    assert grpo_config.per_device_train_batch_size <= 8  # a backward pass over 32 of TSP's rows passed 24 GiB
    # the three commands of the section are the shipped configs, run as printed
    section = (ROOT / "docs" / "training.md").read_text().split("## The CPU recipe", 1)[1].split("\n## ", 1)[0]
    for name in documented:
        assert f"--config recipes/configs/smollm2-135m/{name}" in section


def test_paths_under_home_resolve_where_the_configs_use_them(tiny_qwen, tmp_path, monkeypatch):
    """The CPU configs keep D_cs and checkpoints under ~/.cache/icw/runs: `~` is expanded for the data a recipe
    reads and writes, and for a model folder (GRPO starts from the SDLP model there)."""
    from icw.models import load_model
    from icw.train.common import DCSArguments
    from icw.train.synthesis import SynthesisConfig

    monkeypatch.setenv("HOME", str(tmp_path))
    model, tok = tiny_qwen
    model.save_pretrained(tmp_path / "runs" / "sdlp")
    tok.save_pretrained(tmp_path / "runs" / "sdlp")
    loaded, _ = load_model("~/runs/sdlp")
    assert loaded.config.hidden_size == model.config.hidden_size
    assert DCSArguments(dataset_name="~/runs/dcs").dataset_name == str(tmp_path / "runs" / "dcs")
    assert SynthesisConfig(output_dir="~/runs/dcs").output_dir == str(tmp_path / "runs" / "dcs")
