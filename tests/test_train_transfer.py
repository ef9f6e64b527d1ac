"""Prefix-independent SDLP targets (key relabelling, on-policy batches), the GRPO loss and reward,
and the synthesis defects of issue 16 (tiny random Qwen3 with the real Qwen3 tokenizer)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import LogitsProcessorList

from icw import ICWKey, verify
from icw.keys import as_key, green_mask
from icw.train.grpo import ICWReward
from icw.train.grpo import make_parser as grpo_parser
from icw.train.sampling import RowSeededSampling, row_seeds
from icw.train.sdlp import (
    SDLPCollator,
    SDLPConfig,
    SDLPTrainer,
    make_parser,
    relabel_curriculum,
    relabel_keys,
    sa_bias_codes,
    tokenize_dataset,
)
from icw.train.synthesis import SynthesisConfig, plan, query_use, synthesize
from icw.train.transfer import batch_seeds, on_policy_batches
from icw.vocab import vocabulary

ROOT = Path(__file__).resolve().parents[1]
ANSWER = "Bridges stand because forces balance. Engineers compute loads carefully! However, wind matters too."
QUERIES = ["Why is the sky blue?", "How do bees make honey?", "What causes tides?", "Why do cats purr?",
           "How do vaccines work?", "What is inflation?", "Why do leaves change colour?", "How do rivers form?"]


def _dcs(tok):
    from datasets import Dataset

    rows = [{"family": "wip", "key": ICWKey.create("wip", seed=1_000_000 + i, tokenizer=tok).to_string(),
             "query": QUERIES[i], "response": ANSWER, "label": 1} for i in range(3)]
    rows.append({"family": "sa", "key": ICWKey.create("sa", seed=21_000_000, length=19).to_string(),
                 "query": QUERIES[3], "response": ANSWER, "label": 1})
    rows.append({"family": "wip", "key": rows[0]["key"], "query": QUERIES[4], "response": "Plain.", "label": 0})
    return Dataset.from_list(rows)


def test_relabelling_moves_the_teacher_delta_and_the_instruction_to_the_new_key(qwen3):
    original = _dcs(qwen3)
    relabelled = relabel_keys(original, qwen3, seed=0)
    assert relabelled["generating_key"] == original["key"]
    for old, new, label in zip(original["key"], relabelled["key"], original["label"], strict=True):
        if label:
            o, n = as_key(old), as_key(new)
            assert n != o and n.family == o.family and n.seed >= 1_000_000  # a training-pool key, not an eval one
            assert (n.green_letters != o.green_letters) if n.family == "wip" else (n.secret_string != o.secret_string)
            assert n.family != "sa" or n.length == o.length == 19
        else:
            assert new == old  # D_H0 rows keep their (never shown) key
    feats = list(tokenize_dataset(relabelled, qwen3))
    batch = SDLPCollator(qwen3, len(qwen3), SDLPConfig(output_dir="unused", report_to="none"))(feats)
    view = vocabulary(qwen3)
    for b in range(3):  # WIP: the teacher's mask is the new key's green set, and the student is told the new key
        new, old = as_key(feats[b]["key"]), as_key(feats[b]["generating_key"])
        row = batch["bias_rows"][batch["bias_index"][b, 0]].numpy()
        assert np.array_equal(row, green_mask(new, view)) and not np.array_equal(row, green_mask(old, view))
        prompt = qwen3.decode(feats[b]["student_prompt_ids"])
        assert new.instruction(qwen3) in prompt and old.instruction(qwen3) not in prompt
    # SA: the replay follows the new secret along the same response
    new = as_key(feats[3]["key"])
    codes = sa_bias_codes(new.secret_string, feats[3]["response_ids"], view)
    assert codes != sa_bias_codes(as_key(feats[3]["generating_key"]).secret_string, feats[3]["response_ids"], view)
    offset = int(batch["bias_index"][3][batch["bias_index"][3] > 0].min()) - min(c for c in codes if c >= 0)
    assert (batch["bias_index"][3, : len(codes)] - offset).tolist() == codes
    assert codes[0] == ord(new.secret_string[0]) - 65
    assert batch["bias_index"][4].abs().sum() == 0  # D_H0: no delta


def test_relabel_pool_sizes_give_a_curriculum(qwen3):
    from datasets import Dataset

    rows = Dataset.from_list([{"family": "wip", "key": ICWKey.create("wip", seed=1_000_000 + i, tokenizer=qwen3)
                               .to_string(), "query": q, "response": ANSWER, "label": 1} for i, q in enumerate(QUERIES)])
    assert len(set(relabel_keys(rows, qwen3, num_keys=1)["key"])) == 1
    assert len(set(relabel_keys(rows, qwen3, num_keys=0)["key"])) == len(QUERIES)
    assert set(relabel_keys(rows, qwen3, num_keys=2)["key"]) <= set(relabel_keys(rows, qwen3, num_keys=2, seed=0)["key"])
    assert len(set(relabel_keys(rows, qwen3, num_keys=3)["key"])) <= 3


def test_relabel_copies_train_each_response_under_several_fresh_keys(qwen3):
    original = _dcs(qwen3)
    tripled = relabel_keys(original, qwen3, copies=3)
    positives = [i for i, label in enumerate(original["label"]) if label]
    assert len(tripled) == len(original) + 2 * len(positives)  # D_H0 rows once
    assert tripled.select(range(len(original)))["key"] == relabel_keys(original, qwen3)["key"]
    for i in positives:  # every copy of a response carries its own key, never the writing key
        copies = [row for row in tripled if row["query"] == original[i]["query"]]
        assert len(copies) == 3 and {row["generating_key"] for row in copies} == {original[i]["key"]}
        assert len({row["key"] for row in copies} | {original[i]["key"]}) == 4
    with pytest.raises(ValueError, match="relabel_copies"):
        SDLPConfig(output_dir="unused", report_to="none", relabel_copies=0)


def test_relabel_families_leaves_the_other_families_under_their_writers_keys(qwen3):
    original = _dcs(qwen3)  # 3 WIP D_H1 rows, 1 SA D_H1 row, 1 WIP D_H0 row
    joint = relabel_keys(original, qwen3, copies=3, families=["wip"])
    assert len(joint) == len(original) + 2 * 4  # every D_H1 row three times, D_H0 once
    sa = [row for row in joint if row["family"] == "sa"]  # SA keeps its share, under its writer's key
    assert len(sa) == 3 and {(row["key"], row["generating_key"]) for row in sa} == {(original[3]["key"],) * 2}
    wip = [row for row in joint if row["family"] == "wip" and row["label"]]
    assert len(wip) == 9 and all(row["key"] != row["generating_key"] for row in wip)
    config = make_parser().parse_args_and_config(["--output_dir", "unused", "--use_cpu", "true", "--relabel_keys",
                                                  "true", "--relabel_families", "wip", "tsp"])[1]
    assert config.relabel_families == ["wip", "tsp"]
    with pytest.raises(ValueError, match="relabel_families"):
        SDLPConfig(output_dir="unused", report_to="none", relabel_keys=True, relabel_families=["acrostic"])


def test_relabel_keep_original_adds_fresh_copies_to_the_writers_rows(qwen3):
    original = _dcs(qwen3)
    mixed = relabel_keys(original, qwen3, copies=2, keep_original=True)
    positives = [i for i, label in enumerate(original["label"]) if label]
    assert len(mixed) == len(original) + 2 * len(positives)
    head = mixed.select(range(len(original)))  # the writers' rows first, unchanged
    assert head["key"] == original["key"] and head["generating_key"] == original["key"]
    tail = mixed.select(range(len(original), len(mixed)))
    assert set(tail["generating_key"]) == {original[i]["key"] for i in positives}
    assert not {row["key"] for row in tail} & {original[i]["key"] for i in positives}
    with pytest.raises(ValueError, match="relabel_keep_original"):
        SDLPConfig(output_dir="unused", report_to="none", relabel_keep_original=True)
    with pytest.raises(ValueError, match="relabel_keep_original"):
        SDLPConfig(output_dir="unused", report_to="none", relabel_keep_original=True, relabel_curriculum=[1, 0])


def test_relabel_curriculum_reads_one_key_then_a_few_then_a_key_per_row(qwen3, tmp_path):
    from datasets import Dataset

    rows = Dataset.from_list([{"family": "wip", "key": ICWKey.create("wip", seed=1_000_000 + i, tokenizer=qwen3)
                               .to_string(), "query": q, "response": ANSWER, "label": 1} for i, q in enumerate(QUERIES)])
    staged = relabel_curriculum(rows, qwen3, [1, 3, 0], copies=2)
    n = 2 * len(QUERIES)
    assert len(staged) == 3 * n
    stages = [staged.select(range(s * n, (s + 1) * n)) for s in range(3)]
    assert [len(set(stage["key"])) for stage in stages][::2] == [1, n] and len(set(stages[1]["key"])) <= 3
    for stage in stages:  # every answer twice in every stage, shuffled within it
        assert sorted(stage["query"]) == sorted(QUERIES * 2) and stage["query"] != sorted(stage["query"])
        assert not set(stage["key"]) & set(rows["key"])
    # the parser takes the stages from the command line; the config reads them in order
    config = make_parser().parse_args_and_config(["--output_dir", str(tmp_path), "--use_cpu", "true",
                                                  "--relabel_curriculum", "1", "8", "0"])[1]
    assert config.relabel_curriculum == [1, 8, 0] and config.relabel_keys
    assert config.train_sampling_strategy == "sequential"
    with pytest.raises(ValueError, match="relabel_num_keys"):
        SDLPConfig(output_dir="unused", report_to="none", relabel_curriculum=[1, 0], relabel_num_keys=4)
    with pytest.raises(ValueError, match="group_by_length"):
        SDLPConfig(output_dir="unused", report_to="none", relabel_curriculum=[1, 0],
                   train_sampling_strategy="group_by_length")


def test_on_policy_batches_are_scored_along_the_students_own_tokens(tiny_qwen, tmp_path):
    model, tok = tiny_qwen
    config = SDLPConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, lmbda=1.0, max_response_length=9,
                        top_k_sa=50)
    trainer = SDLPTrainer(model, config, train_dataset=_dcs(tok).select(range(1, 4)), processing_class=tok)
    feats = [trainer.train_dataset[i] for i in range(3)]
    batch = trainer.data_collator(feats)
    new = on_policy_batches(trainer, trainer.model, [batch], [batch_seeds(trainer, 0, 0, 3)])[0]
    # the same draw by hand: the student's prompt (left-padded), each row sampled from its own seed (step 0, rows 0-2)
    prompts = [f["student_prompt_ids"] for f in feats]
    width = max(map(len, prompts))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    sampler = RowSeededSampling(row_seeds(config.seed, 0, 0, 3))
    want = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=8,
                          logits_processor=LogitsProcessorList([sampler]), pad_token_id=tok.pad_token_id,
                          eos_token_id=tok.eos_token_id)[:, width:]
    view = vocabulary(tok)
    for b, f in enumerate(feats):
        n = int(new["response_mask"][b].sum())
        sampled = want[b].tolist()
        sampled = sampled[: sampled.index(tok.eos_token_id)] if tok.eos_token_id in sampled else sampled
        for side in ("teacher", "student"):  # both sides see the student's sample after their own prompt
            got = new[f"{side}_input_ids"][b, new[f"{side}_positions"][b, :n] + 1].tolist()
            assert got == sampled + [tok.eos_token_id]
            assert new[f"{side}_input_ids"][b, : len(f[f"{side}_prompt_ids"])].tolist() == f[f"{side}_prompt_ids"]
        assert got != f["response_ids"]
        key = as_key(f["key"])
        if key.family == "sa":  # the SA replay runs along the sampled tokens
            codes = sa_bias_codes(key.secret_string, got, view)
            active = new["bias_index"][b, :n]
            assert ((active == active.max()) | (active == 0)).all() or len(set(codes)) > 1
        else:
            assert (new["bias_index"][b, :n] > 0).all()
    loss = trainer.compute_loss(trainer.model, trainer._prepare_inputs(new))
    assert math.isfinite(loss.item())


@pytest.mark.parametrize("options", [{"relabel_keys": True}, {"relabel_keys": True, "relabel_num_keys": 2},
                                     {"relabel_curriculum": [1, 0]}, {"lmbda": 0.5}],
                         ids=["relabel", "relabel-pool", "curriculum", "mixed"])
def test_sdlp_trains_with_each_new_option(tiny_qwen, tmp_path, options):
    from icw.testing import tiny_random_model

    _, tok = tiny_qwen
    config = SDLPConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, max_steps=2, logging_steps=1,
                        per_device_train_batch_size=2, top_k_sa=50, max_response_length=12, learning_rate=1e-3,
                        save_strategy="no", **options)
    trainer = SDLPTrainer(tiny_random_model("qwen3").train(), config, train_dataset=_dcs(tok), processing_class=tok)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    for log in (h for h in trainer.state.log_history if "loss" in h):  # the step's loss, split by family
        shares = {k.removeprefix("loss_share_"): v for k, v in log.items() if k.startswith("loss_share_")}
        assert shares and set(shares) <= {"tsp", "wip", "sa", "plain"} and sum(shares.values()) == pytest.approx(1)
        means = [log[f"loss_{family}"] for family in shares]  # the step's mean lies between its families' means
        assert min(means) - 1e-4 <= log["loss"] <= max(means) + 1e-4
    if options.get("relabel_keys") or options.get("relabel_curriculum"):
        assert "generating_key" in trainer.train_dataset.column_names
    if options.get("relabel_curriculum"):  # the dataset's order, first stage first: its single WIP key
        first = next(iter(trainer.get_train_dataloader()))["student_input_ids"].tolist()
        for row, ids in zip(trainer.train_dataset, first, strict=False):
            assert ids[: len(row["student_prompt_ids"])] == row["student_prompt_ids"]
        stage = trainer.train_dataset.select(range(len(trainer.train_dataset) // 2))
        assert len({k for k, f, w in zip(stage["key"], stage["family"], stage["watermarked"], strict=True)
                    if f == "wip" and w}) == 1


def test_rollouts_of_several_steps_come_from_one_generate_with_the_same_seeds(tiny_qwen, tmp_path):
    """rollout_steps groups the on-policy samples of several optimizer steps into one generate() call; each row
    keeps its own seed, so with a frozen policy (lr 1e-30: below fp32 resolution) the trained batches equal those of one call a step."""
    from icw.testing import tiny_random_model

    _, tok = tiny_qwen
    dcs = _dcs(tok)
    dcs = dcs.select([i % len(dcs) for i in range(12)])

    def run(rollout_steps):
        torch.manual_seed(0)
        model = tiny_random_model("qwen3").train()
        config = SDLPConfig(output_dir=str(tmp_path / f"r{rollout_steps}"), report_to="none", use_cpu=True,
                            max_steps=5, per_device_train_batch_size=2, top_k_sa=50, max_response_length=10,
                            learning_rate=1e-30, save_strategy="no", lmbda=1.0, rollout_steps=rollout_steps,
                            bf16=False, disable_tqdm=True)
        trainer = SDLPTrainer(model, config, train_dataset=dcs, processing_class=tok)
        calls, trained = [], []
        generate = model.generate
        model.generate = lambda *a, **kw: calls.append(len(kw["input_ids"])) or generate(*a, **kw)
        step = trainer.training_step
        trainer.training_step = lambda m, inputs, n=None: trained.append(inputs["student_input_ids"].tolist()) or step(m, inputs, n)
        trainer.train()
        return calls, trained

    calls_1, trained_1 = run(1)
    calls_3, trained_3 = run(3)
    assert calls_1 == [2] * 5 and calls_3 == [6, 4]  # steps 0-2 in one call, 3-4 in the next
    assert trained_3 == trained_1 and len(trained_1) == 5


def test_sdlp_config_rejects_bad_fractions():
    with pytest.raises(ValueError, match="lmbda"):
        SDLPConfig(output_dir="unused", report_to="none", lmbda=1.5)
    with pytest.raises(ValueError, match="relabel_num_keys"):
        SDLPConfig(output_dir="unused", report_to="none", relabel_num_keys=-1)


def test_grpo_uses_the_papers_loss_in_every_recipe():
    from trl import GRPOConfig

    assert GRPOConfig(output_dir="unused", report_to="none", use_cpu=True).loss_type != "grpo"  # why the default
    extra = [] if torch.cuda.is_available() else ["--use_cpu", "true"]  # GPU recipes ask for bf16
    _, training, _, _ = grpo_parser().parse_args_and_config(["--output_dir", "unused", *extra])
    assert training.loss_type == "grpo"
    for path in sorted(ROOT.glob("recipes/configs/*/grpo.yaml")):
        _, training, _, _ = grpo_parser().parse_args_and_config(["--config", str(path), "--output_dir", "unused", *extra])
        assert training.loss_type == "grpo", path


def test_grpo_reward_never_prefers_short_or_gated_answers(qwen3):
    wip = ICWKey.create("wip", seed=5, tokenizer=qwen3)
    red = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in wip.green_letters]
    words = {"A": "apples", "B": "bring", "C": "cold", "D": "days", "E": "every", "F": "far", "G": "good",
             "H": "home", "I": "into", "J": "just", "K": "keep", "L": "long", "M": "many", "N": "near", "O": "over",
             "P": "people", "Q": "quite", "R": "rain", "S": "some", "T": "time", "U": "under", "V": "very",
             "W": "with", "X": "xray", "Y": "young", "Z": "zero"}
    honest_bad = " ".join(words[c] for c in red * 4)  # a long honest attempt with a strongly negative z
    reward = ICWReward(qwen3, min_completion_tokens=20)
    r_bad, r_short = reward(completions=[honest_bad, "Bring good."], key=[wip.to_string()] * 2)
    assert r_bad == -2.0 and r_short == -3.0 and r_short < r_bad  # floor for honest, rejection below it
    sa = ICWKey.create("sa", seed=2)
    gated = "**" + sa.secret_string[0] + "**" + "ees make honey. " * 20
    assert reward(completions=[gated], key=[sa.to_string()]) == [-3.0]
    with pytest.raises(ValueError, match="below z_floor"):
        ICWReward(qwen3, z_floor=-2.0, rejected_reward=0.0)
    # what trl's log shows per family (it passes log_metric to reward functions)
    logged: dict[str, float] = {}
    good = " ".join(words[c] for c in sorted(wip.green_letters) * 4)
    reward(completions=[honest_bad, "Bring good.", good, gated], key=[wip.to_string()] * 3 + [sa.to_string()],
           log_metric=logged.__setitem__)
    assert logged["icw/wip/rejected"] == pytest.approx(1 / 3) and logged["icw/sa/rejected"] == 1.0
    assert logged["icw/wip/detected"] == pytest.approx(1 / 3) and logged["icw/sa/detected"] == 0.0
    z = [r.z_score for r in verify([honest_bad, "Bring good.", good], wip, qwen3)]
    assert logged["icw/wip/z"] == pytest.approx(sum(z) / 3) and z[2] > 2.33 > -2.0 > z[0]  # the mean before the floor


def test_plan_keeps_h0_queries_apart_from_h1(qwen3):
    config = SynthesisConfig(families=["wip", "sa"], num_h1=[4], num_h0=[2])
    items = plan(config, QUERIES)
    h1 = {it["query"] for it in items if it["label"] == 1}
    h0 = {it["query"] for it in items if it["label"] == 0}
    assert h1 and h0 and not h1 & h0
    with warnings.catch_warnings():  # more rows than queries is the plan, said once in the run's summary
        warnings.simplefilter("error")
        items = plan(SynthesisConfig(families=["wip"], num_h1=[10], num_h0=[3]), QUERIES)
    assert not {it["query"] for it in items if it["label"]} & {it["query"] for it in items if not it["label"]}
    assert "reused with other keys" in query_use(items) and "D_H1 10 rows from" in query_use(items)


def test_synthesis_stores_the_sampled_ids_and_training_uses_them(tiny_qwen, tmp_path):
    from icw.train.sdlp import tokenize_row

    model, tok = tiny_qwen
    config = SynthesisConfig(output_dir=str(tmp_path), families=["wip"], num_h1=[2], num_h0=[1], max_new_tokens=6,
                             batch_size=2, perplexity=False)
    ds = synthesize(config, model, tok, QUERIES)
    for row in ds:
        assert row["response_ids"] and tok.decode(row["response_ids"], skip_special_tokens=True).strip() == row["response"]
        assert tokenize_row(row, tok)["response_ids"] == row["response_ids"][:1023] + [tok.eos_token_id]


def test_synthesis_bias_shifts_the_tempered_logits_by_delta(tiny_qwen):
    """transformers runs logits processors before the temperature warper: synthesis passes delta * T so
    that the sampled distribution is softmax(l / T + delta), the teacher's log-odds shift."""
    from icw.processors import logits_processor

    model, tok = tiny_qwen
    key, temperature, delta = ICWKey.create("wip", seed=4, tokenizer=tok), 0.7, 3.0
    enc = tok(["Why is the sky blue?"], return_tensors="pt")
    out = model.generate(**enc, logits_processor=[logits_processor(key, tok, delta * temperature)], do_sample=True,
                         temperature=temperature, top_p=1.0, top_k=0, max_new_tokens=1, output_scores=True,
                         output_logits=True, return_dict_in_generate=True, pad_token_id=tok.eos_token_id)
    shift = (out.scores[0][0] - out.logits[0][0] / temperature).numpy()
    green = green_mask(key, vocabulary(tok))
    width = len(green)
    assert np.allclose(shift[:width][green], delta, atol=1e-4) and np.allclose(shift[:width][~green], 0.0, atol=1e-4)


def test_ablation_script_runs_its_base_row_end_to_end(tmp_path):
    """scripts/ablation.py imports lazily, cell by cell: run the smallest table (tiny model, base row, WIP)."""
    import subprocess
    import sys

    out = tmp_path / "ablation"
    cmd = [sys.executable, str(ROOT / "scripts" / "ablation.py"), "--size", "tiny", "--model", "tiny",
           "--variants", "base", "--families", "wip", "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True)
    table = (out / "ablation.md").read_text()
    assert "| WIP | Base |" in table and "| SA |" not in table and "+SDLP" not in table
    assert "Key-swap probe" in table and table.count("| WIP | Base | ") == 2  # main table and probe table
    cells = sorted(path.name for path in (out / "cells").iterdir())
    assert cells == ["dcs.json", "dose-wip.json", "eval-base-wip.json"]
    rerun = subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True)
    assert "ablation: cell" not in rerun.stdout  # finished cells are never redone
    # a cell carried without its D_cs, or beside another model's, is refused (never trained on)
    config = out / "dcs" / "config.json"
    config.write_text(config.read_text().replace(str(out / "models" / "tiny-base"), "smollm2"))
    other = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert other.returncode != 0 and "does not hold a finished D_cs of" in other.stderr
    assert "made by smollm2" in other.stderr and "data.parquet present" in other.stderr


def _transfer_curve():
    """``scripts/transfer_curve.py`` as a module (scripts/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("transfer_curve", ROOT / "scripts" / "transfer_curve.py")
    curve = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(curve)
    return curve


def _transfer_analysis():
    """``scripts/transfer_analysis.py``, the jobs of ``transfer_curve.py`` that read a run back (plot, paired, pooled,
    weight shift, loss split), as a module; ``transfer_curve.py`` dispatches its flags to it."""
    curve = _transfer_curve()  # puts scripts/ on sys.path and imports transfer_analysis
    import transfer_analysis

    assert curve.plot is transfer_analysis.plot and curve.paired_comparison is transfer_analysis.paired_comparison
    return transfer_analysis


def test_transfer_curve_plot_draws_every_probed_step(tmp_path, capsys):
    import json

    curve = _transfer_analysis()
    tag = tmp_path / "curves" / "wip-r16-c8"
    tag.mkdir(parents=True)
    for step, b in ((0, -0.03), (100, 0.02)):
        probe = {c: [b if c == "B" else 0.05, 0.01] for c in ("A", "B", "C", "plain")}
        (tag / f"step-{step}.json").write_text(json.dumps({"step": step, "probe": probe}))
    sa = tmp_path / "curves" / "sa-r16"  # a run evaluated without the probe: held-out detection only
    sa.mkdir()
    for step, auc in ((0, 0.49), (200, 0.71)):
        det = {"roc_auc": auc, "roc_auc_ci": [auc - 0.1, auc + 0.1], "tpr_at_fpr": 0.2, "tpr_at_fpr_ci": [0.1, 0.3],
               "num_negative": 100, "verdict_rate": 0.25, "false_positive_rate": 0.01, "median_ppl_instructed": 3.5,
               "median_ppl_plain": 2.75, "mean_length_instructed": 300.4, "mean_length_plain": 250}
        (sa / f"step-{step}.json").write_text(json.dumps({"step": step, "detection": det}))
    curve.plot(tmp_path, str(tmp_path / "curves.png"))
    table = capsys.readouterr().out
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    assert "| wip-r16-c8 | 100 | +0.050 ± 0.010 | +0.020 ± 0.010 |" in table
    assert ("| sa-r16 | 200 | n/a | n/a | n/a | n/a | 0.710 (0.61-0.81) | 0.200 (0.10-0.30) | 0.250 | 0.010 "
            "| 3.50 / 2.75 | 300 / 250 |") in table


def test_transfer_curve_pooled_detection_resamples_questions(tmp_path):
    """Three checkpoints' answers to the same four questions, pooled: the AUC of all twelve instructed against all
    twelve plain z, the verdict and false-positive rates, how often each question is flagged, and bootstrap
    intervals that contain the estimate; another held-out set is refused."""
    import json

    curve = _transfer_analysis()

    def answers(name: str, z: list[float], p_values: list[float], key: str = "k") -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps({"query": f"q{i}", "key": key, "z_instructed": zi, "p_instructed": p,
                                            "z_plain": zi - 1.5, "p_plain": 0.5 if i else 0.005}) + "\n"
                                for i, (zi, p) in enumerate(zip(z, p_values, strict=True))))
        return path

    paths = [answers("a.jsonl", [3.0, 1.0, 0.0, 2.0], [0.001, 0.2, 0.5, 0.02]),
             answers("b.jsonl", [2.5, 1.2, 0.1, 2.2], [0.004, 0.2, 0.5, 0.009]),
             answers("c.jsonl", [2.8, 0.9, 0.2, 1.9], [0.002, 0.3, 0.4, 0.03])]
    result = curve.pooled_detection(paths, num_bootstrap=200)
    instructed = [3.0, 1.0, 0.0, 2.0, 2.5, 1.2, 0.1, 2.2, 2.8, 0.9, 0.2, 1.9]
    plain = [z - 1.5 for z in instructed]
    wins = sum((i > n) + 0.5 * (i == n) for i in instructed for n in plain)
    assert abs(result["roc_auc"] - wins / 144) < 1e-12
    assert result["verdict_rate"] == 4 / 12 and result["false_positive_rate"] == 3 / 12
    # q0 is flagged at all three checkpoints, q3 at one (b), q1 and q2 never
    assert result["times_flagged"] == [2, 1, 0, 1] and result["checkpoints"] == 3 and result["questions"] == 4
    for name in ("roc_auc", "verdict_rate"):
        low, high = result[f"{name}_ci"]
        assert low <= result[name] <= high and low < high
    with pytest.raises(SystemExit, match="do not hold the same questions"):
        curve.pooled_detection([paths[0], answers("other.jsonl", [0.0] * 4, [0.5] * 4, key="other")])


def test_transfer_curve_paired_comparison_counts_discordant_verdicts(tmp_path):
    """Two evaluations of the same questions and keys, paired: McNemar over the questions whose verdict changed (an
    exact binomial, so 3 against 1 is p = 0.625), Wilcoxon over the z differences and over the log PPL ratios of
    the answers both files give a PPL; other questions are refused."""
    import json

    curve = _transfer_analysis()

    def answers(name: str, p_values: list[float], z: list[float], key: str = "k", ppl: list | None = None) -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps({"query": f"q{i}", "key": key, "p_instructed": p, "z_instructed": zi,
                                            **({"ppl_instructed": ppl[i]} if ppl else {})}) + "\n"
                                for i, (p, zi) in enumerate(zip(p_values, z, strict=True))))
        return path

    before = answers("before.jsonl", [0.001, 0.005, 0.01, 0.2, 0.3, 0.5], [3.0, 2.8, 2.5, 1.0, 0.5, 0.0],
                     ppl=[2.0, 2.0, 2.0, 2.0, 2.0, None])
    after = answers("after.jsonl", [0.5, 0.001, 0.002, 0.004, 0.008, 0.009], [0.1, 3.1, 3.0, 2.9, 2.7, 2.6],
                    ppl=[1.0, 1.0, 1.0, 4.0, 1.0, 1.0])
    result = curve.paired_comparison(before, after)
    assert (result["flagged_both"], result["flagged_only_before"], result["flagged_only_after"]) == (2, 1, 3)
    assert abs(result["mcnemar_p"] - 0.625) < 1e-12
    assert abs(result["mean_z_difference"] - (14.4 - 9.8) / 6) < 1e-12 and 0 < result["wilcoxon_p"] < 1
    # the sixth answer has no PPL before: 5 pairs, four halved and one doubled
    assert result["ppl_instructed_answers"] == 5 and abs(result["median_ppl_ratio_instructed"] - 0.5) < 1e-12
    assert 0 < result["ppl_instructed_wilcoxon_p"] < 1 and "ppl_plain_answers" not in result
    with pytest.raises(SystemExit, match="same questions and keys"):
        curve.paired_comparison(before, answers("other.jsonl", [0.5] * 6, [0.0] * 6, key="other"))


def test_transfer_curve_interrupts_training_like_ctrl_c_even_as_a_background_job(tmp_path, capsys):
    """``--train_seconds`` ends the recipe with SIGINT (a recipe then saves its step in flight and stops: the
    SIGINT case of tests/test_train_smoke.py's kill-and-resume test), also when the
    script runs as a shell's background job, which starts with SIGINT ignored (a device run stopped 60 s late)."""
    import signal

    curve = _transfer_curve()
    marker = tmp_path / "interrupted"
    # a "recipe" that never ends by itself and records a KeyboardInterrupt
    child = ["-c", "import pathlib, time\ntry:\n    time.sleep(600)\nexcept KeyboardInterrupt:\n"
                   f"    pathlib.Path({str(marker)!r}).write_text('KeyboardInterrupt')\n"]
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a background job inherits
    try:
        curve._recipe(child, tmp_path / "run", seconds=1)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert marker.read_text() == "KeyboardInterrupt"
    assert "training stopped after --train_seconds 1" in capsys.readouterr().out
    assert (tmp_path / "run" / "command.txt").exists()


def test_transfer_curve_weight_shift_measures_each_checkpoint_against_its_start(tmp_path):
    """A full-weight SDLP checkpoint is measured against the base; GRPO (an adapter, or all weights) against the merged
    model it started from."""
    import copy
    import json

    import torch
    from peft import LoraConfig, get_peft_model

    from icw.testing import tiny_random_model

    curve = _transfer_analysis()
    base = tiny_random_model().eval()
    q = "model.layers.0.self_attn.q_proj.weight"
    sdlp = copy.deepcopy(base)
    with torch.no_grad():
        sdlp.get_parameter(q).mul_(1.01)  # one matrix moved by exactly 1%
    full = tmp_path / "sdlp" / "checkpoint-100"
    sdlp.save_pretrained(full)
    (full / "trainer_state.json").write_text(json.dumps({"log_history": []}))
    shift = curve.weight_shift(curve.start_model(full, base), curve.load_checkpoint(full, base))
    assert abs(shift["lora_max"] - 0.01) < 1e-5 and shift["lora_median"] == 0 and shift["all_median"] == 0

    merged = tmp_path / "sdlp" / "merged"
    sdlp.save_pretrained(merged)
    lora = get_peft_model(curve.load_checkpoint(full, base), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(0)
    for name, param in lora.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=1e-4)  # a shift far below the SDLP step's 1%
    adapter = tmp_path / "grpo" / "checkpoint-25"
    lora.save_pretrained(adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(merged)}))
    (adapter / "trainer_state.json").write_text(json.dumps({"log_history": []}))
    layer = lora.base_model.model.model.layers[0].self_attn.v_proj
    with torch.no_grad():
        expected = float((layer.lora_B["default"].weight @ layer.lora_A["default"].weight * 2).norm()
                         / layer.base_layer.weight.norm())
    start = curve.start_model(adapter, base)
    assert start is not base and torch.equal(start.get_parameter(q), sdlp.get_parameter(q))
    shift = curve.weight_shift(start, curve.load_checkpoint(adapter, base))
    moved = curve.weight_shift(base, curve.load_checkpoint(adapter, base))["lora_max"]  # against the wrong start
    assert 0 < shift["lora_median"] <= shift["lora_max"] < 0.005 and shift["all_median"] == 0
    assert expected <= shift["lora_max"] * (1 + 1e-4) and moved > 0.0099  # the base start sees the SDLP step too

    grpo = copy.deepcopy(sdlp)  # all-weights GRPO: its start is named by the run's command.txt
    with torch.no_grad():
        grpo.get_parameter(q).mul_(1.002)
    all_weights = tmp_path / "grpo-all" / "checkpoint-25"
    grpo.save_pretrained(all_weights)
    (all_weights.parent / "command.txt").write_text(f"recipes/grpo.py --model_name_or_path {merged} --use_peft false\n")
    shift = curve.weight_shift(curve.start_model(all_weights, base), curve.load_checkpoint(all_weights, base))
    assert abs(shift["lora_max"] - 0.002) < 1e-5 and shift["all_median"] == 0


def test_transfer_curve_lora_targets_reach_the_recipe(tmp_path):
    """``--lora_targets all-linear`` adapts every linear layer (MLP included), not trl's default q/v, and the run
    still writes its checkpoint's probe cell; without the flag the adapter stays on q/v; ``--seed`` reaches the
    recipe (default 0); a rerun trains no further."""
    import json
    import subprocess
    import sys

    out = tmp_path / "curve"
    base = [sys.executable, str(ROOT / "scripts" / "transfer_curve.py"), "--out", str(out), "--model", "tiny",
            "--size", "tiny", "--steps", "1", "--every", "1", "--auc_at", "", "--relabel_copies", "1"]
    targets = {}
    for tag, extra, seed in (("all", ["--lora_targets", "all-linear", "--seed", "3"], "3"), ("qv", [], "0")):
        subprocess.run([*base, "--tag", tag, *extra], check=True, cwd=ROOT, capture_output=True, text=True)
        assert f"--seed {seed} " in (out / "models" / tag / "command.txt").read_text()
        config = json.loads((out / "models" / tag / "checkpoint-1" / "adapter_config.json").read_text())
        targets[tag] = {name.rsplit(".", 1)[-1] for name in config["target_modules"]}
        assert "B" in json.loads((out / "curves" / tag / "step-1.json").read_text())["probe"]
    assert targets["qv"] == {"q_proj", "v_proj"}
    assert targets["all"] == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    # a rerun at the same --steps only evaluates (the recipe refuses a finished run)
    again = subprocess.run([*base, "--tag", "qv"], check=True, cwd=ROOT, capture_output=True, text=True)
    assert sorted(p.name for p in (out / "models" / "qv").glob("checkpoint-*")) == ["checkpoint-1"]
    assert "is trained to --steps 1; evaluating only" in again.stdout


def test_transfer_curve_branches_a_run_at_a_checkpoint_and_goes_on_at_this_commands_rate(tmp_path):
    """``--branch_from a:1 --lr 1e-4`` copies run a's checkpoint-1 and its step-1 cell and trains on from there at
    1e-4: the optimizer and scheduler of its step 2 hold 1e-4 where a's hold a's 1e-3 (transformers alone would
    resume at the checkpoint's rate); a step that is not a checkpoint is refused with the ones there are."""
    import filecmp
    import json
    import subprocess
    import sys

    out = tmp_path / "curve"
    base = [sys.executable, str(ROOT / "scripts" / "transfer_curve.py"), "--out", str(out), "--model", "tiny",
            "--size", "tiny", "--steps", "2", "--every", "1", "--auc_at", "", "--relabel_copies", "1", "--lora_r", "0"]
    subprocess.run([*base, "--tag", "a", "--lr", "1e-3"], check=True, cwd=ROOT, capture_output=True, text=True)
    bad = subprocess.run([*base, "--tag", "b", "--branch_from", "a:3"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and "give TAG:STEP with STEP one of [1, 2]" in bad.stderr, bad.stderr[-2000:]
    subprocess.run([*base, "--tag", "b", "--branch_from", "a:1", "--lr", "1e-4"], check=True, cwd=ROOT,
                   capture_output=True, text=True)
    a, b = out / "models" / "a", out / "models" / "b"
    assert filecmp.cmp(a / "checkpoint-1" / "model.safetensors", b / "checkpoint-1" / "model.safetensors", shallow=False)
    cell = "step-1.json"
    assert (out / "curves" / "b" / cell).read_text() == (out / "curves" / "a" / cell).read_text()
    for run, rate in ((a, 1e-3), (b, 1e-4)):
        optimizer = torch.load(run / "checkpoint-2" / "optimizer.pt", weights_only=True)
        scheduler = torch.load(run / "checkpoint-2" / "scheduler.pt", weights_only=True)
        assert [g["lr"] for g in optimizer["param_groups"]] == pytest.approx([rate] * len(optimizer["param_groups"]))
        assert scheduler["base_lrs"] == pytest.approx([rate] * len(scheduler["base_lrs"])), run
    assert json.loads((b / "checkpoint-2" / "trainer_state.json").read_text())["global_step"] == 2


def test_transfer_curve_trains_one_joint_model_and_evaluates_it_per_family(tmp_path, capsys):
    """``--family wip,sa --relabel_families wip``: one SDLP run on both families' D_cs (WIP relabelled, SA on its
    writers' keys), then each family's probe and held-out detection in its own curve folder, which the plot reads
    with the joint run's loss, the last checkpoint first; SA's D_cs made alone and seeded into the joint folder
    (``ablation_device.sh seed``) is reused as it is; half its steps are on-policy (``--lmbda 0.5``); an unknown
    family is refused before anything runs."""
    import json
    import statistics
    import subprocess
    import sys

    import pyarrow.parquet as pq

    out, sa_out = tmp_path / "joint", tmp_path / "sa"
    script = [sys.executable, str(ROOT / "scripts" / "transfer_curve.py")]
    options = ["--model", "tiny", "--size", "tiny", "--tag", "joint", "--steps", "4", "--every", "2", "--batch", "2",
               "--auc_at", "2,4", "--num_eval", "4", "--eval_tokens", "12", "--gen_batch", "4", "--relabel_copies", "2"]
    # SA's D_cs made alone, then seeded into the joint folder: the joint synthesis only makes WIP's rows
    subprocess.run([*script, "--out", str(sa_out), *options, "--family", "sa", "--data_only"], check=True, cwd=ROOT,
                   capture_output=True)
    subprocess.run(["bash", "scripts/ablation_device.sh", "seed", str(sa_out), str(out)], check=True, cwd=ROOT,
                   capture_output=True)
    cmd = [*script, "--out", str(out), *options]
    run = subprocess.run([*cmd, "--family", "wip,sa", "--relabel_families", "wip", "--lmbda", "0.5"], check=True,
                         cwd=ROOT, capture_output=True, text=True)
    sa_rows = pq.read_table(sa_out / "dcs" / "data.parquet").to_pylist()
    assert f"resuming: {len(sa_rows)} rows already" in run.stdout
    joint_rows = pq.read_table(out / "dcs" / "data.parquet").to_pylist()
    assert [r for r in joint_rows if r["family"] == "sa"] == sa_rows
    assert any(r["family"] == "wip" for r in joint_rows)
    # the last checkpoint is evaluated first, so a run cut short by its time limit still has its result
    steps = [line.split()[2] for line in run.stdout.splitlines() if line.startswith("transfer_curve: step ")]
    assert steps == ["4", "4", "0", "0", "2", "2"]
    command = (out / "models" / "joint" / "command.txt").read_text()
    assert "--families wip sa " in command and "--relabel_families wip " in command and "--lmbda 0.5" in command
    for family in ("wip", "sa"):
        folder = out / "curves" / f"joint-{family}"
        assert json.loads((folder / "run.json").read_text()) == {"model": "joint", "family": family}
        cell = json.loads((folder / "step-4.json").read_text())
        assert cell["detection"]["num_positive"] == 4 and {"A", "B", "C", "plain"} <= set(cell["probe"])
        assert ("transitions" in cell["detection"]) == (family == "sa") == ("by_state" in cell["probe"])
        assert (folder / "answers-step-2.jsonl").exists() and (folder / "step-0.json").exists()
        # each answer's PPL is kept beside it (for --paired), and the cell's median is theirs
        answers = [json.loads(line) for line in (folder / "answers-step-4.jsonl").read_text().splitlines()]
        ppl = [r["ppl_instructed"] for r in answers if r["ppl_instructed"] is not None]
        assert len(ppl) == 4 and abs(statistics.median(ppl) - cell["detection"]["median_ppl_instructed"]) < 1e-9
    curve = _transfer_curve()
    curve.plot(out, str(tmp_path / "joint.png"))
    assert "| joint-sa | 4 |" in capsys.readouterr().out
    bad = subprocess.run([*cmd, "--family", "wip,acrostic"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and "unknown family 'acrostic'" in bad.stderr


def test_transfer_curve_grpo_takes_several_prompts_a_step(tmp_path):
    """``--grpo_from base --prompts 2``: each GRPO step draws two prompts with their ``--generations`` completions,
    so two steps cover the tiny D_cs's four WIP prompts once (the trainer's epoch), and every checkpoint is probed."""
    import json
    import subprocess
    import sys

    out = tmp_path / "curve"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "transfer_curve.py"), "--out", str(out), "--model", "tiny",
                    "--size", "tiny", "--tag", "grpo", "--grpo_from", "base", "--steps", "2", "--every", "2",
                    "--prompts", "2", "--generations", "2", "--completion_tokens", "8", "--auc_at", ""],
                   check=True, cwd=ROOT, capture_output=True, text=True)
    (prompts,) = [row["size_h1"] for row in json.loads((out / "dcs" / "stats.json").read_text()) if row["family"] == "wip"]
    state = json.loads((out / "models" / "grpo" / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and state["epoch"] == 2 * 2 / prompts
    assert "B" in json.loads((out / "curves" / "grpo" / "step-2.json").read_text())["probe"]


def test_transfer_curve_train_tokens_sets_the_dcs_length_and_refuses_a_cached_one_of_another(tmp_path):
    """``--train_tokens`` writes D_cs answers (and the dose cell) of that length under the teacher's delta; the
    same ``--out`` asked for another length or another ``--num_h1`` is refused with the paths to delete, never
    silently reused."""
    import json
    import subprocess
    import sys

    out = tmp_path / "curve"
    cmd = [sys.executable, str(ROOT / "scripts" / "transfer_curve.py"), "--out", str(out), "--model", "tiny",
           "--size", "tiny", "--family", "sa", "--data_only"]
    subprocess.run([*cmd, "--train_tokens", "20"], check=True, cwd=ROOT, capture_output=True, text=True)
    assert json.loads((out / "dcs" / "config.json").read_text())["max_new_tokens"] == 20
    dose = json.loads((out / "cells" / "dose-sa.json").read_text())
    assert [(c["delta"], c["length"]) for c in dose["cells"]] == [(8.0, 20)]
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)  # the tiny size's own length: 16
    assert again.returncode != 0
    assert "with answers of 16 tokens" in again.stderr and "20 tokens" in again.stderr
    assert str(out / "dcs") in again.stderr
    more = subprocess.run([*cmd, "--train_tokens", "20", "--num_h1", "8"], cwd=ROOT, capture_output=True, text=True)
    assert more.returncode != 0 and "8 + 2 rows" in more.stderr, more.stderr  # more answers asked: not the cached ones


def test_transfer_curve_probes_sa_and_completes_a_cached_cell_without_redoing_it(tmp_path):
    """SA checkpoints get the key-swap probe (at sentence openings); a cell cached before SA had one gets the probe
    added and keeps the held-out detection it already had, until a larger ``--num_eval`` asks for a new one."""
    import json
    import subprocess
    import sys

    out = tmp_path / "curve"
    cell = out / "curves" / "sa" / "step-0.json"
    cell.parent.mkdir(parents=True)
    detection = {"roc_auc": 0.5, "roc_auc_ci": [0.4, 0.6], "num_positive": 1, "num_negative": 1}
    cell.write_text(json.dumps({"step": 0, "detection": detection, "seconds": 1.0}))
    command = [sys.executable, str(ROOT / "scripts" / "transfer_curve.py"), "--out", str(out), "--model", "tiny",
               "--size", "tiny", "--family", "sa", "--tag", "sa", "--no_train", "--auc_at", "0", "--eval_tokens", "8"]
    subprocess.run([*command, "--num_eval", "1"], check=True, cwd=ROOT, capture_output=True, text=True)
    row = json.loads(cell.read_text())
    assert row["detection"] == detection  # cached, not regenerated
    assert set(row["probe"]) == {"A", "B", "C", "plain", "by_state"}
    assert "first letter" in row["probe"]["by_state"]["B"]
    assert row["probe"]["plain"][0] == 0.0  # step 0 is the base model: no instruction, no lift
    assert row["seconds"] > 1.0

    subprocess.run([*command, "--num_eval", "3"], check=True, cwd=ROOT, capture_output=True, text=True)
    again = json.loads(cell.read_text())
    assert again["probe"] == row["probe"]  # kept
    assert (again["detection"]["num_positive"], again["detection"]["num_negative"]) == (3, 3)
    assert len((cell.parent / "answers-step-0.jsonl").read_text().splitlines()) == 3


def test_transfer_curve_loss_split_puts_the_teachers_bias_at_sentence_openings(tmp_path):
    """``--loss_split``: at step 0 (student = teacher's weights) SA's loss is the teacher's bias (delta 8) where it is
    active, far above the instruction's own small effect elsewhere; and it names both row sets."""
    import re
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "transfer_curve.py"), "--out", str(tmp_path / "c"),
                           "--model", "tiny", "--size", "tiny", "--family", "sa", "--tag", "sa", "--loss_split", "3"],
                          check=True, cwd=ROOT, capture_output=True, text=True)
    rows = re.findall(r"^\| 0 \| (.+?) \| ([\d.]+) / ([\d.]+) \| (\d+) / (\d+) \|", done.stdout, re.M)
    assert [r[0] for r in rows] == ["train answers, fresh keys", "held-out rows"], done.stdout
    for _, active, rest, n_active, n_rest in rows:
        assert int(n_active) > 0 and int(n_rest) > int(n_active)
        assert float(active) > 10 * float(rest), done.stdout


def test_training_card_says_which_families_were_relabelled():
    """The joint recipe relabels TSP and WIP and keeps SA under its writers' keys; the card says so."""
    from types import SimpleNamespace

    from icw.train.card import _keys

    args = SimpleNamespace(relabel_keys=True, relabel_curriculum=None, relabel_num_keys=0, relabel_copies=8,
                           relabel_keep_original=False, relabel_families=["tsp", "wip"], lmbda=1.0)
    text = _keys("sdlp", args, ["tsp", "wip", "sa"])
    assert text.startswith("the D_H1 answers of TSP, WIP trained under fresh keys of its family (relabel_keys: a new "
                           "key per row, 8 copies of each answer), not the key that wrote it. SA under the keys that "
                           "wrote them, in as many copies.")
    args.relabel_families = None
    assert _keys("sdlp", args, ["tsp", "wip", "sa"]).startswith("each D_H1 answer trained under fresh keys")

