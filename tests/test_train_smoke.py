"""CPU smoke test of the training recipes through their real entry points (`accelerate launch`
with the CPU config) on a tiny random Qwen3 with the real Qwen3 tokenizer, plus in-process
checks of SDLP (loss falls on a fixed batch; LoRA teacher = adapter disabled) and resumable
synthesis."""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from icw.train.common import checkpoints
from icw.train.sdlp import SDLPConfig, SDLPTrainer
from icw.train.synthesis import SynthesisConfig, synthesize

ROOT = Path(__file__).resolve().parents[1]
QUERIES = ["Why is the sky blue?", "How do bees make honey?", "What causes tides?", "Why do cats purr?",
           "How do vaccines work?", "What is inflation?", "Why do leaves change colour?", "How do tides form?"]


def _launch(script: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    accelerate = Path(sys.executable).parent / "accelerate"
    cmd = [str(accelerate), "launch", "--config_file", str(ROOT / "recipes/accelerate_configs/cpu.yaml"),
           str(ROOT / "recipes" / script), *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "WANDB_DISABLED": "true"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc


@pytest.fixture(scope="module")
def tiny_dir(tiny_qwen, tmp_path_factory):
    model, tok = tiny_qwen
    path = tmp_path_factory.mktemp("tiny-qwen3")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def dcs(tiny_dir, tmp_path_factory):
    """D_cs synthesized through `accelerate launch recipes/synthesize.py` (short answers, small TSP pool)."""
    out = tmp_path_factory.mktemp("dcs")
    queries = out / "queries.txt"
    queries.write_text("\n".join(QUERIES))
    _launch("synthesize.py", "--model_name_or_path", str(tiny_dir), "--output_dir", str(out), "--queries_file",
            str(queries), "--families", "tsp", "wip", "sa", "--num_h1", "1", "--num_h0", "1", "--pool_size", "200",
            "--max_new_tokens", "8", "--batch_size", "4", "--device", "cpu")
    return out


def test_synthesis_writes_dataset_and_statistics(dcs):
    from datasets import Dataset

    ds = Dataset.from_parquet(str(dcs / "data.parquet"))
    assert len(ds) == 6 and set(ds["family"]) == {"tsp", "wip", "sa"} and sorted(ds["label"]) == [0, 0, 0, 1, 1, 1]
    assert {"family", "key", "query", "response", "label", "z", "perplexity"} <= set(ds.column_names)
    assert all(math.isfinite(z) for z in ds["z"])
    stats = json.loads((dcs / "stats.json").read_text())
    assert [s["family"] for s in stats] == ["tsp", "wip", "sa"] and all(s["size_h1"] == 1 for s in stats)


def test_sdlp_recipe_trains_and_checkpoint_reloads(dcs, tiny_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "sdlp"
    results = tmp_path / "results.json"  # what `icw bench report` writes, reduced to the fields a card needs
    results.write_text(json.dumps({"model": "tiny-sdlp", "families": {"wip": {
        "roc_auc": 0.75, "roc_auc_ci": [0.5, 0.9], "tpr_at_fpr": 0.25, "num_positive": 4, "num_negative": 4}}}))
    _launch("sdlp.py", "--model_card_results", str(results), "--config", str(ROOT / "recipes/configs/smollm2-135m/sdlp.yaml"), "--model_name_or_path",
            str(tiny_dir), "--dataset_name", str(dcs), "--output_dir", str(out), "--max_steps", "2",
            "--per_device_train_batch_size", "3", "--logging_steps", "1", "--save_strategy", "steps",
            "--save_steps", "2", "--learning_rate", "1e-3", "--relabel_keys", "false", "--lmbda", "0")
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    losses = [h["loss"] for h in state["log_history"] if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    card = _icw_card(out, dcs, losses, steps=2)
    assert "0.750" in card and "## Evaluation" not in card  # the ICWBench results given to the recipe
    assert "all weights fine-tuned" in card and "learning_rate 0.001" in card and "Recipe: SDLP" in card
    assert "checkpoint saved during the run" in (out / "checkpoint-2" / "README.md").read_text()
    reloaded = AutoModelForCausalLM.from_pretrained(out)
    original = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert not torch.equal(reloaded.model.norm.weight, original.model.norm.weight)  # it trained


def test_grpo_recipe_runs_a_step_with_lora(dcs, tiny_dir, tmp_path):
    out = tmp_path / "grpo"
    _launch("grpo.py", "--config", str(ROOT / "recipes/configs/smollm2-135m/grpo.yaml"), "--model_name_or_path",
            str(tiny_dir), "--dataset_name", str(dcs), "--output_dir", str(out), "--max_steps", "1",
            "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1", "--num_generations", "2",
            "--max_completion_length", "8", "--min_completion_tokens", "2", "--logging_steps", "1", "--use_peft",
            "true", "--lora_r", "4", "--lora_alpha", "8", "--save_steps", "1")
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 4
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_dir), out)
    history = json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())["log_history"]
    card = _icw_card(out, dcs, [h["loss"] for h in history if "loss" in h], steps=1, label=1)
    reward = next(h["reward"] for h in history if "reward" in h)
    assert f"mean reward {reward:.4g} at step 1" in card and "Recipe: GRPO" in card
    logged = next(h for h in history if "reward" in h)  # the per-family diagnostics beside trl's own
    families = {k.split("/")[1] for k in logged if k.startswith("icw/")}
    assert families and families <= {"tsp", "wip", "sa"}, sorted(logged)
    assert all({f"icw/{f}/z", f"icw/{f}/detected", f"icw/{f}/rejected"} <= set(logged) for f in families)
    assert "a LoRA adapter, rank 4, alpha 8" in card and "min_completion_tokens 2" in card
    assert "## Evaluation" in card and "Not evaluated" in card  # no ICWBench run was given: the card says so
    checkpoint_card = (out / "checkpoint-1" / "README.md").read_text()  # PEFT writes its blank template here
    assert "## How it was trained" in checkpoint_card and "More Information Needed" not in checkpoint_card
    # the card's commands parse as printed, and its how-to runs offline as printed
    from icw.cli import build_parser

    commands = card.split("## Evaluation")[1].split("```bash\n")[1].split("```")[0].splitlines()
    assert len(commands) == 4
    for command in commands:
        build_parser().parse_args(shlex.split(command)[1:])
    code = card.split("```python\n")[1].split("```")[0]
    assert str(out) in code and str(tiny_dir) in code
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    z, p, verdict = run.stdout.split()[-3:]
    assert math.isfinite(float(z)) and 0 <= float(p) <= 1 and verdict in ("True", "False")


def _icw_card(out: Path, dcs: Path, losses: list[float], steps: int, label: int | None = None) -> str:
    """The output folder's README.md, checked to be icw's card whose numbers are the run's: steps and losses
    from the trainer state, row counts from D_cs (``label``: only those rows), not PEFT's or trl's card."""
    from datasets import Dataset
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "README.md")
    assert "## How it was trained" in card.text and "More Information Needed" not in card.text
    assert "icw" in card.data.tags and card.data.pipeline_tag == "text-generation"
    assert f"Progress: optimizer step {steps} of {steps} (epoch" in card.text
    assert f"logged loss {losses[0]:.4g} at step 1" in card.text
    rows = Dataset.from_parquet(str(dcs / "data.parquet"))
    for family in ("tsp", "wip", "sa"):
        labels = [v for f, v in zip(rows["family"], rows["label"], strict=True) if f == family]
        h1, h0 = labels.count(1), labels.count(0) if label is None else 0
        assert f"{family.upper()} {h1} D_H1{f' + {h0} D_H0' if h0 else ''} (distinct keys: {h1})" in card.text
    assert card.text.index("TSP 1 D_H1") < card.text.index("WIP 1 D_H1") < card.text.index("SA 1 D_H1")
    facts = json.loads((out / "icw_training.json").read_text())
    assert facts["progress"]["global_step"] == steps and facts["progress"]["final"]
    return card.text


def test_icw_train_sft_runs_a_step(dcs, tiny_dir, tmp_path):
    """`icw train sft` (a real subprocess) trains the SFT baseline on D_H1 and saves a model that reloads."""
    from transformers import AutoModelForCausalLM

    out = tmp_path / "sft"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "-m", "icw.cli", "train", "sft", "--config",
                           str(ROOT / "recipes/configs/smollm2-135m/sft.yaml"), "--model_name_or_path", str(tiny_dir),
                           "--dataset_name", str(dcs), "--output_dir", str(out), "--max_steps", "1",
                           "--per_device_train_batch_size", "2", "--max_length", "256", "--save_strategy", "no"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    AutoModelForCausalLM.from_pretrained(out)
    card = (out / "README.md").read_text()  # icw's training card, as SDLP and GRPO write it, not trl's template
    assert "## How it was trained" in card and "More Information Needed" not in card
    facts = json.loads((out / "icw_training.json").read_text())
    assert facts["progress"]["global_step"] == 1 and facts["progress"]["final"]


def _rows(tok):
    from icw import ICWKey

    keys = [ICWKey.create("wip", seed=11, tokenizer=tok), ICWKey.create("sa", seed=12),
            ICWKey.create("tsp", seed=13, tokenizer=tok, pool_size=200)]
    answers = ["Bees gather nectar and bring it home.", "Tides follow the moon. Oceans bulge.", "Cats purr softly."]
    rows = [{"family": k.family, "key": k.to_string(), "query": q, "response": a, "label": 1}
            for k, q, a in zip(keys, QUERIES[:3], answers, strict=True)]
    rows.append({"family": "wip", "key": keys[0].to_string(), "query": QUERIES[3], "response": "No bias here.",
                 "label": 0})
    return rows


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_sdlp_loss_falls_on_a_fixed_batch(tiny_qwen, tmp_path, lora):
    from datasets import Dataset
    from peft import LoraConfig

    from icw.testing import tiny_random_model

    _, tok = tiny_qwen
    model = tiny_random_model("qwen3").train()
    config = SDLPConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, top_k_tsp=50, top_k_sa=50,
                        loss_chunk_size=64)
    peft_config = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear") if lora else None
    trainer = SDLPTrainer(model, config, train_dataset=Dataset.from_list(_rows(tok)), processing_class=tok,
                          peft_config=peft_config)
    assert (trainer.teacher_model is None) == lora  # LoRA: one copy of the weights, adapter disabled for the teacher
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    h0 = trainer.data_collator([trainer.train_dataset[3]])
    # before training the student equals the teacher: on a D_H0 row (same prompt, no delta) the loss is 0
    assert trainer.compute_loss(trainer.model, h0).item() == pytest.approx(0.0, abs=1e-4)
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=3e-2 if lora else 3e-3)
    losses = []
    for _ in range(6):
        loss = trainer.compute_loss(trainer.model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)
    # full fine-tuning fits the batch quickly; a rank-8 adapter on a 64-wide random model moves less, but moves
    assert losses[-1] < (0.97 if lora else 0.8) * losses[0], losses
    assert losses[-1] < losses[1] < losses[0], losses
    if not lora:
        assert all(p.grad is None for p in trainer.teacher_model.parameters())


def test_synthesis_resumes_without_redoing_finished_rows(tiny_qwen, tmp_path):
    model, tok = tiny_qwen
    config = SynthesisConfig(output_dir=str(tmp_path), families=["sa"], num_h1=[2], num_h0=[1], max_new_tokens=4,
                             batch_size=1, perplexity=False)
    synthesize(config, model, tok, QUERIES)
    log = tmp_path / "rows.jsonl"
    lines = log.read_text().splitlines()
    assert len(lines) == 3
    log.write_text(lines[0] + "\n")  # as if interrupted after the first row
    dataset = synthesize(config, model, tok, QUERIES)
    assert len(dataset) == 3 and log.read_text().splitlines()[0] == lines[0]
    assert sorted(dataset["id"]) == sorted(json.loads(line)["id"] for line in lines)


# a recipe run in a real subprocess that SIGKILLs itself at a known point, so the test never depends on timing:
# right after the given optimizer step (between two checkpoints), or while saving that step's checkpoint (after
# its weights and optimizer, before its trainer_state.json); or that sends itself SIGINT / SIGTERM after the step
# (Ctrl-C, a scheduler's time limit), as a foreground process does (SIGINT is not ignored, whatever the test runner's)
KILL_WRAPPER = """
import os, runpy, signal, sys
from transformers import Trainer, TrainerCallback

STEP, WHERE = int(os.environ["ICW_TEST_KILL_AFTER_STEP"]), os.environ["ICW_TEST_KILL_WHERE"]
signal.signal(signal.SIGINT, signal.default_int_handler)

class KillAfterStep(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if WHERE in ("step", "SIGINT", "SIGTERM") and state.global_step == STEP:
            os.kill(os.getpid(), getattr(signal, "SIGKILL" if WHERE == "step" else WHERE))

init, save_rng_state = Trainer.__init__, Trainer._save_rng_state
def patched(self, *args, **kwargs):
    init(self, *args, **kwargs)
    self.add_callback(KillAfterStep())
def killed_while_saving(self, output_dir):
    if WHERE == "save" and self.state.global_step == STEP:
        os.kill(os.getpid(), signal.SIGKILL)
    save_rng_state(self, output_dir)
Trainer.__init__, Trainer._save_rng_state = patched, killed_while_saving
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _run_recipe(script: str, args: list[str], tmp_path: Path, kill_after: int | None = None,
                where: str = "step", returncode: int | None = None) -> tuple[int, str]:
    wrapper = tmp_path / "kill_wrapper.py"
    wrapper.write_text(KILL_WRAPPER)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "ICW_TEST_KILL_AFTER_STEP": str(kill_after or -1), "ICW_TEST_KILL_WHERE": where}
    proc = subprocess.run([sys.executable, str(wrapper), str(ROOT / "recipes" / script), *args],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    expected = returncode if returncode is not None else -9 if kill_after else 0
    if kill_after and where.startswith("SIG"):  # stopped cleanly: exit status 128 + the signal's number
        expected = 128 + getattr(signal, where)
    assert proc.returncode == expected, proc.stderr[-4000:]
    return proc.returncode, proc.stderr


def _history(out: Path, step: int) -> list[tuple[int, float, float]]:
    state = json.loads((out / f"checkpoint-{step}" / "trainer_state.json").read_text())
    return [(h["step"], h["loss"], h.get("reward", 0.0)) for h in state["log_history"] if "loss" in h]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The uninterrupted 6-step run of each recipe, made once per test process and shared by the kill cases (the
    runs are seeded, so every case would make the same one)."""
    runs: dict[str, Path] = {}

    def run(recipe: str, args: list[str]) -> Path:
        if recipe not in runs:
            tmp = tmp_path_factory.mktemp(f"{recipe}-uninterrupted")
            _run_recipe(f"{recipe}.py", [*args, "--output_dir", str(tmp / "run")], tmp)
            runs[recipe] = tmp / "run"
        return runs[recipe]
    return run


@pytest.mark.parametrize(("recipe", "where"), [("sdlp", "step"), ("grpo", "step"), ("sdlp", "save"),
                                               ("sdlp", "SIGINT"), ("grpo", "SIGTERM")])
def test_killed_run_resumes_with_the_same_curve(recipe, where, dcs, tiny_dir, uninterrupted, tmp_path):
    """A run SIGKILLed after step 3 (checkpoints every 2 steps), or while saving checkpoint-4, and started again
    with the same command resumes from the last complete checkpoint and ends with the loss (and reward) curve of
    an uninterrupted run, step for step; the command run again on the finished run is refused, and resumed to a
    higher ``--max_steps`` with another ``--save_steps`` it saves as the new command says, not as the checkpoint did.
    A run sent SIGINT or SIGTERM after step 3 saves checkpoint-3 first, says so, and resumes from it."""
    if recipe == "sdlp":
        args = ["--config", str(ROOT / "recipes/configs/smollm2-135m/sdlp.yaml"), "--per_device_train_batch_size",
                "2", "--learning_rate", "1e-3", "--relabel_keys", "true", "--relabel_copies", "2"]
    else:
        args = ["--config", str(ROOT / "recipes/configs/smollm2-135m/grpo.yaml"), "--per_device_train_batch_size", "2",
                "--gradient_accumulation_steps", "1", "--num_generations", "2", "--max_completion_length", "8",
                "--min_completion_tokens", "2", "--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--learning_rate", "1e-3"]
    args += ["--model_name_or_path", str(tiny_dir), "--dataset_name", str(dcs), "--max_steps", "6", "--logging_steps",
             "1", "--save_strategy", "steps", "--save_steps", "2", "--resume_from_checkpoint", "last", "--seed", "3"]
    whole, killed = uninterrupted(recipe, args), tmp_path / "killed"
    err = _run_recipe(f"{recipe}.py", [*args, "--output_dir", str(killed)], tmp_path, 4 if where == "save" else 3,
                      where)[1]
    saved = {p.name: (p / "trainer_state.json").exists() for p in killed.glob("checkpoint-*")}
    if where == "step":  # died between checkpoints
        assert saved == {"checkpoint-2": True}
    elif where == "save":  # died inside checkpoint-4: its weights are there, its trainer_state.json is not
        assert saved == {"checkpoint-2": True, "checkpoint-4": False} and any((killed / "checkpoint-4").iterdir())
    else:  # the step in flight was saved, and no final model
        assert saved == {"checkpoint-2": True, "checkpoint-3": True}
        assert not any((killed / name).exists() for name in ("model.safetensors", "adapter_model.safetensors"))
        assert f"stopped by {where} after step 3 of 6: saved {killed / 'checkpoint-3'}" in err, err[-3000:]
    if recipe == "sdlp":  # the shipped recipe samples 8 steps' rows at once: a checkpoint inside the group keeps the
        # rest of it, so the resumed run trains on what the uninterrupted one sampled
        assert (killed / "checkpoint-2" / "sdlp_rollouts_0.pt").is_file()
    err = _run_recipe(f"{recipe}.py", [*args, "--output_dir", str(killed)], tmp_path)[1]
    assert ("checkpoint-4: no trainer_state.json, so saving was interrupted" in err) == (where == "save"), err[-3000:]
    expected, resumed = _history(whole, 6), _history(killed, 6)
    assert [s for s, _, _ in resumed] == [1, 2, 3, 4, 5, 6]
    for column in (1, 2):  # loss, reward
        assert [r[column] for r in resumed] == pytest.approx([e[column] for e in expected], rel=1e-4, abs=1e-6)
    if where == "step":  # the same command once more on the finished run: refused, where the Trainer would train a
        # seventh step (on the resumed run, so the shared uninterrupted one stays as it was)
        err = _run_recipe(f"{recipe}.py", [*args, "--output_dir", str(killed)], tmp_path, returncode=1)[1]
        assert "checkpoint-6 is at step 6 of --max_steps 6: this run is finished" in err, err[-3000:]
        assert sorted(p.name for p in killed.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
        if recipe == "sdlp":  # resumed further with another --save_steps: this command's, not the checkpoint's
            _run_recipe(f"{recipe}.py", [*args, "--output_dir", str(killed), "--max_steps", "8", "--save_steps", "1"],
                        tmp_path)
            assert sorted(checkpoints(killed, complete_only=False)) == [2, 4, 6, 7, 8]
