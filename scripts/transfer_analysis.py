"""What the runs of ``scripts/transfer_curve.py`` left, read back: its analysis jobs, none of which trains.

``transfer_curve.py`` trains a run and writes its cells; these read the checkpoints, cells and answer files it
wrote. Each is one of that command's flags:

* ``--plot PNG``: probe B and A, held-out AUC and the training signal of every tag, and the table (:func:`plot`);
* ``--paired BEFORE AFTER``: two held-out evaluations of the same questions and keys, paired by question
  (:func:`paired_comparison`);
* ``--pooled ANSWERS...``: several checkpoints' evaluations pooled, a bootstrap over questions
  (:func:`pooled_detection`);
* ``--weight_shift``: how far each checkpoint moved the weights from its start (:func:`print_weight_shift`);
* ``--loss_split N``: where each checkpoint's SDLP loss sits, bias-active positions or not (:func:`print_loss_split`).

It also turns checkpoints into models (:func:`load_checkpoint`, :func:`merged`), which evaluation and GRPO's start
share. ``scripts/`` is not a package: ``transfer_curve.py`` puts this folder on ``sys.path`` and imports it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from icw.train.common import checkpoints

if TYPE_CHECKING:
    import ablation


def merged(tag_dir: Path, base: Any, tok: Any) -> Path:
    """The newest checkpoint of a run merged into full weights (``<run>/merged``), the start of GRPO."""
    path = tag_dir / "merged"
    if not (path / "config.json").exists():
        step, ckpt = max(checkpoints(tag_dir).items())
        load_checkpoint(ckpt, base).save_pretrained(path)
        tok.save_pretrained(path)
        (path / "icw_from_checkpoint.txt").write_text(f"{ckpt}\n")
    return path


def start_model(path: Path, base: Any) -> Any:
    """The weights a checkpoint trained from: the saved model its run started from (GRPO's merged SDLP model, named
    by the adapter or, for all weights, by the run's ``command.txt``), else the base (SDLP)."""
    from transformers import AutoModelForCausalLM

    config, command = path / "adapter_config.json", path.parent / "command.txt"
    start = (json.loads(config.read_text()).get("base_model_name_or_path") or "") if config.exists() else ""
    if not start and command.exists():
        words = command.read_text().split()
        start = words[words.index("--model_name_or_path") + 1] if "--model_name_or_path" in words else ""
    if start and (Path(start) / "config.json").exists():
        return AutoModelForCausalLM.from_pretrained(start).to(base.device).eval()
    return base


def load_checkpoint(path: Path, base: Any) -> Any:
    """A checkpoint as a model: an adapter on (a copy of) the model it trained from, merged; or the full weights."""
    import copy

    from transformers import AutoModelForCausalLM

    if (path / "adapter_config.json").exists():
        from peft import PeftModel

        start = start_model(path, base)
        model = copy.deepcopy(base) if start is base else start
        return PeftModel.from_pretrained(model, str(path)).merge_and_unload().eval()

    return AutoModelForCausalLM.from_pretrained(str(path)).to(base.device).eval()


def weight_shift(start: Any, model: Any, lora_modules: tuple[str, ...] = ("q_proj", "v_proj")) -> dict[str, float]:
    """How far training moved the weights: ``||W - W_start||_F / ||W_start||_F`` per matrix, its median and max
    over the projections the LoRA recipes train (``lora_modules``) and its median over every matrix.

    A yardstick for runs that change nothing measurable: an update too small to matter (the learning rate) is
    told apart from one that moved the weights without moving the behaviour.
    """
    import statistics

    import torch

    before = dict(start.named_parameters())
    ratios = {}
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if weight.ndim == 2 and name in before:
                ratios[name] = float((weight - before[name]).norm() / before[name].norm())
    lora = [r for name, r in ratios.items() if any(m in name for m in lora_modules)]
    return {"lora_median": statistics.median(lora), "lora_max": max(lora), "all_median": statistics.median(ratios.values())}


def print_weight_shift(model_dir: Path, base: Any) -> None:
    """The table of :func:`weight_shift` for every checkpoint of a run, each against the model it trained from."""
    saved = checkpoints(model_dir)
    if not saved:
        raise SystemExit(f"transfer_curve: no checkpoint under {model_dir}")
    print("| step | median ‖ΔW‖/‖W‖, q/v projections | max, q/v | median, every matrix |\n|---|---|---|---|")
    for step, path in sorted(saved.items()):
        shift = weight_shift(start_model(path, base), load_checkpoint(path, base))
        print(f"| {step} | {shift['lora_median']:.2e} | {shift['lora_max']:.2e} | {shift['all_median']:.2e} |", flush=True)


def loss_split(model: Any, base: Any, tok: Any, rows: list[dict], family: str, max_tokens: int) -> dict[str, float]:
    """Where a model's SDLP loss sits: the mean per-position KL(teacher || student) at positions where the teacher's
    bias is active (SA: sentence openings; WIP and TSP: every position) and at the others, over ``rows`` (D_H1 rows:
    query, key, response), with the training recipe's delta and top-k; also each part's share per row."""
    import torch
    from datasets import Dataset

    from icw.train.sdlp import SDLPCollator, SDLPConfig, sdlp_loss, tokenize_dataset

    config = SDLPConfig(output_dir="unused", max_response_length=max_tokens + 1, report_to="none")
    ds = tokenize_dataset(Dataset.from_list([{"family": family, "label": 1, "query": r["query"], "key": r["key"],
                                              "response": r["response"]} for r in rows]),
                          tok, config.instruction_template, config.max_response_length, config.max_prompt_length)
    collate = SDLPCollator(tok, base.config.vocab_size, config)
    sums, counts = {"active": 0.0, "rest": 0.0}, {"active": 0, "rest": 0}
    with torch.no_grad():
        for start in range(0, len(ds), 4):
            batch = collate([ds[i] for i in range(start, min(start + 4, len(ds)))])
            index, responses = batch["bias_index"], batch["response_mask"].bool()
            logits = {}
            for side, m in (("teacher", base), ("student", model)):
                out = m(input_ids=batch[f"{side}_input_ids"], attention_mask=batch[f"{side}_attention_mask"]).logits
                logits[side] = out.gather(1, batch[f"{side}_positions"][..., None].expand(-1, -1, out.shape[-1]))
            biased = batch["bias_rows"][index]  # (B, T, V): the collator sizes its rows to the model's vocabulary
            delta = biased.float() * batch["bias_values"][index][..., None]
            active = biased.any(-1) & responses
            for part, mask in (("active", active), ("rest", responses & ~active)):
                sums[part] += float(sdlp_loss(logits["student"], logits["teacher"], mask, delta,
                                              config.top_k(family))) * len(index)
                counts[part] += int(mask.sum())
    total = sum(sums.values())
    return {**{f"kl_per_position_{k}": sums[k] / max(counts[k], 1) for k in sums},
            **{f"positions_{k}": counts[k] for k in counts}, "loss_per_row": total / len(ds),
            "share_active": sums["active"] / total if total else float("nan")}


def print_loss_split(run: ablation.Run, args: argparse.Namespace, model_dir: Path, num_rows: int) -> None:
    """The table of :func:`loss_split` at step 0 and every checkpoint, on training answers under fresh keys (keys no
    training row had) and on the probe's held-out rows (held-out questions and keys)."""
    from icw.train.common import load_dcs
    from icw.train.transfer import relabel_keys

    base, tok = run.base()
    (family,) = args.families
    train = relabel_keys(load_dcs(run.dcs(), [family], label=1).select(range(num_rows)), tok, seed=777_777)
    sets = {"train answers, fresh keys": [dict(r) for r in train],
            "held-out rows": run.dose()[family]["probe_rows"][:num_rows]}
    print("| step | rows | KL per position, bias active / elsewhere | positions active / elsewhere "
          "| loss per row | share at active positions |\n|---|---|---|---|---|---|")
    for step, path in [(0, None), *sorted(checkpoints(model_dir).items())]:
        model = base if path is None else load_checkpoint(path, base)
        for name, rows in sets.items():
            r = loss_split(model, base, tok, rows, family, args.train_tokens)
            print(f"| {step} | {name} | {r['kl_per_position_active']:.3f} / {r['kl_per_position_rest']:.3f} "
                  f"| {r['positions_active']} / {r['positions_rest']} | {r['loss_per_row']:.2f} "
                  f"| {r['share_active']:.2f} |", flush=True)


def training_log(model_dir: Path) -> list[dict]:
    """The trainer's log history at its newest checkpoint (empty when there is none)."""
    found = checkpoints(model_dir)
    if not found:
        return []
    return json.loads((found[max(found)] / "trainer_state.json").read_text())["log_history"]


def plot(out: Path, target: str) -> None:
    """Probe B and A, held-out AUC and the training signal against step for
    every tag under ``out/curves``; one PNG, one table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tags = sorted(p for p in (out / "curves").iterdir() if p.is_dir())
    fig, axes = plt.subplots(1, 4, figsize=(20, 4))
    lines = ["| Run | step | A | B (instruction) | C (prefix) | plain | held-out AUC (95% CI) | TPR@1%FPR | verdict@0.01 "
             "| FPR@0.01 | median PPL instructed / plain | mean length instructed / plain |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for index, tag in enumerate(tags):
        cells = sorted((json.loads(p.read_text()) for p in tag.glob("step-*.json")), key=lambda c: c["step"])
        if not cells:
            continue
        color = f"C{index % 10}"  # one colour per run in every panel, also where a run has no AUC
        meta = tag / "run.json"  # a joint model's curves, one per family, share its training log
        history = training_log(out / "models" / (json.loads(meta.read_text())["model"] if meta.exists() else tag.name))
        signal = "reward" if any("reward" in h for h in history) else "loss"
        logged = [h for h in history if signal in h]
        axes[3].plot([h["step"] for h in logged], [h[signal] for h in logged], label=f"{tag.name} ({signal})", color=color)
        probed = [c for c in cells if "probe" in c]
        for ax, cond in zip(axes[:2], ("B", "A"), strict=True):
            if probed:
                ax.errorbar([c["step"] for c in probed], [c["probe"][cond][0] for c in probed], marker="o", capsize=3,
                            yerr=[2 * c["probe"][cond][1] for c in probed], label=tag.name, color=color)
        detected = [c for c in cells if "detection" in c]
        if detected:
            auc = [c["detection"]["roc_auc"] for c in detected]
            lo, hi = zip(*(c["detection"]["roc_auc_ci"] for c in detected), strict=True)
            axes[2].errorbar([c["step"] for c in detected], auc, marker="o", capsize=3, label=tag.name, color=color,
                             yerr=[[a - low for a, low in zip(auc, lo, strict=True)],
                                   [high - a for a, high in zip(auc, hi, strict=True)]])
        for c in cells:
            det = c.get("detection")
            probe = " | ".join("{:+.3f} ± {:.3f}".format(*c["probe"][k]) if "probe" in c else "n/a"
                               for k in ("A", "B", "C", "plain"))
            auc = f"{det['roc_auc']:.3f} ({det['roc_auc_ci'][0]:.2f}-{det['roc_auc_ci'][1]:.2f})" if det else ""
            tpr = (f"{det['tpr_at_fpr']:.3f} ({det['tpr_at_fpr_ci'][0]:.2f}-{det['tpr_at_fpr_ci'][1]:.2f})"
                   if det and det["num_negative"] >= 100 else ("n/e" if det else ""))
            verdict = f"{det['verdict_rate']:.3f}" if det else ""
            fpr = f"{det['false_positive_rate']:.3f}" if det and "false_positive_rate" in det else ""
            ppl = (f"{det['median_ppl_instructed']:.2f} / {det['median_ppl_plain']:.2f}"
                   if det and "median_ppl_plain" in det else "")
            length = (f"{det['mean_length_instructed']:.0f} / {det['mean_length_plain']:.0f}"
                      if det and "mean_length_plain" in det else "")
            lines.append(f"| {tag.name} | {c['step']} | {probe} | {auc} | {tpr} | {verdict} | {fpr} | {ppl} | {length} |")
    titles = ("B: prompt K', scored on K' (reads the instruction)", "A: prompt K, scored on K",
              "held-out ROC-AUC, instructed vs plain (95% CI)", "training loss (SDLP) / mean reward z (GRPO)")
    for i, (ax, title) in enumerate(zip(axes, titles, strict=True)):
        if i < 2:
            ax.axhline(0, color="grey", lw=0.8)
            ax.set_ylabel("log-odds lift over the base (± 2 s.e.)")
            if not ax.get_legend_handles_labels()[0]:
                ax.text(0.5, 0.5, "no key-swap probe in these runs", ha="center",
                        transform=ax.transAxes)
        if i == 2:
            ax.axhline(0.5, color="grey", lw=0.8)
        ax.set_xlabel("training step")
        ax.set_title(title, fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    print("\n".join(lines))
    print(f"\nwrote {target}")


def paired_comparison(before: Path, after: Path, alpha: float = 0.01) -> dict[str, float]:
    """Two held-out evaluations of the same questions and keys (``answers-step-<n>.jsonl`` files), paired by question.

    Verdicts (p <= ``alpha``) by the exact McNemar test (null: a question flagged only before is as likely as one
    flagged only after; two-sided binomial over the discordant pairs) and instructed z by the Wilcoxon signed-rank
    test (null: the paired differences are symmetric about 0). Sampling alone moves answers across alpha, so a
    verdict rate's change means something only against its discordant pairs. Where both files give each answer's
    perplexity under the base model, its ratio after / before is paired the same way (Wilcoxon on the log ratios),
    for the instructed and the plain answers.
    """
    import statistics

    from scipy.stats import binomtest, wilcoxon

    rows = held_out_answers([before, after])
    flags = [[r["p_instructed"] <= alpha for r in side] for side in rows]
    only_before = sum(a and not b for a, b in zip(*flags, strict=True))
    only_after = sum(b and not a for a, b in zip(*flags, strict=True))
    diffs = [b["z_instructed"] - a["z_instructed"] for a, b in zip(*rows, strict=True)]
    return {"questions": len(diffs), "flagged_both": sum(a and b for a, b in zip(*flags, strict=True)),
            "flagged_only_before": only_before, "flagged_only_after": only_after,
            "mcnemar_p": binomtest(only_after, only_before + only_after).pvalue if only_before + only_after else 1.0,
            "mean_z_difference": statistics.mean(diffs), "median_z_difference": statistics.median(diffs),
            "wilcoxon_p": float(wilcoxon(diffs).pvalue) if any(diffs) else 1.0, **paired_perplexity(*rows)}


def held_out_answers(paths: list[Path]) -> list[list[dict]]:
    """The rows of several ``answers-step-<n>.jsonl`` files, refused unless all hold the same questions and keys in
    the same order (evaluations of one held-out set, so that answers can be paired or pooled by question)."""
    rows = [[json.loads(line) for line in path.read_text().splitlines()] for path in paths]
    for path, side in zip(paths[1:], rows[1:], strict=True):
        if [(r["query"], r["key"]) for r in side] != [(r["query"], r["key"]) for r in rows[0]]:
            raise SystemExit(f"transfer_curve: {paths[0]} and {path} do not hold the same questions and keys in order")
    return rows


def pooled_detection(paths: list[Path], alpha: float = 0.01, num_bootstrap: int = 2000, seed: int = 0) -> dict:
    """Held-out evaluations of the same questions and keys at several checkpoints, pooled: ROC-AUC of the instructed
    against the plain answers' z and the verdict rate (p <= ``alpha``) of each side, with 95% percentile intervals
    from a bootstrap over questions. A question's answers at every checkpoint are resampled together, since they
    share its key and topic and are not independent; ``times_flagged[j]`` counts the questions whose instructed
    answer is flagged at exactly j checkpoints (against a binomial at the pooled rate, it shows whether some
    question-key pairs are easier than others)."""
    import numpy as np
    from sklearn.metrics import roc_auc_score

    rows = held_out_answers(paths)
    z_instructed, z_plain, p_instructed, p_plain = (np.array([[r[name] for r in side] for side in rows])
                                                    for name in ("z_instructed", "z_plain", "p_instructed", "p_plain"))
    flagged = p_instructed <= alpha
    num_questions = flagged.shape[1]

    def auc(questions: np.ndarray) -> float:
        positive, negative = z_instructed[:, questions].ravel(), z_plain[:, questions].ravel()
        return float(roc_auc_score(np.r_[np.ones(positive.size), np.zeros(negative.size)], np.r_[positive, negative]))

    rng = np.random.default_rng(seed)
    boot = np.array([(auc(q), flagged[:, q].mean()) for q in (rng.integers(0, num_questions, num_questions)
                                                              for _ in range(num_bootstrap))])
    low, high = np.percentile(boot, [2.5, 97.5], axis=0).tolist()
    return {"checkpoints": len(paths), "questions": num_questions, "roc_auc": auc(np.arange(num_questions)),
            "roc_auc_ci": [low[0], high[0]], "verdict_rate": float(flagged.mean()), "verdict_rate_ci": [low[1], high[1]],
            "false_positive_rate": float((p_plain <= alpha).mean()), "mean_z_instructed": float(z_instructed.mean()),
            "mean_z_plain": float(z_plain.mean()),
            "times_flagged": np.bincount(flagged.sum(axis=0), minlength=len(paths) + 1).tolist()}


def paired_perplexity(before: list[dict], after: list[dict]) -> dict[str, float]:
    """Median ratio after / before of each answer's perplexity, and the Wilcoxon p of the log ratios, per side
    (answers that either file gives no perplexity are left out; a file written before PPL was stored: nothing)."""
    import math
    import statistics

    from scipy.stats import wilcoxon

    result = {}
    for side in ("instructed", "plain"):
        pairs = [(a.get(f"ppl_{side}"), b.get(f"ppl_{side}")) for a, b in zip(before, after, strict=True)]
        logs = [math.log(b / a) for a, b in pairs if a and b]
        if logs:
            result |= {f"ppl_{side}_answers": len(logs), f"median_ppl_ratio_{side}": math.exp(statistics.median(logs)),
                       f"ppl_{side}_wilcoxon_p": float(wilcoxon(logs).pvalue) if any(logs) else 1.0}
    return result
