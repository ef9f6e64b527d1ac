"""Model cards from ICWBench results: model-index metadata that huggingface_hub parses back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from huggingface_hub import ModelCard

from icw.cards import eval_results_files, model_card
from icw.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
RESULTS = {
    "model": "my-org/SmolLM2-135M-ICW", "base_model": None, "adapter": None, "dataset": "my-org/ICWBench",
    "mode": "instruction", "max_new_tokens": 600,
    "families": {
        "tsp": {"num_positive": 50, "num_negative": 50, "roc_auc": 0.913, "roc_auc_ci": [0.85, 0.96],
                "tpr_at_fpr": 0.42, "tpr_at_fpr_ci": [0.2, 0.6], "fpr": 0.01, "mean_z_positive": 3.1, "mean_z_negative": 0.1, "ppl": 5.21,
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


def test_a_run_on_a_local_dataset_folder_cites_the_hub_dataset(tmp_path):
    local = tmp_path / "icwbench"
    local.mkdir()
    card = model_card({**RESULTS, "dataset": str(local)})
    assert card.data.datasets == ["icw/ICWBench"]
    assert {r.dataset_type for r in card.data.eval_results} == {"icw/ICWBench"}
    files = eval_results_files({**RESULTS, "dataset": "./icwbench"})
    assert {e["dataset"]["id"] for entries in files.values() for e in entries} == {"icw/ICWBench"}
    assert model_card(RESULTS, dataset_id="other-org/Bench").data.datasets == ["other-org/Bench"]
