"""The training recipes on two CPU processes (gloo), launched as a user launches them: `accelerate launch
--config_file recipes/accelerate_configs/cpu-ddp.yaml --num_processes 2 recipes/<recipe>.py ...`, on a tiny random
Qwen3 with the real Qwen3 tokenizer.

A 2-process run logs the curve of a 1-process run with the same global batch (SDLP off- and on-policy, GRPO):
the data order is the sampler's, and sampled answers come from per-row seeds (icw.train.sampling), so how the
batch is split does not change them. (Two things do, as in any data-parallel run, and the data here avoid them:
dropout draws its masks per process, so GRPO's LoRA runs without dropout; and an epoch that does not split into
whole global batches ends with a short batch on one process, which accelerate pads on N processes with rows
from the epoch's start: 12 rows off-policy, 32 relabelled on-policy and 8 GRPO prompts of 2 a step divide evenly.) A 2-process run stopped by SIGTERM on one rank saves one checkpoint that
both ranks agreed on and resumes to the uninterrupted curve. FSDP2 (the shipped recipes/accelerate_configs/
fsdp2.yaml) on CPU processes is refused: accelerate applies FSDP on GPUs only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from icw import ICWKey

ROOT = Path(__file__).resolve().parents[1]
QUERIES = ["Why is the sky blue?", "How do bees make honey?", "What causes tides?", "Why do cats purr?",
           "How do vaccines work?", "What is inflation?", "Why do leaves change colour?", "How do tides form?"]
ANSWER = "Bright skies scatter blue light. Bees buzz between blossoms. Tides track the moon."
#: what a run logs that must not depend on the number of processes
LOGGED = ("loss", "reward", "reward_std", "grad_norm")
#: a rank that signals itself after a step, as a scheduler's SIGTERM reaching one process would
SIGNAL_WRAPPER = """
import os, runpy, signal, sys
from transformers import Trainer, TrainerCallback

STEP, RANK = int(os.environ["ICW_TEST_SIGNAL_AFTER_STEP"]), os.environ["ICW_TEST_SIGNAL_RANK"]

class SignalAfterStep(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == STEP and os.environ.get("RANK", "0") == RANK:
            os.kill(os.getpid(), signal.SIGTERM)

init = Trainer.__init__
def patched(self, *args, **kwargs):
    init(self, *args, **kwargs)
    self.add_callback(SignalAfterStep())
Trainer.__init__ = patched
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def model_and_data(tiny_qwen, tmp_path_factory):
    """The tiny model's folder and a D_cs folder: 8 WIP answers and 2 SA answers under their keys, 2 plain ones."""
    from datasets import Dataset

    model, tok = tiny_qwen
    root = tmp_path_factory.mktemp("multiprocess")
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    rows = [{"family": "wip", "key": ICWKey.create("wip", seed=1_000_000 + i, tokenizer=tok).to_string(),
             "query": q, "response": ANSWER, "label": 1} for i, q in enumerate(QUERIES)]
    rows += [{"family": "sa", "key": ICWKey.create("sa", seed=21_000_000 + i, length=18).to_string(), "query": q,
              "response": ANSWER, "label": 1} for i, q in enumerate(QUERIES[:2])]
    rows += [{"family": "wip", "key": rows[i]["key"], "query": QUERIES[i], "response": "Plain words.", "label": 0}
             for i in (2, 3)]
    (root / "dcs").mkdir()
    Dataset.from_list(rows).to_parquet(root / "dcs" / "data.parquet")
    return root / "model", root / "dcs"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(processes: int, recipe: str, args: list[str], tmp_path: Path, config: str | None = None,
            signal_rank: int | None = None, returncode: int = 0) -> str:
    """``accelerate launch`` of a recipe on 1 (cpu.yaml) or N processes (cpu-ddp.yaml); its stderr."""
    config = config or ("cpu.yaml" if processes == 1 else "cpu-ddp.yaml")
    script = [str(ROOT / "recipes" / f"{recipe}.py")]
    if signal_rank is not None:
        wrapper = tmp_path / "signal_wrapper.py"
        wrapper.write_text(SIGNAL_WRAPPER)
        script = [str(wrapper), *script]
    cmd = [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file",
           str(ROOT / "recipes/accelerate_configs" / config), "--num_processes", str(processes),
           "--main_process_port", str(_free_port()), "--mixed_precision", "no", *script, *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": "1", "ICW_TEST_SIGNAL_AFTER_STEP": "3", "ICW_TEST_SIGNAL_RANK": str(signal_rank)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert (proc.returncode == 0) == (returncode == 0), proc.stdout[-2000:] + proc.stderr[-6000:]
    return proc.stderr


def _args(kind: str, model: Path, dcs: Path, global_batch: int, processes: int) -> tuple[str, list[str]]:
    per_device = str(global_batch // processes)
    common = ["--model_name_or_path", str(model), "--dataset_name", str(dcs), "--max_steps", "6", "--logging_steps",
              "1", "--save_strategy", "steps", "--save_steps", "2", "--resume_from_checkpoint", "last", "--seed", "3",
              "--per_device_train_batch_size", per_device, "--learning_rate", "1e-3"]
    if kind == "grpo":
        return "grpo", ["--config", str(ROOT / "recipes/configs/smollm2-135m/grpo.yaml"), *common, "--num_generations",
                        "2", "--gradient_accumulation_steps", "1", "--max_completion_length", "12",
                        "--min_completion_tokens", "2", "--lora_r", "4", "--lora_alpha", "8", "--lora_dropout", "0",
                        "--families", "wip"]
    sdlp = ["--config", str(ROOT / "recipes/configs/smollm2-135m/sdlp.yaml"), *common, "--max_response_length", "13",
            "--top_k_sa", "50"]
    return "sdlp", sdlp + (["--lmbda", "1.0", "--relabel_keys", "true", "--relabel_copies", "3",
                            "--relabel_families", "wip"] if kind == "sdlp-on-policy" else [])


def _curve(out: Path, step: int = 6) -> list[dict[str, float]]:
    history = json.loads((out / f"checkpoint-{step}" / "trainer_state.json").read_text())["log_history"]
    return [{k: h[k] for k in ("step", *LOGGED) if k in h} for h in history if "loss" in h]


def _same_curve(got: list[dict[str, float]], want: list[dict[str, float]]) -> None:
    assert [g["step"] for g in got] == [w["step"] for w in want] == list(range(1, 7))
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        for name in g:
            assert g[name] == pytest.approx(w[name], rel=1e-3, abs=1e-5), (name, got, want)


@pytest.fixture(scope="module")
def runs(model_and_data, tmp_path_factory):
    """Finished runs, made once per (kind, processes) and shared by the tests."""
    made: dict[tuple[str, int], Path] = {}

    def run(kind: str, processes: int) -> Path:
        if (kind, processes) not in made:
            out = tmp_path_factory.mktemp(f"{kind}-{processes}")
            recipe, args = _args(kind, *model_and_data, global_batch=4, processes=processes)
            _launch(processes, recipe, [*args, "--output_dir", str(out / "run")], out)
            made[kind, processes] = out / "run"
        return made[kind, processes]
    return run


@pytest.mark.parametrize("kind", ["sdlp-off-policy", "sdlp-on-policy", "grpo"])
def test_two_processes_log_the_curve_of_one_with_the_same_global_batch(kind, runs):
    one, two = _curve(runs(kind, 1)), _curve(runs(kind, 2))
    _same_curve(two, one)
    if kind == "grpo":  # the rewards vary, so equal curves mean equal completions, not two zero losses
        assert any(step["reward_std"] > 0 for step in one) and any(step["grad_norm"] > 0 for step in one)
    facts = json.loads((runs(kind, 2) / "icw_training.json").read_text())
    assert facts["processes"] == 2 and facts["parallelism"] == "MULTI_CPU"
    card = (runs(kind, 2) / "README.md").read_text()
    assert "Processes: 2 (MULTI_CPU), so 4 rows an optimizer step." in card


def test_sigterm_on_one_rank_saves_one_agreed_checkpoint_and_resumes_the_curve(model_and_data, runs, tmp_path):
    recipe, args = _args("sdlp-on-policy", *model_and_data, global_batch=4, processes=2)
    out = tmp_path / "run"
    err = _launch(2, recipe, [*args, "--output_dir", str(out)], tmp_path, signal_rank=1,
                  returncode=128 + signal.SIGTERM)
    saved = {p.name: (p / "trainer_state.json").exists() for p in out.glob("checkpoint-*")}
    assert saved == {"checkpoint-2": True, "checkpoint-3": True}, err[-4000:]
    assert not (out / "model.safetensors").exists()  # stopped, not finished
    assert f"stopped by SIGTERM after step 3 of 6: saved {out / 'checkpoint-3'}" in err, err[-4000:]
    # both ranks stopped at the step they agreed on and wrote their random state into the same checkpoint
    assert sorted(p.name for p in (out / "checkpoint-3").glob("rng_state_*.pth")) == ["rng_state_0.pth",
                                                                                       "rng_state_1.pth"]
    _launch(2, recipe, [*args, "--output_dir", str(out)], tmp_path)
    _same_curve(_curve(out), _curve(runs("sdlp-on-policy", 2)))


def test_fsdp2_on_cpu_processes_is_refused_not_silently_data_parallel(model_and_data, tmp_path):
    """accelerate turns FSDP on for GPU (and other accelerator) processes only: the shipped FSDP2 configuration
    on two CPU processes would train as plain data parallel. The recipe says so in one line and trains nothing."""
    recipe, args = _args("sdlp-off-policy", *model_and_data, global_batch=4, processes=2)
    err = _launch(2, recipe, [*args, "--output_dir", str(tmp_path / "run")], tmp_path, config="fsdp2.yaml",
                  returncode=2)
    lines = [line for line in err.splitlines() if line.startswith("icw: error:")]
    assert lines and "asks for FSDP, but accelerate applies it on GPUs only" in lines[0], err[-3000:]
    assert "cpu-ddp.yaml" in lines[0] and not list((tmp_path / "run").glob("checkpoint-*"))
