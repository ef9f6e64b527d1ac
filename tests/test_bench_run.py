"""icw bench run / report: end to end on real models, resume after real kills, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from icw.bench.backends import Backend, TransformersBackend
from icw.bench.report import report
from icw.bench.runner import RESPONSES, ResultStore, RunConfig, load_records, run
from icw.keys import ICWKey

QUERIES = ["Why is the sky blue?", "How do bees make honey?", "What causes the seasons on Earth?",
           "Why do cats purr?"]
FAMILIES = ("tsp", "wip", "sa")


def write_icwbench(folder: Path, queries: list[str], tokenizer, families=FAMILIES, pool_size: int | None = 200,
                   columns: tuple[str, ...] | None = None) -> Path:
    """An ICWBench folder in the shared format (results_schema.md), written independently of
    ``icw bench build`` so these tests pin the contract rather than one implementation."""
    import datasets

    configs = []
    for family in families:
        for split, first_seed in (("test", 0), ("train", 1_000_000)):
            rows = []
            for i, query in enumerate(queries):
                params = {"pool_size": pool_size} if family == "tsp" and pool_size else {}
                key = ICWKey.create(family, first_seed + i, tokenizer if family != "sa" else None, **params)
                row = {"id": f"{family}-{split}-{i:05d}", "family": family, "seed": key.seed,
                       "key": key.to_string(), "instruction": key.instruction(tokenizer), "query": query,
                       "query_source": f"test:{i}"}
                rows.append({k: v for k, v in row.items() if columns is None or k in columns})
            (folder / family).mkdir(parents=True, exist_ok=True)
            datasets.Dataset.from_list(rows).to_parquet(str(folder / family / f"{split}-00000-of-00001.parquet"))
        configs.append(f"- config_name: {family}\n  data_files:\n  - split: test\n    path: {family}/test-*\n"
                       f"  - split: train\n    path: {family}/train-*\n")
    (folder / "README.md").write_text("---\nconfigs:\n" + "".join(configs) + "---\n# ICWBench (test)\n")
    return folder


class CountingBackend(Backend):
    """A real transformers backend that also remembers every request it was asked for."""

    def __init__(self, inner: TransformersBackend) -> None:
        self.inner, self.name, self.tokenizer, self.supports_bias = inner, inner.name, inner.tokenizer, True
        self.seen: list[dict] = []

    def generate(self, requests, on_result, desc="generate"):
        self.seen += [r.uid for r in requests]
        self.inner.generate(requests, on_result, desc)


@pytest.fixture(scope="module")
def bench(tmp_path_factory, qwen3):
    return write_icwbench(tmp_path_factory.mktemp("icwbench"), QUERIES, qwen3)


@pytest.fixture(scope="module")
def tiny_backend(tiny_qwen):
    return TransformersBackend(tiny_qwen, max_new_tokens=12, batch_size=4)


def _keyset(records):
    return [ResultStore.key(r) for r in records]


def test_run_instruction_mode_scores_every_item_and_report_follows_schema(tmp_path, bench, tiny_backend):
    config = RunConfig(out=str(tmp_path / "run"), dataset=str(bench), families=("tsp", "sa"), limit=3,
                       max_new_tokens=12, progress=False)
    run(config, tiny_backend)
    records = load_records(tmp_path / "run")
    assert len(records) == 2 * 3 * 2 and len(set(_keyset(records))) == len(records)
    import datasets

    for family in ("tsp", "sa"):
        rows = {r["id"]: r for r in datasets.load_dataset(str(bench), family, split="test").to_list()}
        for rec in (r for r in records if r["family"] == family):
            assert rec["key"] == rows[rec["id"]]["key"]  # instruction mode verifies under the dataset's key
            assert rec["mode"] == ("instruction" if rec["role"] == "positive" else "plain")
            assert isinstance(rec["z_score"], float) and 0.0 <= rec["p_value"] <= 1.0 and not rec.get("error")
    result = report(tmp_path / "run", num_bootstrap=50)
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved == json.loads(json.dumps(result))
    assert set(saved["families"]) == {"tsp", "sa"} and saved["mode"] == "instruction"
    for key in ("model", "base_model", "adapter", "dataset", "mode", "max_new_tokens"):
        assert key in saved
    fam = saved["families"]["tsp"]
    for key in ("num_positive", "num_negative", "roc_auc", "roc_auc_ci", "tpr_at_fpr", "tpr_at_fpr_ci", "fpr", "mean_z_positive",
                "mean_z_negative", "ppl", "judge", "attacks"):
        assert key in fam
    assert fam["num_positive"] == fam["num_negative"] == 3 and 0.0 <= fam["roc_auc"] <= 1.0
    # the model-card command reads this file as written: a local dataset folder is named, no Hub dataset cited
    from icw.cards import model_card

    card = model_card(tmp_path / "run" / "results.json")
    assert card.data.datasets is None and "the local folder" in card.text
    aucs = {r.dataset_config: r.metric_value for r in card.data.eval_results if r.metric_type == "roc_auc"}
    assert aucs == pytest.approx({"tsp": fam["roc_auc"], "sa": saved["families"]["sa"]["roc_auc"]}, abs=1e-4)  # card rounds
    md = (tmp_path / "run" / "report.md").read_text()
    assert "TSP AUC" in md and "SA TPR@1%FPR" in md and "WIP AUC" not in md
    from icw.bench.report import markdown

    # base_model is any model it was trained from (full fine-tuning too), not necessarily an adapter's base
    assert markdown({**saved, "base_model": "smollm2"}).startswith(f"# ICWBench: {saved['model']} (trained from smollm2)")
    for name in ("roc_tsp.png", "z_hist_tsp.png", "roc_sa.png", "z_hist_sa.png"):
        assert (tmp_path / "run" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_repeats_no_finished_item_and_retries_failures(tmp_path, bench, tiny_backend):
    out = tmp_path / "run"
    config = RunConfig(out=str(out), dataset=str(bench), families=("wip",), limit=2, max_new_tokens=12)
    first = CountingBackend(tiny_backend)
    run(config, first)
    assert len(first.seen) == 4
    store = ResultStore(out / RESPONSES)
    failed = {**store.rows()[0], "response": None, "z_score": None, "error": "HTTP 500: boom"}
    store.append([failed])
    with open(out / RESPONSES, "a") as fh:
        fh.write('{"model": "torn line from a kill')  # no newline: a write cut short
    again = CountingBackend(tiny_backend)
    run(config, again)
    assert [(r["id"], r["role"]) for r in again.seen] == [(failed["id"], failed["role"])]
    records = load_records(out)
    assert len(records) == 4 and not any(r.get("error") for r in records)
    lines = (out / RESPONSES).read_text().splitlines()
    assert lines[-1].startswith("{") and json.loads(lines[-1])["id"] == failed["id"]
    # more queries later: only the new ones are generated
    more = CountingBackend(tiny_backend)
    run(RunConfig(out=str(out), dataset=str(bench), families=("wip",), limit=3, max_new_tokens=12), more)
    assert sorted(r["id"] for r in more.seen) == ["wip-test-00002", "wip-test-00002"]


def test_bias_mode_heldout_template_and_key_seeds(tmp_path, bench, tiny_backend):
    run(RunConfig(out=str(tmp_path / "bias"), dataset=str(bench), families=("wip",), limit=2, mode="bias",
                  max_new_tokens=12), tiny_backend)
    pos = [r for r in load_records(tmp_path / "bias") if r["role"] == "positive"]
    assert {r["mode"] for r in pos} == {"bias"} and all(r["key"].startswith("icw:wip:seed=") for r in pos)
    held = CountingBackend(tiny_backend)
    run(RunConfig(out=str(tmp_path / "held"), dataset=str(bench), families=("sa",), limit=2, template="heldout",
                  key_seed_offset=5000, max_new_tokens=12), held)
    prompts = [r for r in held.seen if r["role"] == "positive"]
    assert {ICWKey.from_string(r["key"]).seed for r in prompts} == {5000, 5001}
    records = load_records(tmp_path / "held")
    assert all(r["template"] == "heldout" for r in records)
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"question": q}) + "\n" for q in ("Name a prime.", "Name a colour.")))
    run(RunConfig(out=str(tmp_path / "other"), dataset=str(bench), families=("sa",), limit=2,
                  query_dataset=str(other), query_column="question", max_new_tokens=8), tiny_backend)
    assert {r["query"] for r in load_records(tmp_path / "other")} == {"Name a prime.", "Name a colour."}
    with pytest.raises(ValueError, match="has no column 'prompt'"):
        run(RunConfig(out=str(tmp_path / "bad"), dataset=str(bench), families=("sa",), limit=2,
                      query_dataset=str(other), query_column="prompt"), tiny_backend)


def _default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def test_killed_cli_run_resumes_without_repeats_or_losses(tmp_path, bench, tiny_qwen):
    """A real `icw bench run` process interrupted with SIGINT, stopped with SIGTERM, killed with SIGKILL, then rerun.

    The child gets default signal dispositions whatever the suite inherited (a shell started in the background
    ignores SIGINT, and so would a child that inherited that)."""
    model, tok = tiny_qwen
    folder = tmp_path / "tiny-model"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "icw.cli", "bench", "run", "--dataset", str(bench), "--out", str(out),
           "--model", str(folder), "--families", "sa", "--max-new-tokens", "32", "--batch-size", "1", "--limit", "4"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    path = out / RESPONSES
    history = []
    for how, lines_before_kill in ((signal.SIGINT, 2), (signal.SIGTERM, 4), (signal.SIGKILL, 6)):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=_default_signals)
        deadline = time.time() + 120
        while time.time() < deadline and (not path.exists() or len(path.read_text().splitlines()) < lines_before_kill):
            time.sleep(0.02)
        proc.send_signal(how)
        _, err = proc.communicate(timeout=60)
        saved = load_records(out)
        assert lines_before_kill <= len(saved) < 8, "the signal should land mid-run"
        if how != signal.SIGKILL:  # Ctrl-C and SIGTERM both end cleanly, with 128 + the signal's number
            assert proc.returncode == 128 + how and "Run the same command to resume" in err, err[-2000:]
        history.append({ResultStore.key(r): r["response"] for r in saved})
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip().endswith("}")]
    keys = [ResultStore.key(r) for r in lines]
    assert len(set(keys)) == 8 == len(keys)  # 4 queries x 2 roles, each generated exactly once
    after = {ResultStore.key(r): r["response"] for r in lines}
    for before in history:
        assert all(after[k] == v for k, v in before.items())  # nothing finished was redone or lost


def test_bad_input_gets_clear_errors(tmp_path, bench, qwen3, capsys):
    from icw.cli import main

    out = str(tmp_path / "x")
    assert main(["bench", "run", "--dataset", str(bench), "--out", out, "--model", str(tmp_path / "no-such-model"),
                 "--limit", "1"]) == 2
    assert "cannot load model" in capsys.readouterr().err
    with pytest.raises(ValueError, match="family 'wip' is not in dataset"):
        run(RunConfig(out=str(tmp_path / 'y'), dataset=str(write_icwbench(tmp_path / "only_sa", QUERIES[:1], qwen3, ("sa",))),
                      families=("wip",)))
    thin = write_icwbench(tmp_path / "thin", QUERIES[:1], qwen3, ("sa",), columns=("id", "family", "query"))
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['key', 'instruction'\]"):
        run(RunConfig(out=str(tmp_path / 'y'), dataset=str(thin), families=("sa",)))
    with pytest.raises(ValueError, match="not found"):
        run(RunConfig(out=str(tmp_path / 'y'), dataset=str(tmp_path / "nowhere"), families=("sa",)))
    with pytest.raises(ValueError, match="bias mode needs logit access"):
        RunConfig(out=str(tmp_path / 'y'), backend="openai", mode="bias")
    (tmp_path / "x").mkdir(exist_ok=True)
    (tmp_path / "x" / "run.json").write_text(json.dumps({"model": "other/model", "mode": "instruction"}))
    with pytest.raises(ValueError, match="holds a run with other settings"):
        run(RunConfig(out=out, dataset=str(bench), families=("sa",)))
    with pytest.raises(ValueError, match="has no responses.jsonl"):
        report(tmp_path / "empty")


def test_reads_folder_written_by_icw_bench_build(tmp_path, tiny_backend):
    dataset = pytest.importorskip("icw.bench.dataset")
    questions = tmp_path / "q.txt"
    questions.write_text("\n".join(QUERIES) + "\n")
    folder = dataset.build(dataset.BenchBuildConfig(out=str(tmp_path / "built"), questions=str(questions),
                                                    num_test=2, num_train=1, families=("sa",)), progress=False)
    run(RunConfig(out=str(tmp_path / "run"), dataset=str(folder), families=("sa",), max_new_tokens=8), tiny_backend)
    assert len(load_records(tmp_path / "run")) == 4


@pytest.mark.slow
def test_smollm2_end_to_end_transformers_and_openai_backends(tmp_path, smollm2):
    """README's workflow on the embedded model: both backends, report, PNGs, judge, attack and coverage through a
    real local server; SmolLM2 as a judge often answers garbage, which must be recorded, never dropped."""
    from icw.bench.backends import OpenAIBackend
    from icw.bench.server import serve_in_thread

    model, tok = smollm2
    bench = write_icwbench(tmp_path / "bench", QUERIES[:2], tok, pool_size=300)
    local = run(RunConfig(out=str(tmp_path / "local"), dataset=str(bench), max_new_tokens=16),
                TransformersBackend(smollm2, max_new_tokens=16))
    assert len(load_records(local)) == 12
    server, url = serve_in_thread(model, tok, "smollm2")
    try:
        config = RunConfig(out=str(tmp_path / "remote"), dataset=str(bench), backend="openai", model="smollm2",
                           base_url=url, max_new_tokens=16, families=("sa",), attacks=("deletion", "paraphrase"),
                           attack_url=url, attack_model="smollm2", judge_url=url, judge_model="smollm2",
                           ppl_models=("smollm2",))
        run(config, OpenAIBackend("smollm2", url, max_new_tokens=16))
    finally:
        server.shutdown()
    records = load_records(tmp_path / "remote")
    assert len([r for r in records if r["attack"] == "none"]) == 4 and not any(r.get("error") for r in records)
    assert {r["attack"] for r in records} == {"none", "deletion", "paraphrase"}
    quality = load_records(tmp_path / "remote", "quality.jsonl")
    judged = [q for q in quality if q["metric"] == "judge"]
    assert len(judged) == 2 and all(q.get("scores") or (q.get("error") and "raw" in q) for q in judged)
    covered = [q for q in quality if q["metric"] == "coverage"]  # one per attacked positive, scored or kept as failed
    assert sorted((q["scored_attack"], q["id"]) for q in covered) == sorted(
        (r["attack"], r["id"]) for r in records if r["attack"] != "none")
    assert all(q.get("score") is not None or (q.get("error") and "raw" in q) for q in covered)
    assert all(q["value"] > 1.0 for q in quality if q["metric"] == "ppl")
    repeats = [q for q in quality if q["metric"] == "seq_rep_4"]  # beside each perplexity, in the same tokens
    assert sorted(q["id"] for q in repeats) == sorted(q["id"] for q in quality if q["metric"] == "ppl")
    assert all(0.0 <= q["value"] < 1.0 for q in repeats)
    for run_dir in (tmp_path / "local", tmp_path / "remote"):
        result = report(run_dir, num_bootstrap=50)
        assert (run_dir / "report.md").exists() and list(run_dir.glob("roc_*.png"))
    assert set(result["families"]["sa"]["attacks"]) == {"deletion", "paraphrase"}
    assert result["families"]["sa"]["ppl"] is not None




def test_attacks_with_judge_url_score_coverage_once_and_report_its_columns(tmp_path, bench, tiny_qwen, capsys):
    """`icw bench run --attacks deletion --judge-url ...` asks the judge for the Coverage of every attacked positive,
    `icw bench report` prints the ESR-at-Coverage columns, and a rerun asks nothing again. The judge is a real model
    behind icw's server on 127.0.0.1 whose weights spell one reply (icw.testing.scripted_model): the tiny random
    model's replies are never readable scores (that path: test_bench_attacks)."""
    from icw.bench.server import serve_in_thread
    from icw.cli import main
    from icw.testing import scripted_model

    model, tok = tiny_qwen
    folder = tmp_path / "tiny-model"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    out = tmp_path / "run"
    server, url = serve_in_thread(scripted_model('{"coverage": 4}'), tok, "judge")
    cmd = ["bench", "run", "--dataset", str(bench), "--out", str(out), "--model", str(folder), "--families", "sa",
           "--limit", "3", "--max-new-tokens", "12", "--attacks", "deletion", "--judge-url", url, "--judge-model", "judge"]

    def coverage_lines():
        rows = [json.loads(line) for line in (out / "quality.jsonl").read_text().splitlines()]
        return [r for r in rows if r["metric"] == "coverage"]

    try:
        assert main(cmd) == 0
        first = coverage_lines()
        assert main(cmd) == 0  # the rerun: every attacked positive is scored, so the judge is not asked again
        assert coverage_lines() == first
    finally:
        server.shutdown()
    attacked = {r["id"]: r for r in load_records(out) if r["attack"] == "deletion"}
    assert len(first) == len(attacked) == 3
    for q in first:
        assert (q["scored_attack"], q["judge"], q["role"], q["score"], q["raw"]) == (
            "deletion", "judge", "positive", 4.0, '{"coverage": 4}')
        assert q["attack"] == "coverage:deletion:judge" and not q.get("error") and q["id"] in attacked
    capsys.readouterr()
    assert main(["bench", "report", str(out), "--no-figures", "--num-bootstrap", "20"]) == 0
    printed = capsys.readouterr().out
    evasion = json.loads((out / "results.json").read_text())["families"]["sa"]["evasion"]
    e, base = evasion["deletion"], evasion["none"]
    assert (e["mean_coverage"], e["coverage_unscored"], e["coverage_judges"]) == (4.0, 0, ["judge"])
    assert e["esr_at_coverage"] == {"2": e["esr"], "3": e["esr"], "4": e["esr"], "4.5": 0.0}
    assert base["mean_coverage"] == 5.0 and set(base["esr_at_coverage"].values()) == {base["esr"]}  # by definition
    assert "| Coverage | ESR @ coverage >= 2 | ESR @ coverage >= 3 | ESR @ coverage >= 4 | ESR @ coverage >= 4.5 |" in printed
    row = next(line for line in printed.splitlines() if line.startswith("| SA | deletion |"))
    esr = f"{e['esr']:.3f}"
    assert row.endswith(f"| 4.00 | {esr} | {esr} | {esr} | 0.000 | 0 |")


def test_warns_when_instructions_overflow_the_context(qwen3, tiny_backend):
    from icw.bench.runner import context_warning

    full = ICWKey.create("tsp", 1, qwen3)  # the paper's pool: all of V_en, ~17,700 listed tokens
    small = ICWKey.create("tsp", 1, qwen3, pool_size=200)
    assert context_warning(tiny_backend, [small.prompt("Why?", qwen3)]) is None
    message = context_warning(tiny_backend, [small.prompt("Why?", qwen3), full.prompt("Why?", qwen3)])
    assert message and "reads at most 4096" in message and "--pool-size" in message
