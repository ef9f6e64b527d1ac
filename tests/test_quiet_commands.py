"""The shipped commands say nothing a user cannot act on: the CPU launches of docs/training.md print no notice from
accelerate, the shipped synthesis plan raises no warning (its reuse of queries is one line of the run's summary),
the shipped configs use transformers' current option names, and the recipes silence only the third-party warnings
listed with their reasons. The whole toy speedrun, every warning an error, is tests/test_speedrun.py."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from icw.questions import bundled_questions
from icw.recipe_runner import THIRD_PARTY_NOISE, recipe_errors
from icw.train import grpo, sdlp, sft, synthesis

ROOT = Path(__file__).resolve().parents[1]
CPU_CONFIGS = ROOT / "recipes" / "configs" / "smollm2-135m"
NOTICE = "were not passed to `accelerate launch`"


def _documented_launches() -> list[list[str]]:
    """The ``accelerate launch`` options of the commands in docs/training.md's "The CPU recipe" section."""
    section = (ROOT / "docs" / "training.md").read_text().split("## The CPU recipe", 1)[1].split("\n## ", 1)[0]
    lines = section.replace("\\\n", " ").splitlines()
    out = []
    for line in lines:
        if line.startswith(".venv/bin/accelerate launch"):
            words = line.split()
            out.append(words[2:next(i for i, w in enumerate(words) if w.startswith("recipes/") and w.endswith(".py"))])
    return out


def test_the_documented_cpu_launches_print_no_notice(tmp_path):
    launches = _documented_launches()
    assert len(launches) == 2 and all("recipes/accelerate_configs/cpu.yaml" in opts for opts in launches)
    script = tmp_path / "threads.py"
    script.write_text("import os\nprint('threads', os.environ['OMP_NUM_THREADS'])\n")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # unset: what accelerate warns about
    accelerate = str(Path(sys.executable).parent / "accelerate")
    for options in {tuple(o) for o in launches}:
        out = subprocess.run([accelerate, "launch", *options, str(script)], capture_output=True, text=True, cwd=ROOT,
                             env=env, timeout=120)
        assert out.returncode == 0 and "threads 2" in out.stdout, out.stderr[-2000:]
        assert NOTICE not in out.stderr, out.stderr
    # without the option, the same launch prints the notice: the config file cannot carry it
    out = subprocess.run([accelerate, "launch", "--config_file", "recipes/accelerate_configs/cpu.yaml", str(script)],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 0 and (NOTICE in out.stderr) == (os.cpu_count() > 1 and "threads 1" not in out.stdout)


def test_the_shipped_synthesis_plan_reuses_queries_without_a_warning():
    config = synthesis.make_parser().parse_args_and_config(["--config", str(CPU_CONFIGS / "synthesize.yaml")])[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        items = synthesis.plan(config, [q for q, _ in bundled_questions("train")])
    assert len(items) == 3 * (160 + 40)
    line = synthesis.query_use(items)  # said once, in the run's summary
    assert line.startswith("queries: D_H1 480 rows from 92 queries, D_H0 120 rows from 23 queries, none shared")
    assert "reused with other keys" in line


@pytest.mark.parametrize("path", sorted(p for name in ("sdlp", "grpo", "sft")
                                         for p in (ROOT / "recipes" / "configs").glob(f"*/{name}.yaml")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_shipped_training_configs_use_current_option_names(path):
    """transformers 5 renamed gradient_checkpointing to activation_checkpointing; a config parsed with the old
    name (or with trl's default for it) warns on every run."""
    parser = {"sdlp": sdlp.make_parser, "grpo": grpo.make_parser, "sft": sft.make_parser}[path.stem]()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        args = parser.parse_args_and_config(["--config", str(path), "--use_cpu", "true"])[1]
    assert args.activation_checkpointing == args.gradient_checkpointing


def test_recipes_silence_only_the_listed_third_party_warnings(tiny_qwen):
    """trl's GRPO generation reads the model's deprecated ``is_gradient_checkpointing`` (the listed warning): silent
    inside a recipe, as transformers raises it outside; any other warning still shows."""
    model, _ = tiny_qwen
    assert all(reason.strip() for _, _, reason in THIRD_PARTY_NOISE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with recipe_errors(synthesis.make_parser(), "synthesize", exit_on_error=False):
            assert model.is_gradient_checkpointing is False
            warnings.warn("something a user should see", UserWarning, stacklevel=1)
        assert model.is_gradient_checkpointing is False
    assert [(w.category, str(w.message)[:20]) for w in caught] == [
        (UserWarning, "something a user sho"), (FutureWarning, "`is_gradient_checkpo")]
