"""Model cards from ICWBench results: model-index metadata that huggingface_hub parses back."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from huggingface_hub import ModelCard

from icw.cards import PAPER_NUM_QUERIES, eval_results, eval_results_files, model_card, write_training_card
from icw.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
RESULTS = {
    "model": "my-org/SmolLM2-135M-ICW", "base_model": None, "adapter": None, "dataset": "my-org/ICWBench",
    "mode": "instruction", "max_new_tokens": 600,
    "families": {
        "tsp": {"num_positive": 50, "num_negative": 50, "roc_auc": 0.913, "roc_auc_ci": [0.85, 0.96],
                "tpr_at_fpr": 0.42, "tpr_at_fpr_ci": [0.2, 0.6], "fpr": 0.01, "mean_z_positive": 3.1, "mean_z_negative": 0.1, "ppl": 5.21,
                "ppl_by_model": {"smollm2": 5.21}, "ppl_median_by_model": {"smollm2": 3.94},
                "looping_by_model": {"smollm2": 0.06},
                "judge": {"relevance": 4.1, "clarity": 4.0, "informativeness": 3.8, "factual_correctness": 3.9},
                "attacks": {"deletion": {"roc_auc": 0.8, "tpr_at_fpr": 0.2}}},
        "wip": {"num_positive": 50, "num_negative": 50, "roc_auc": 0.64, "roc_auc_ci": [0.53, 0.74],
                "tpr_at_fpr": 0.06, "tpr_at_fpr_ci": [0.0, 0.14], "fpr": 0.01, "mean_z_positive": 0.9, "mean_z_negative": 0.0, "ppl": None, "judge": None,
                "attacks": {}},
    },
}


@pytest.fixture()
def results_file(tmp_path) -> Path:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(RESULTS), encoding="utf-8")
    return path


def test_card_round_trips_through_huggingface_hub(results_file, tmp_path):
    assert cli_main(["hub", "model-card", str(results_file), "--out", str(tmp_path / "card"),
                     "--license", "apache-2.0"]) == 0
    card = ModelCard.load(tmp_path / "card" / "README.md")
    data = card.data
    assert data.model_name == "my-org/SmolLM2-135M-ICW" and data.library_name == "transformers"
    assert data.license == "apache-2.0" and data.datasets == ["my-org/ICWBench"] and "icw" in data.tags
    got = {(r.dataset_config, r.metric_type): r.metric_value for r in data.eval_results}
    assert got[("tsp", "roc_auc")] == 0.913 and got[("tsp", "tpr_at_fpr")] == 0.42
    assert got[("tsp", "perplexity")] == 5.21 and got[("tsp", "judge_clarity")] == 4.0
    assert got[("wip", "roc_auc")] == 0.64 and ("wip", "perplexity") not in got  # null values are left out
    assert all(r.dataset_type == "my-org/ICWBench" and r.dataset_split == "test" for r in data.eval_results)
    assert "| TSP (Token-Set Preference) | 50/50 | 0.913 | [0.850, 0.960] | TPR@1%FPR: 0.420 |" in card.text
    assert "| [0.200, 0.600] | 5.21 | 3.94 | 0.06 | 3.95 |" in card.text  # PPL mean, median, looping, judge
    assert "deletion: AUC 0.800" in card.text
    assert "Learning to Follow In-Context Watermark Instructions via Self-Distillation" in card.text
    # the Hub's .eval_results/*.yaml files
    files = sorted(p.name for p in (tmp_path / "card" / ".eval_results").iterdir())
    assert files == ["icwbench_perplexity.yaml", "icwbench_roc_auc.yaml", "icwbench_tpr_at_fpr.yaml"]
    auc = yaml.safe_load((tmp_path / "card" / ".eval_results" / "icwbench_roc_auc.yaml").read_text())
    assert [(e["dataset"]["id"], e["dataset"]["task_id"], e["value"]) for e in auc] == [
        ("my-org/ICWBench", "tsp", 0.913), ("my-org/ICWBench", "wip", 0.64)]


def test_adapter_card_has_peft_metadata(results_file):
    card = model_card(results_file, base_model="HuggingFaceTB/SmolLM2-135M-Instruct", adapter="peft/lora",
                      model_id="my-org/icw-lora")
    parsed = ModelCard(str(card))  # re-parse the rendered text
    assert parsed.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert parsed.data.library_name == "peft" and {"peft", "lora"} <= set(parsed.data.tags)
    assert parsed.data.eval_results[0].metric_value == 0.913
    assert "peft/lora adapter for [HuggingFaceTB/SmolLM2-135M-Instruct]" in parsed.text


def test_generator_script(results_file, tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "model_cards" / "generate.py"), str(results_file), "--out",
                          str(tmp_path / "c"), "--adapter", "--base-model", "org/base"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert ModelCard.load(tmp_path / "c" / "README.md").data.base_model == "org/base"


def test_bad_results_give_clear_errors(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    assert cli_main(["hub", "model-card", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    with pytest.raises(ValueError, match="non-empty 'families'"):
        model_card({"model": "m", "families": {}})
    with pytest.raises(ValueError, match="unknown ICW family"):
        model_card({"model": "m", "families": {"xyz": {"roc_auc": 0.5}}})
    with pytest.raises(ValueError, match="needs --base-model"):
        model_card({**RESULTS, "adapter": "peft/lora"})
    with pytest.raises(ValueError, match="'model' field"):
        eval_results_files({"families": {"sa": {"roc_auc": 0.5}}})
    with pytest.raises(ValueError, match=r"families.sa.ppl_median_by_model.smollm2 must be a number or null"):
        model_card({"model": "m", "families": {"sa": {"roc_auc": 0.5, "ppl_median_by_model": {"smollm2": "4.2"}}}})


def test_a_run_on_a_local_dataset_folder_names_that_folder(tmp_path):
    local = tmp_path / "icwbench"
    local.mkdir()
    card = model_card({**RESULTS, "dataset": str(local)})
    assert card.data.datasets is None  # no Hub dataset the run did not use
    assert {r.dataset_type for r in card.data.eval_results} == {"icwbench"}
    assert f"the local folder `{local}`" in card.text and "icw/ICWBench" not in card.text
    assert "cannot be reproduced from the Hub" in card.text
    files = eval_results_files({**RESULTS, "dataset": "./icwbench"})
    assert {e["dataset"]["id"] for entries in files.values() for e in entries} == {"icwbench"}
    assert model_card(RESULTS, dataset_id="other-org/Bench").data.datasets == ["other-org/Bench"]


def _report_results(tmp_path, mode: str, adapter: str | None, base_model: str | None) -> Path:
    """results.json as `icw bench report` writes it, from a real run folder's config and records."""
    from icw.bench.report import summarize

    run = tmp_path / f"run-{mode}"
    run.mkdir()
    rng = __import__("numpy").random.default_rng(0)
    config = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "base_model": base_model, "adapter": adapter,
              "dataset": str(tmp_path / "icwbench"), "mode": mode, "max_new_tokens": 120}
    (run / "run.json").write_text(json.dumps(config), encoding="utf-8")
    records = []
    for i in range(30):
        for role, z in (("positive", rng.normal(2.0, 1.0)), ("negative", rng.normal(0.0, 1.0))):
            records.append({"model": config["model"], "family": "wip", "id": f"q{i}", "role": role,
                            "mode": mode if role == "positive" else "plain", "attack": "none", "z_score": float(z),
                            "p_value": 0.5, "text": "x", "key": "k"})
    (run / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    out = tmp_path / f"results-{mode}.json"
    out.write_text(json.dumps(summarize(run, num_bootstrap=50)), encoding="utf-8")
    return out


def test_bias_mode_card_of_the_untrained_base_model_says_what_ran(tmp_path, capsys):
    (tmp_path / "icwbench").mkdir()
    results = _report_results(tmp_path, "bias", adapter=None, base_model=None)
    assert cli_main(["hub", "model-card", str(results), "--out", str(tmp_path / "card")]) == 0
    card = ModelCard.load(tmp_path / "card" / "README.md")
    text = card.text
    assert card.data.library_name == "transformers" and card.data.datasets is None
    assert "adapter" not in text.split("## What was run")[0]  # no adapter claimed
    assert "trained to follow" not in text and "answers to instructed queries" not in text
    assert "no adapter, no ICW training recorded" in text
    assert "Positives are answers to the plain queries decoded with the key's logit bias" in text
    assert "Bias mode measures the verifiers and the logit bias, not instruction following" in text
    assert f"the local folder `{tmp_path / 'icwbench'}`" in text and "icw/ICWBench" not in text
    assert "WIP 30/30" in text and "Small samples" in text
    assert "pip install icw" not in text and "not on PyPI" in text


def test_adapter_instruction_card_says_what_ran(tmp_path):
    (tmp_path / "icwbench").mkdir()
    results = _report_results(tmp_path, "instruction", adapter="/runs/sdlp-wip/adapter",
                              base_model="HuggingFaceTB/SmolLM2-135M-Instruct")
    card = model_card(results, model_id="my-org/icw-lora")
    assert card.data.library_name == "peft" and card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert "a peft/lora adapter over `HuggingFaceTB/SmolLM2-135M-Instruct`" in card.text
    assert "Positives are answers to queries that carry the key's ICW instruction" in card.text
    assert "Bias mode" not in card.text and "WIP 30/30" in card.text


def _generator():
    """``model_cards/generate.py`` as a module."""
    spec = importlib.util.spec_from_file_location("model_cards_generate", ROOT / "model_cards" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_published_cards_are_what_their_kept_results_give():
    """Each published card (a model_cards/<model>/ folder with card.yaml) keeps the results.json it is
    generated from, and its README.md and .eval_results are exactly what generate.py makes of them."""
    generate = _generator()
    folders = generate.published_cards()
    assert "smollm2-135m-instruct" in {f.name for f in folders}  # at least the base model's card
    check = subprocess.run([sys.executable, str(ROOT / "model_cards" / "generate.py"), "--check"],
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count("up to date") == len(folders)
    from icw.cli import build_parser

    for folder in folders:
        options = generate.card_options(folder)
        card = ModelCard.load(folder / "README.md")
        want = {(r.dataset_config, r.metric_type): r.metric_value
                for r in eval_results(folder / "results.json", options.get("dataset_id"))}
        assert want and {(r.dataset_config, r.metric_type): r.metric_value for r in card.data.eval_results} == want
        assert options.get("commands"), f"{folder.name}/card.yaml must say how its results were made"
        for command in options["commands"]:
            assert command in card.text
            words = shlex.split(command)
            if Path(words[0]).name == "icw":
                build_parser().parse_args(words[1:])  # the card's commands run as printed


def test_generate_check_finds_a_stale_card(tmp_path):
    generate = _generator()
    folder = tmp_path / "card"
    shutil.copytree(ROOT / "model_cards" / "smollm2-135m-instruct", folder)
    assert generate.stale_files(folder) == []
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    results["families"]["wip"]["roc_auc"] = 0.987
    (folder / "results.json").write_text(json.dumps(results), encoding="utf-8")
    assert {"README.md", ".eval_results/icwbench_roc_auc.yaml"} <= set(generate.stale_files(folder))
    assert generate.regenerate([folder], check=True) == 1
    assert generate.regenerate([folder]) == 0 and generate.stale_files(folder) == []
    assert any(r.metric_value == 0.987 for r in ModelCard.load(folder / "README.md").data.eval_results)
    (folder / "card.yaml").write_text("model_id: m\nlicence: mit\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown keys \\['licence'\\]"):
        generate.card_options(folder)


def test_base_row_is_named_the_base_model_and_counts_come_from_the_results():
    wip = {**RESULTS["families"]["wip"], "num_positive": 37, "num_negative": 41}
    base = model_card({**RESULTS, "model": "HuggingFaceTB/SmolLM2-135M-Instruct", "families": {"wip": wip}},
                      base_model="smollm2")  # icw's embedded SmolLM2 is the same base model
    assert "the base model itself (no adapter, untrained for ICW)" in base.text and "derived from" not in base.text
    assert base.data.base_model is None  # a model is not its own base on the Hub
    assert "WIP 37/41" in base.text and "477" not in base.text
    assert f"the paper evaluates {PAPER_NUM_QUERIES} queries per family" in base.text
    tuned = model_card(RESULTS, base_model="org/base")
    assert "`my-org/SmolLM2-135M-ICW`, fine-tuned from `org/base`" in tuned.text and tuned.data.base_model == "org/base"


TRAINING = {"recipe": "sdlp", "model_id": "runs/sdlp-wip", "output_dir": "runs/sdlp-wip", "base_model": "smollm2",
            "adapter": {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]},
            "dataset": {"name": "data/dcs", "split": None, "max_rows": None}, "families": ["wip"],
            "rows": {"wip": {"h1": 123, "h0": 45, "keys": 120}}, "keys": "each D_H1 answer under its own key.",
            "settings": {"learning_rate": 0.0002}, "versions": {"icw": "0.1.0"},
            "progress": {"global_step": 60, "max_steps": 60, "epoch": 2.0, "final": True, "train_loss": 3.25,
                         "loss": [[10, 40.5], [60, 12.25]], "reward": None}}


def test_a_training_card_says_it_was_not_evaluated_until_results_come(results_file, tmp_path):
    out = tmp_path / "sdlp-wip"
    text = write_training_card(TRAINING, out).read_text(encoding="utf-8")
    card = ModelCard(text)
    assert card.data.library_name == "peft" and card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert not card.data.eval_results and "sdlp" in card.data.tags
    assert "Not evaluated yet" in text and "## Evaluation" in text
    assert "WIP 123 D_H1 + 45 D_H0 (distinct keys: 120)" in text and "rank 8, alpha 16, on q_proj, v_proj" in text
    assert "Progress: optimizer step 60 of 60 (epoch 2.00); logged loss 40.5 at step 10 -> 12.25 at step 60" in text
    assert "mean training loss 3.25" in text and "learning_rate 0.0002" in text
    # its evaluation commands, run as printed, end with `icw hub model-card ... --out` on this folder: the
    # results then join the card and the training section stays
    assert f".venv/bin/icw hub model-card runs/eval-sdlp-wip/results.json --out {TRAINING['output_dir']}" in text
    assert cli_main(["hub", "model-card", str(results_file), "--out", str(out)]) == 0
    text = (out / "README.md").read_text(encoding="utf-8")
    assert "## How it was trained" in text and "WIP 123 D_H1" in text and "Not evaluated" not in text
    assert "| WIP (Word-Initial Preference) | 50/50 | 0.640 |" in text
    assert "Evaluated on ICWBench in instruction mode" in text


def _stage(label: str, auc: float, ppl: float, paired: dict | None = None) -> dict:
    stats = {**RESULTS["families"]["wip"], "roc_auc": auc, "verdict_tpr": auc - 0.4, "verdict_fpr": 0.02}
    return {"label": label, "run_dir": f"runs/eval/{label}", "model": "m", "families": {"wip": stats},
            "median_ppl": {"wip": ppl}, **({"paired": {"wip": paired}} if paired else {})}


STAGES = {"alpha": 0.01, "stages": [
    _stage("Base", 0.52, 3.58),
    _stage("+SDLP", 0.91, 4.50, {"num_pairs": 50, "mean_z_change": 2.1, "wilcoxon_p": 1e-8, "flagged_only_before": 1,
                                 "flagged_only_after": 20, "mcnemar_p": 2e-5, "ppl_ratio": 1.26, "ppl_ratio_p": 0.001})]}


def test_a_trained_models_published_card_shows_how_it_was_trained_and_its_stages(results_file, tmp_path):
    """A card folder that keeps its training run's icw_training.json and icw bench compare's stages.json beside
    results.json: generate.py renders "How it was trained" and the paired stage table, and --check agrees."""
    generate = _generator()
    folder = tmp_path / "smollm2-135m-icw"
    folder.mkdir()
    shutil.copy(results_file, folder / "results.json")
    (folder / "icw_training.json").write_text(json.dumps(TRAINING), encoding="utf-8")
    (folder / "stages.json").write_text(json.dumps(STAGES), encoding="utf-8")
    (folder / "card.yaml").write_text("model_id: my-org/SmolLM2-135M-ICW\nlicense: apache-2.0\n"
                                      "commands:\n  - bash scripts/speedrun.sh\n", encoding="utf-8")
    assert generate.regenerate([folder]) == 0 and generate.stale_files(folder) == []
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert "## How it was trained" in text and "WIP 123 D_H1" in text and "## Training stages" in text
    assert "| Base | 50 + 50 | 0.520 (0.53-0.74) |" in text
    assert "| +SDLP | 50 + 50 | 0.910 (0.53-0.74) |" in text and "4.50 (1.26x)" in text
    assert "flagged only after 20 vs only before 1 (McNemar p 2e-05); PPL x1.26 (p 0.001)" in text
    assert cli_main(["hub", "model-card", str(results_file), "--out", str(tmp_path / "cli"),
                     "--stages", str(folder / "stages.json")]) == 0  # what scripts/speedrun.sh runs
    assert "flagged only after 20" in (tmp_path / "cli" / "README.md").read_text(encoding="utf-8")
    torn = json.loads(json.dumps(STAGES))
    del torn["stages"][1]["paired"]["wip"]["mcnemar_p"]
    with pytest.raises(ValueError, match=r"stage '\+SDLP' paired.wip needs the numbers .*mcnemar_p"):
        model_card(RESULTS, stages=torn)
    (folder / "stages.json").write_text(json.dumps({"stages": [{"label": "Base"}]}), encoding="utf-8")
    with pytest.raises(ValueError, match="stages.json: expected the output of icw bench compare"):
        generate.stale_files(folder)


def test_published_cards_how_to_runs_offline_as_printed(tmp_path):
    """The "How to use" block of every published card runs offline (no Hub download) and prints z, p, verdict."""
    from icw.models import load_tokenizer
    from icw.testing import tiny_random_model

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    generator = _generator()
    for folder in generator.published_cards():
        code = (folder / "README.md").read_text(encoding="utf-8").split("## How to use")[1]
        code = code.split("```python\n")[1].split("```")[0]
        load_from, env = generator.card_options(folder).get("load_from"), dict(env)
        if load_from:  # no published weights: the folder the card's commands write, here a tiny stand-in under $HOME
            assert f'load_model("{load_from}")' in code and load_from.startswith("~/")
            env["HOME"] = str(tmp_path / folder.name)
            target = Path(env["HOME"]) / load_from[2:]
            tiny_random_model("smollm2").save_pretrained(target)
            load_tokenizer("smollm2").save_pretrained(target)
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env,
                             cwd=tmp_path)
        assert run.returncode == 0, f"{folder.name}: {run.stderr[-3000:]}"
        z, p, verdict = run.stdout.split()[-3:]
        assert float(z) == float(z) and 0 <= float(p) <= 1 and verdict in ("True", "False")
