"""Each benchmark script's ``main(["--quick"])`` runs in-process, so the scripts cannot rot."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"icw_benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _rows(printed: str) -> list[list[str]]:
    """Cells of the markdown table rows (header and separator excluded)."""
    lines = [line for line in printed.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]


def test_common_human_text():
    common = _load("_common")
    passages = common.human_passages()
    sources = {s for s, _ in passages}
    assert sources == {"lee_background", "lee", "wikipedia"}
    assert sum(s == "lee_background" for s, _ in passages) == 300
    wiki = common.wikipedia_paragraphs()
    assert len(wiki) > 3000 and all(len(p.split()) > common.MIN_WIKI_WORDS for p in wiki)
    assert not any("[[" in p or "{{" in p or "'''" in p for p in wiki)  # markup stripped
    assert common.strip_wiki_markup("'''Bold''' [[Link|shown]] text{{cite|x}}<ref>r</ref>.\n== H ==") == ["Bold shown text."]


def test_verify_speed_quick(capsys, qwen3):
    results = _load("verify_speed").main(["--quick"])
    printed = capsys.readouterr().out
    rows = [r for r in _rows(printed) if r[0] not in ("SA path", "---")]  # the second table's header too
    assert [r[0] for r in rows[:3]] == ["tsp", "wip", "sa"]
    assert [r[0].split(" ")[0] for r in rows[3:]] == ["`icw.verify`", "`icw", "`icw", "reference"]
    assert "SA (N=1000)" in printed and "TSP within 1.3x" in printed and "WIP within 1.3x" in printed
    assert "SA through `icw detect` >= 500x" in printed
    assert results["tsp"]["max_abs_dz"] == 0.0  # same statistic as the reference (checked in the script too)
    assert all(results[f]["icw"] > 0 for f in ("tsp", "wip", "sa"))
    assert results["sa_cli"]["stderr_lines"] <= 1 and results["sa_cli"]["cli"] > 0  # a summary, not a note per text
    texts = _load("_common").texts_of_tokens(qwen3, 2, 600)
    assert [len(qwen3(t, add_special_tokens=False)["input_ids"]) for t in texts] == [600, 600]


def test_cli_startup_quick(capsys):
    results = _load("cli_startup").main(["--quick"])
    rows = _rows(capsys.readouterr().out)
    assert [r[0] for r in rows] == ["cold", "warm"]
    assert all(results[s]["end to end"] > 0 and results[s]["vocab"] > 0 for s in ("cold", "warm"))


def test_fpr_audit_quick(capsys):
    rows = _load("fpr_audit").main(["--quick", "--no-progress"])
    printed = capsys.readouterr().out
    table = _rows(printed)
    assert [(r[0], r[1]) for r in table] == [("tsp", "qwen3"), ("tsp", "gpt2"), ("wip", "qwen3"), ("wip", "gpt2"),
                                            ("sa", "any (tokenizer-free)")]
    assert all(r["tests"] == 30 and 0.0 <= r["fpr_exact"] <= 1.0 for r in rows)
    assert all(re.fullmatch(r"\d+\.\d\d% \(\d+\)", r[5]) for r in table)


@pytest.mark.slow
def test_processor_overhead_quick(capsys):
    import torch

    threads = torch.get_num_threads()
    try:  # one thread: two would oversubscribe a busy 2-core CI machine
        speeds = _load("processor_overhead").main(["--quick", "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
    printed = capsys.readouterr().out
    table = _rows(printed)
    configs = ["none", "tsp", "wip", "sa", "hf-watermark"]
    assert [(r[0], r[1]) for r in table] == [(b, c) for b in ("1", "8") for c in configs]
    assert all(m["wall"] > 0 and m["cpu"] > 0 and m["inside"] >= 0 for m in speeds.values())
    assert all(speeds[(b, c)]["inside"] > 0 for b in (1, 8) for c in configs[1:])  # the wrapper saw the calls
    assert "SA at batch 8" in printed


def test_bench_throughput_tiny(capsys):
    rates = _load("bench_throughput").main(["--tiny", "--num-queries", "4", "--batch-size", "4",
                                            "--max-new-tokens", "3", "--repeats", "1", "--score-repeats", "1"])
    printed = capsys.readouterr().out
    assert "| transformers, batch 4 |" in printed and "| transformers, one at a time |" in printed
    assert [r[0] for r in _rows(printed)][-3:] == ["TSP", "WIP", "SA"]
    assert rates["batched"] > 0 and rates["one_at_a_time"] > 0 and min(rates["scoring"].values()) > 0


def test_detect_memory_quick(capsys):
    rows = _load("detect_memory").main(["--quick", "--families", "sa"])
    assert [(r["family"], r["mb"]) for r in rows] == [("sa", 0.0), ("sa", 0.01)]
    assert rows[1]["scored"] > 20 and all(r["rss_mb"] > 50 for r in rows)
    assert len(_rows(capsys.readouterr().out)) == 2


def test_train_step_quick(capsys):
    results = _load("train_step").main(["--quick"])
    rows = _rows(capsys.readouterr().out)
    assert [r[0] for r in rows].count("SDLP") == 9 and rows[11][:2] == ["GRPO", "generation"]
    assert all(float(r[2]) >= 0 for r in rows)
    sdlp = results["sdlp"]
    assert sdlp["on-policy sampling"] > 0 and 1 <= sdlp["sampled tokens"] <= 17  # 16 new tokens + the EOS appended
    grpo = results["grpo"]
    # the wrapped phases are parts of the step the trainer timed
    assert grpo["generation"] > 0 and grpo["backward"] > 0 and grpo["total"] >= grpo["generation"] + grpo["backward"]


def test_train_step_full_fine_tuning_quick(capsys):
    results = _load("train_step").main(["--quick", "--sections", "sdlp", "--lora-r", "0"])
    rows = _rows(capsys.readouterr().out)
    assert "full fine-tuning" in next(r[3] for r in rows if r[1] == "total")
    assert results["sdlp"]["teacher forward"] > 0 and results["sdlp"]["optimizer"] > 0


def test_train_step_measures_both_precisions_side_by_side(capsys):
    """--precision fp32,bf16 measures every phase under each in one process, with the ratio; the SDLP step of the
    recipe is the training step plus its share of one generate() over rollout_steps steps' rows."""
    results = _load("train_step").main(["--quick", "--sections", "sdlp", "--lora-r", "0", "--precision", "fp32,bf16",
                                        "--rollout-steps", "3"])
    out = capsys.readouterr().out
    rows = _rows(out)
    assert rows[0][:2] == ["SDLP", "collate"] and len(rows) == 11 and all(r[4].endswith("x") for r in rows)
    assert [r[1] for r in rows[-3:]] == ["on-policy sampling, rollout_steps 1", "on-policy step, rollout_steps 1",
                                         "on-policy step, rollout_steps 3"]
    assert "SDLP step: fp32 with rollout_steps 1 / bf16 with rollout_steps 3: " in out
    for a, b, row in zip(results["fp32"]["rows"], results["bf16"]["rows"], rows, strict=True):  # the same phase
        assert a[:2] == b[:2] == row[:2] and row[4] == (f"{a[2] / b[2]:.2f}x" if b[2] else "")
    assert "6 rows in one generate() / 3 steps" in next(r[5] for r in rows if r[1] == "on-policy sampling")
    assert results["fp32"]["describe"].startswith("fp32") and results["bf16"]["describe"].startswith("bf16 autocast")
    for name in ("fp32", "bf16"):
        sdlp = results[name]["sdlp"]
        assert sdlp["step"] == pytest.approx(sdlp["total"] + sdlp["on-policy sampling"])
        assert sdlp["step, rollout_steps 1"] == pytest.approx(sdlp["total"] + sdlp["on-policy sampling, rollout_steps 1"])
    assert "ICW_PRECISION" not in os.environ


def test_train_step_decode_quick(capsys):
    results = _load("train_step").main(["--quick", "--sections", "decode", "--precision", "fp32"])
    rows = _rows(capsys.readouterr().out)
    assert [r[:2] for r in rows] == [["decode", "fp32, dynamic KV cache (the floor)"], ["decode", "fp32, static KV cache"],
                                     ["decode", "int8 dynamic quantization, dynamic KV cache"]]
    floor, static, int8 = results["decode"]
    assert floor["kl"] == static["kl"] == 0.0 < int8["kl"]  # the same weights; int8 weights differ
    assert rows[0][3].startswith("1.00x the floor") and all(v["generate"] > 0 for v in results["decode"])


def test_datatrove_throughput_quick(capsys):
    rows = _load("datatrove_throughput").main(["--quick"])
    table = _rows(capsys.readouterr().out)
    assert [(r[0], r[1]) for r in table] == [("sa", "icw.verify, one call"), ("sa", "detect_dataset, 1 process"),
                                            ("sa", "detect_dataset, 2 processes"), ("sa", "datatrove, 1 task"),
                                            ("sa", "datatrove, 2 tasks")]
    assert rows[0]["texts"] == 200 and all(v > 0 for v in rows[0]["speed"].values())
    assert table[0][3] == "1.00x" and all(re.fullmatch(r"\d+\.\d\dx", r[4]) for r in table[3:])


@pytest.mark.slow
def test_third_party_quick(capsys, tmp_path):
    pytest.importorskip("pypdf", reason="the documents extra")
    got = _load("third_party").main(["--quick", "--cache", str(tmp_path / "reviews.jsonl")])
    printed = capsys.readouterr().out
    assert got["found"] == got["documents"] == 4 and got["human"] == 200 and got["human_flags"] == 0
    assert "per 1,000 responses" in printed and [r[0] for r in _rows(printed)][-4:] == ["4", "1,000", "10,000", "100,000"]
