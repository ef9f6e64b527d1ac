"""Learning curves of SDLP on held-out keys (issue 22): one long, resumable run, probed every N steps.

The data are the ablation's (``scripts/ablation.py``): ``D_cs`` on train questions and training keys,
and the probe rows (held-out questions and keys, written by the base model under the bias). A run
trains through ``recipes/sdlp.py`` with a checkpoint every ``--every`` steps; killed, the same command
resumes from the newest checkpoint with the same data order. Then every checkpoint (and step 0, the
base model) gets the key-swap probe (A / B / C / plain, mean and s.e. over rows; SA: at sentence openings) and, at the steps of
``--auc_at``, held-out detection (instructed vs plain answers on held-out questions and keys: ROC-AUC,
TPR@1%FPR with bootstrap CIs). Every result is a cell cached under ``<out>/curves/<tag>/``.

    .venv/bin/python scripts/transfer_curve.py --out runs/curve --tag wip-r16-c8 --steps 600 --every 100
    .venv/bin/python scripts/transfer_curve.py --out runs/curve --tag wip-r16-c8-grpo --grpo_from wip-r16-c8 \
        --steps 100 --every 25                                    # GRPO from that run's last checkpoint
    .venv/bin/python scripts/transfer_curve.py --out runs/curve --plot docs/transfer_curves.png   # all tags
    .venv/bin/python scripts/transfer_curve.py --out runs/curve --tag wip-r16-c8-grpo --weight_shift  # ‖ΔW‖/‖W‖
    .venv/bin/python scripts/transfer_curve.py --out runs/curve-sa192 --family sa --train_tokens 192 --tag sa-full-c8 \
        --loss_split 16                            # the SDLP loss at bias-active positions and elsewhere, per checkpoint
    .venv/bin/python scripts/transfer_curve.py --out runs/curve-sa --family sa --tag sa-r16-orig --steps 400 \
        --auc_at 0,200,400 --num_eval 100 --relabel_copies 0      # SA: the probe at sentence openings

``--lora_r 0`` trains all weights (the frozen teacher is then a copy), ``--lora_targets all-linear`` puts the
adapters on every linear layer instead of q/v, ``--train_tokens 192`` builds ``D_cs`` (and the probe and dose cell)
of 192-token answers instead of the size's, ``--num_h1 800`` of 800 ``D_H1`` answers (and 200 ``D_H0``);
``--relabel_copies`` trains each
``D_H1`` answer under that many fresh keys (prefix-free targets; 0 keeps the keys the answers were written with).
``--curriculum 1,8,0`` trains one key, then eight, then a key per row (one epoch is the curriculum).
``--lmbda 0.5`` trains half the steps on-policy: the student samples the batch's answers from instruction + query
and the teacher scores them (its bias follows the student's tokens).
``--family wip,sa --relabel_families wip`` trains one joint model on both families' ``D_cs``, WIP's answers under
fresh keys and SA's under the keys that wrote them (in as many copies), and evaluates it per family.
``--branch_from wip-full-lr1e-4-c8:400 --lr 5e-5`` goes on from that run's step 400 at another rate (a new ``--tag``).
``--train_seconds`` stops training after that long, saving the step in flight, and evaluates the checkpoints saved
by then (for a time-limited device command; rerunning resumes); ``--device cuda`` trains and evaluates on the GPU
(bf16 autocast for training).

This file trains a run and evaluates its checkpoints; the jobs that only read a run back (``--plot``, ``--paired``,
``--pooled``, ``--weight_shift``, ``--loss_split``) live beside it in ``transfer_analysis.py``, on this command line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from icw.train.common import checkpoints

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ablation  # noqa: E402
from transfer_analysis import (  # noqa: E402  (the jobs that read a run back: --plot, --paired, --pooled, ...)
    load_checkpoint,
    merged,
    paired_comparison,
    plot,
    pooled_detection,
    print_loss_split,
    print_weight_shift,
)

ROOT = Path(__file__).resolve().parents[1]
#: How long a recipe interrupted by --train_seconds gets to finish its step and save it (on this 2-core CPU a
#: SmolLM2 step takes 7-30 s, SDLP to GRPO, and a full fine-tuning checkpoint about 4 s).
STOP_GRACE_SECONDS = 300


def _recipe(cmd: list[str], out: Path, seconds: float = 0) -> None:
    """A recipe in a subprocess, as a user runs it (it resumes from the newest checkpoint of ``out``).

    With ``seconds`` > 0 the recipe is interrupted after that long: it saves the step in flight and stops (a rerun
    resumes from there).
    """
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    print("transfer_curve: " + " ".join(cmd), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "command.txt").write_text(" ".join(cmd) + "\n")
    # a background job of a script starts with SIGINT ignored, and Python then installs no KeyboardInterrupt
    # handler: restore the default so that the interruption below stops the Trainer
    with subprocess.Popen([sys.executable, *cmd], cwd=ROOT, env=env,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) as proc:
        try:
            code = proc.wait(timeout=seconds or None)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)  # like a Ctrl-C: the recipe saves the step in flight, then stops
            try:
                proc.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:  # still no checkpoint: the earlier ones stay
                proc.kill()
            print(f"transfer_curve: training stopped after --train_seconds {seconds:g}; rerun to resume", flush=True)
            return
    if code:
        raise SystemExit(f"transfer_curve: the recipe failed (exit {code}): {' '.join(cmd)}")


def train(args: argparse.Namespace, data: str, out: Path) -> None:
    """SDLP with relabelled keys through ``recipes/sdlp.py``, a checkpoint every ``--every`` steps."""
    cmd = ["recipes/sdlp.py", "--config", "recipes/configs/smollm2-135m/sdlp.yaml",
           "--model_name_or_path", args.base_path, "--dataset_name", data, "--families", *args.families,
           "--output_dir", str(out), "--report_to", "none", "--seed", str(args.seed), *ablation.device_flags(args.device),
           "--save_strategy", "steps", "--save_steps", str(args.every), "--logging_steps", "10", "--resume_from_checkpoint", "last",
           "--learning_rate", str(args.lr), "--max_steps", str(args.steps), "--lr_scheduler_type", "constant",
           "--per_device_train_batch_size", str(args.batch), "--max_response_length", str(args.train_tokens + 1),
           "--loss_chunk_size", "512"]
    if args.relabel_copies:
        cmd += ["--relabel_keys", "true", "--relabel_copies", str(args.relabel_copies)]
        if args.keep_original:
            cmd += ["--relabel_keep_original", "true"]
        if args.relabel_families:
            cmd += ["--relabel_families", *args.relabel_families.split(",")]
    if args.curriculum:
        cmd += ["--relabel_curriculum", *args.curriculum.split(",")]
    if args.lmbda:
        cmd += ["--lmbda", str(args.lmbda)]
    if args.lora_r:
        cmd += ["--use_peft", "true", *lora_flags(args)]
    _recipe(cmd, out, args.train_seconds)


def train_grpo(args: argparse.Namespace, data: str, start: Path, out: Path) -> None:
    """GRPO (trl ``loss_type="grpo"``, the verifier's z as reward) from the merged model ``start``: a new LoRA
    adapter of ``--lora_r``, or all weights with ``--lora_r 0``."""
    weights = ["--use_peft", "true", *lora_flags(args)] if args.lora_r else ["--use_peft", "false"]
    _recipe(["recipes/grpo.py", "--config", "recipes/configs/smollm2-135m/grpo.yaml", "--model_name_or_path",
             str(start), "--dataset_name", data, "--families", *args.families, "--output_dir", str(out), "--seed", str(args.seed),
             "--max_steps", str(args.steps), "--save_steps", str(args.every), "--logging_steps", "5",
             "--resume_from_checkpoint", "last", "--num_generations", str(args.generations),
             "--per_device_train_batch_size", str(args.generations * args.prompts),
             "--gradient_accumulation_steps", "1", "--max_completion_length", str(args.completion_tokens),
             "--min_completion_tokens", str(args.completion_tokens // 2),
             "--learning_rate", str(args.lr), "--gradient_checkpointing", "false", *weights,
             *ablation.device_flags(args.device)], out, args.train_seconds)


def lora_flags(args: argparse.Namespace) -> list[str]:
    """The recipes' LoRA flags: rank, alpha = 2 x rank, and ``--lora_targets`` (none: trl's default, q_proj and
    v_proj for SmolLM2)."""
    rank = args.lora_r
    targets = ["--lora_target_modules", *args.lora_targets.split(",")] if args.lora_targets else []
    return ["--lora_r", str(rank), "--lora_alpha", str(2 * rank), *targets]


def curve_dirs(out: Path, args: argparse.Namespace, tag: str | None = None) -> dict[str, Path]:
    """Where each family's cells of the run (or of the run ``tag``) go: ``<out>/curves/<tag>``, or ``<tag>-<family>``
    per family of a joint model (each with ``run.json``: the model's tag and the family, for the plot's loss curve)."""
    tag = tag or args.tag
    dirs = {f: out / "curves" / (tag if len(args.families) == 1 else f"{tag}-{f}") for f in args.families}
    for family, path in dirs.items():
        path.mkdir(parents=True, exist_ok=True)
        (path / "run.json").write_text(json.dumps({"model": tag, "family": family}))
    return dirs


def branch(out: Path, args: argparse.Namespace, dirs: dict[str, Path]) -> None:
    """Start this run from ``--branch_from TAG:STEP``: that run's checkpoint (weights, optimizer, data order and RNG
    state) and its cells up to STEP are copied here, and training goes on as this command says (the recipe gives a
    resumed run this command's learning rate). Once copied, the run resumes from its own checkpoints."""
    import shutil

    model_dir = out / "models" / args.tag
    if checkpoints(model_dir):
        return
    tag, _, step = args.branch_from.rpartition(":")
    saved = checkpoints(out / "models" / tag)
    if not step.isdigit() or int(step) not in saved:
        raise SystemExit(f"transfer_curve: --branch_from {args.branch_from}: give TAG:STEP with STEP one of "
                         f"{sorted(saved)} (the complete checkpoints of {out / 'models' / tag})")
    step = int(step)
    shutil.copytree(saved[step], model_dir / saved[step].name)
    for family, source in curve_dirs(out, args, tag).items():
        for cell in [*source.glob("step-*.json"), *source.glob("answers-step-*.jsonl")]:
            if int(cell.stem.rsplit("-", 1)[1]) <= step:
                shutil.copy2(cell, dirs[family] / cell.name)


def evaluate(run: ablation.Run, args: argparse.Namespace, dirs: dict[str, Path], step: int, path: Path | None,
             last: int = -1) -> None:
    """The key-swap probe and, at the ``--auc_at`` steps (-1: ``last``), held-out detection of one checkpoint, for
    every family of the run (``dirs``: :func:`curve_dirs`).

    Cached in ``step-<step>.json``; a cached cell gets what it lacks (an SA cell written before the probe's split
    by acrostic state gets the probe, a step newly named in ``--auc_at`` gets its detection, one detected on fewer
    answers than ``--num_eval`` is detected again on that many) and keeps the rest."""
    model = None
    for family, tag_dir in dirs.items():
        cell = tag_dir / f"step-{step}.json"
        row: dict[str, Any] = json.loads(cell.read_text()) if cell.exists() else {"step": step}
        probe_due = "probe" not in row or (family == "sa" and "by_state" not in row["probe"])
        detection_due = ((step in args.auc_at or (step == last and -1 in args.auc_at))
                         and row.get("detection", {}).get("num_positive", 0) < args.num_eval)
        if not (probe_due or detection_due):
            continue
        from icw import ICWKey
        from icw.train.probe import key_swap_probe, other_key

        t0 = time.time()
        base, tok = run.base()
        if model is None:
            model = base if path is None else load_checkpoint(path, base)
        if probe_due:
            probe_rows = run.dose()[family]["probe_rows"]
            probe = key_swap_probe(model, tok, probe_rows, base_model=base, max_response_tokens=args.train_tokens,
                                   other_keys=[other_key(ICWKey.from_string(r["key"]), tok, i)
                                               for i, r in enumerate(probe_rows)])
            row["probe"] = {c: [st.mean, st.stderr] for c, st in probe.stats.items()}
            if probe.by_state:  # SA: [mean, s.e., positions] by the acrostic's state before the opening
                row["probe"]["by_state"] = {c: {state: [st.mean, st.stderr, st.num_positions] for state, st in v.items()}
                                            for c, v in probe.by_state.items()}
        if detection_due:
            row["detection"] = heldout_detection(run, model, tok, args, family, tag_dir / f"answers-step-{step}.jsonl")
        row["seconds"] = round(row.get("seconds", 0) + time.time() - t0, 1)
        cell.write_text(json.dumps(row))
        print(f"transfer_curve: step {step}{'' if len(dirs) == 1 else f' ({family})'}: " + json.dumps(row), flush=True)


def heldout_detection(run: ablation.Run, model: Any, tok: Any, args: argparse.Namespace, family: str,
                      answers: Path) -> dict:
    """Instructed vs plain answers on held-out questions and keys: AUC and TPR@1%FPR, the verdict rate and the
    false-positive rate at alpha = 0.01, answer length and PPL under the base model; the answers go to ``answers``."""
    import numpy as np

    from icw.detection import detection_report
    from icw.generation import generate_responses
    from icw.perplexity import perplexities
    from icw.train.probe import acrostic_transitions
    from icw.verification import verify

    queries, keys = run.eval_items(family, args.num_eval)
    gen = {"max_new_tokens": args.eval_tokens, "batch_size": args.gen_batch, "return_token_ids": True}
    pos, pos_ids = generate_responses(model, tok, queries, keys, "instruction", **gen)
    neg, neg_ids = generate_responses(model, tok, queries, None, "plain", seed=1, **gen)
    # full p-values: SA's come from Monte Carlo over null secrets, and num_null_keys=1 would make every p >= 1/2
    res, res_neg = verify(pos, keys, tok), verify(neg, keys, tok)
    zp, zn = [r.z_score for r in res], [r.z_score for r in res_neg]
    rep = detection_report(zp, zn, num_bootstrap=1000)
    base, _ = run.base()
    batch = 4 if args.device == "cpu" else 32
    # per answer, None where the base model gives none (an empty answer), so that --paired can pair them
    ppl = {side: [p if p is not None and np.isfinite(p) else None
                  for p in perplexities(base, tok, queries, texts, batch_size=batch)]
           for side, texts in (("instructed", pos), ("plain", neg))}
    with answers.open("w") as f:
        for q, k, a, b, r, rn, pa, pb in zip(queries, keys, pos, neg, res, res_neg, ppl["instructed"], ppl["plain"],
                                             strict=True):
            f.write(json.dumps({"query": q, "key": k.to_string(), "instructed": a, "plain": b, "z_instructed": r.z_score,
                                "p_instructed": r.p_value, "z_plain": rn.z_score, "p_plain": rn.p_value,
                                "ppl_instructed": pa, "ppl_plain": pb}) + "\n")
    ppl = {side: [p for p in v if p is not None] for side, v in ppl.items()}
    return {"roc_auc": rep.roc_auc, "roc_auc_ci": list(rep.roc_auc_ci), "tpr_at_fpr": rep.tpr_at_fpr,
            "tpr_at_fpr_ci": list(rep.tpr_at_fpr_ci), "num_positive": len(zp), "num_negative": len(zn),
            "mean_z_instructed": float(np.mean(zp)), "mean_z_plain": float(np.mean(zn)),
            "verdict_rate": float(np.mean([r.p_value <= 0.01 for r in res])),
            "false_positive_rate": float(np.mean([r.p_value <= 0.01 for r in res_neg])),
            "p_value_method": res[0].p_value_method,
            "mean_length_instructed": float(np.mean([len(i) for i in pos_ids])),
            "mean_length_plain": float(np.mean([len(i) for i in neg_ids])),
            "median_ppl_instructed": float(np.median(ppl["instructed"])) if ppl["instructed"] else float("nan"),
            "median_ppl_plain": float(np.median(ppl["plain"])) if ppl["plain"] else float("nan"),
            # SA: hit and repeat rates of the answers' own openings, by what the previous opening did
            **({"transitions": acrostic_transitions(pos, keys)} if family == "sa" else {})}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/curve", help="the ablation folder whose D_cs and probe rows are used")
    parser.add_argument("--tag", default="wip-r16-c8", help="this run's name (its folder under <out>/curves)")
    parser.add_argument("--family", default="wip",
                        help="wip, sa or tsp; several comma-separated train one joint model on all their D_cs, its "
                             "cells per family under <out>/curves/<tag>-<family>")
    parser.add_argument("--size", default="probe", choices=sorted(ablation.SIZES), help="the ablation size of the data")
    parser.add_argument("--train_tokens", type=int, default=None,
                        help="D_cs answer length (and the probe's; the dose cell: the teacher's delta at that length); default: the size's")
    parser.add_argument("--num_h1", type=int, default=None,
                        help="D_H1 answers in D_cs (D_H0: a quarter as many); default: the size's (probe: 160)")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--every", type=int, default=100, help="checkpoint and probe every this many steps")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0, help="the training seed (data order, relabelled keys, LoRA "
                        "init); D_cs and the held-out keys and questions do not depend on it")
    parser.add_argument("--lr", type=float, default=None, help="default: 2e-4 for SDLP, 1e-5 for GRPO")
    parser.add_argument("--lora_r", type=int, default=16, help="LoRA rank; 0 trains all weights")
    parser.add_argument("--lora_targets", help="modules LoRA adapts, e.g. all-linear or q_proj,k_proj,v_proj,o_proj "
                                               "(default: trl's, q_proj and v_proj)")
    parser.add_argument("--relabel_copies", type=int, default=8,
                        help="fresh keys per D_H1 answer; 0 trains each answer under the key it was written with")
    parser.add_argument("--keep_original", action="store_true",
                        help="train each answer under its writer's key too, beside the --relabel_copies fresh ones")
    parser.add_argument("--relabel_families", help="relabel only these comma-separated families' answers (a joint "
                                                   "model: wip); the others train under their writers' keys")
    parser.add_argument("--curriculum", help="pool sizes of a key curriculum, e.g. 1,8,0 (stages in order, 0: a key "
                                             "per row; --relabel_copies copies per stage)")
    parser.add_argument("--lmbda", type=float, default=0.0,
                        help="fraction of steps trained on the student's own samples, scored by the teacher (trl "
                             "GKD's lmbda; 0: every step on D_cs)")
    parser.add_argument("--auc_at", default="0,-1", help="steps with held-out detection (-1: the last)")
    parser.add_argument("--num_eval", type=int, default=60,
                        help="held-out positives (and negatives) for detection; more than a step's cached detection "
                             "had redoes it (and its answers file) at this size")
    parser.add_argument("--eval_tokens", type=int, default=160)
    parser.add_argument("--gen_batch", type=int, default=30, help="answers per generate() call in held-out detection")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--model", default="smollm2", help="smollm2 (embedded), a local folder, or 'tiny' (a pipeline check)")
    parser.add_argument("--train_seconds", type=float, default=0,
                        help="stop training after this many seconds and evaluate what was saved (0: no limit)")
    parser.add_argument("--branch_from", metavar="TAG:STEP",
                        help="start from that run's checkpoint and cells up to STEP and train on as this command says "
                        "(e.g. a lower --lr after the plateau; keep its --seed and data options for the same data order)")
    parser.add_argument("--grpo_from", help="a finished SDLP tag: run GRPO from its newest checkpoint instead "
                                            "('base': from the base model, the ablation's +GRPO row)")
    parser.add_argument("--generations", type=int, default=4, help="GRPO completions per prompt")
    parser.add_argument("--prompts", type=int, default=1, help="GRPO prompts a step (each with --generations "
                                                               "completions: one prompt's group is a noisy advantage)")
    parser.add_argument("--completion_tokens", type=int, default=120, help="GRPO completion length")
    parser.add_argument("--plot", help="write the PNG of every tag to this path (and print the table); no training")
    parser.add_argument("--weight_shift", action="store_true",
                        help="print how far each checkpoint of --tag moved the weights from its start; no training")
    parser.add_argument("--loss_split", type=int, default=0, metavar="N",
                        help="print where each checkpoint's SDLP loss sits (bias-active positions or not) on N training "
                             "answers under fresh keys and N held-out rows; no training")
    parser.add_argument("--paired", nargs=2, metavar=("BEFORE", "AFTER"),
                        help="compare two held-out evaluations of the same questions and keys, paired by question "
                             "(answers-step-<n>.jsonl files); no training")
    parser.add_argument("--pooled", nargs="+", metavar="ANSWERS",
                        help="pool held-out evaluations of the same questions and keys at several checkpoints "
                             "(answers-step-<n>.jsonl files): AUC and verdict rate with a bootstrap over questions; "
                             "no training")
    parser.add_argument("--no_train", action="store_true", help="only evaluate the checkpoints there are")
    parser.add_argument("--data_only", action="store_true", help="only build D_cs and the probe rows, then stop")
    args = parser.parse_args(argv)
    args.auc_at = {int(s) for s in args.auc_at.split(",") if s.strip()}
    from icw.keys import FAMILIES

    args.families = [f.strip() for f in args.family.split(",") if f.strip()]
    for family in args.families + (args.relabel_families or "").split(","):
        if family and family not in FAMILIES:
            parser.error(f"unknown family {family!r}: give wip, sa or tsp (comma-separated for a joint model)")
    if args.loss_split and len(args.families) != 1:
        parser.error("--loss_split takes one --family")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = Path(args.out)
    if args.plot:
        plot(out, args.plot)
        return
    if args.paired:
        print(json.dumps(paired_comparison(*map(Path, args.paired)), indent=1))
        return
    if args.pooled:
        print(json.dumps(pooled_detection(list(map(Path, args.pooled))), indent=1))
        return
    run = ablation.Run(argparse.Namespace(size=args.size, device=args.device, model=args.model, out=str(out),
                                          stop_after=0, variants=["base"], families=",".join(args.families),
                                          relabel_copies=args.relabel_copies))
    if args.train_tokens:  # the dose cell then shows what the teacher's own bias does at that length
        from icw.train.hparams import TRAIN_DELTA

        run.size = replace(run.size, train_tokens=args.train_tokens, dose_lengths=[args.train_tokens],
                           dose_deltas=sorted({TRAIN_DELTA[f] for f in args.families}))
    if args.num_h1:
        run.size = replace(run.size, num_h1=args.num_h1, num_h0=args.num_h1 // 4)
    args.train_tokens, args.base_path = run.size.train_tokens, run.base_path
    if args.weight_shift:
        print_weight_shift(out / "models" / args.tag, run.base()[0])
        return
    data = run.dcs()
    built = {row["family"] for row in json.loads((Path(data) / "stats.json").read_text())}
    if not set(args.families) <= built:
        raise SystemExit(f"transfer_curve: {data} holds D_cs of {sorted(built)}, not {args.family}: "
                         "give each family (or joint set of families) its own --out")
    run.dose()
    if args.data_only:
        return
    model_dir = out / "models" / args.tag
    if args.loss_split:
        print_loss_split(run, args, model_dir, args.loss_split)
        return
    dirs = curve_dirs(out, args)
    if args.branch_from:
        if args.grpo_from:
            parser.error("--branch_from continues an SDLP run; --grpo_from starts GRPO: give one")
        branch(out, args, dirs)
    if args.lr is None:
        args.lr = 1e-5 if args.grpo_from else 2e-4
    if args.no_train:
        pass
    elif max(checkpoints(model_dir), default=0) >= args.steps:  # the recipe refuses a finished run
        print(f"transfer_curve: {model_dir} is trained to --steps {args.steps}; evaluating only", flush=True)
    elif args.grpo_from:
        start = Path(args.base_path) if args.grpo_from == "base" else merged(out / "models" / args.grpo_from, *run.base())
        train_grpo(args, data, start, model_dir)
    else:
        train(args, data, model_dir)
    saved = checkpoints(model_dir)
    last = max(saved, default=0)
    # the last checkpoint first: a call cut short by its time limit still has the run's result
    if last:
        evaluate(run, args, dirs, last, saved[last], last)
    if args.grpo_from in (None, "base"):  # GRPO's step 0 from SDLP is that run's last step, probed there
        evaluate(run, args, dirs, 0, None, last)
    for step, path in sorted(saved.items()):
        evaluate(run, args, dirs, step, path, last)


if __name__ == "__main__":
    main()
