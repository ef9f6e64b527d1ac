"""``icw bench compare RUN_DIR RUN_DIR ...``: training stages side by side, each paired with the one before it.

ICWBench runs of the stages of one model (Base, +SDLP, +SDLP+GRPO) on the same dataset hold answers to
the same questions under the same keys, so a stage's effect is measured on pairs, not on two samples:

* instructed z: the Wilcoxon signed-rank test of ``z_after - z_before`` over the paired positives
  (null: the differences are symmetric about 0);
* verdicts (``p_value <= alpha``) of the instructed answers: the exact McNemar test (null: a question
  flagged only after is as likely as one flagged only before; two-sided binomial over the discordant pairs);
* perplexity of the instructed answers (under the run's ``--ppl_models``): the median ratio after / before of
  each answer's perplexity, with the Wilcoxon test of the log ratios.

Beside them each stage keeps its own ``icw bench report`` summary (AUC and TPR@1%FPR with bootstrap
intervals, verdict TPR and FPR with Clopper-Pearson intervals), its median perplexity as a multiple of
the first run's and its share of looping answers (seq-rep-4 >= 0.5). Writes ``stages.md`` and ``stages.json`` into ``--out`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..argtypes import open_unit, positive_int
from ..keys import FAMILIES, FAMILY_NAMES
from .report import summarize
from .runner import QUALITY, load_records


def scored_answers(run_dir: Path) -> tuple[dict[tuple, dict], dict[tuple, float]]:
    """A run's unattacked scored records, and its instructed answers' perplexities (mean over reference models),
    by (family, id, role).

    Args:
        run_dir (`Path`): an ``icw bench run`` folder (perplexities only where it ran ``--ppl_models``).
    """
    records = {(r["family"], r["id"], r["role"]): r for r in load_records(run_dir)
               if r.get("attack", "none") == "none" and r.get("z_score") is not None}
    ppl: dict[tuple, list[float]] = {}
    if (run_dir / QUALITY).exists():
        for q in load_records(run_dir, QUALITY):
            if q.get("metric") == "ppl" and q.get("value") is not None:  # "attack" holds "ppl:<reference>"
                ppl.setdefault((q["family"], q["id"], q["role"]), []).append(q["value"])
    return records, {k: float(np.mean(v)) for k, v in ppl.items()}


def paired_stage_tests(before: str | Path, after: str | Path, alpha: float = 0.01) -> dict[str, dict[str, Any]]:
    """Per family, the paired tests of ``after`` against ``before`` (see the module docstring).

    Args:
        before (`str` or `Path`): the earlier stage's ``icw bench run`` folder.
        after (`str` or `Path`): the later stage's folder, run on the same dataset.
        alpha (`float`, defaults to 0.01): the verdicts' significance level.
    """
    from scipy.stats import binomtest, wilcoxon

    (rec_a, ppl_a), (rec_b, ppl_b) = scored_answers(Path(before)), scored_answers(Path(after))
    out: dict[str, dict[str, Any]] = {}
    for family in FAMILIES:
        ids = sorted(k for k in rec_a.keys() & rec_b.keys() if k[0] == family and k[2] == "positive")
        if not ids:
            continue
        diffs = [rec_b[k]["z_score"] - rec_a[k]["z_score"] for k in ids]
        flagged = [(rec_a[k]["p_value"] <= alpha, rec_b[k]["p_value"] <= alpha) for k in ids]
        only_before, only_after = sum(a and not b for a, b in flagged), sum(b and not a for a, b in flagged)
        tests: dict[str, Any] = {
            "num_pairs": len(ids), "mean_z_change": float(np.mean(diffs)),
            "wilcoxon_p": float(wilcoxon(diffs).pvalue) if any(diffs) else 1.0,
            "flagged_only_before": only_before, "flagged_only_after": only_after,
            "mcnemar_p": float(binomtest(only_after, only_before + only_after).pvalue) if only_before + only_after
            else 1.0}
        logs = [math.log(ppl_b[k] / ppl_a[k]) for k in ids if k in ppl_a and k in ppl_b]
        if logs:
            tests["ppl_ratio"] = float(math.exp(np.median(logs)))
            tests["ppl_ratio_p"] = float(wilcoxon(logs).pvalue) if any(logs) else 1.0
        out[family] = tests
    return out


def median_perplexity(run_dir: str | Path) -> dict[str, float]:
    """Per family, the median perplexity of a run's instructed answers.

    Args:
        run_dir (`str` or `Path`): an ``icw bench run`` folder whose run measured perplexity (``--ppl_models``).
    """
    out: dict[str, list[float]] = {}
    for (family, _, _), value in scored_answers(Path(run_dir))[1].items():
        out.setdefault(family, []).append(value)
    return {family: float(np.median(values)) for family, values in out.items()}


def compare_stages(run_dirs: Sequence[str | Path], labels: Sequence[str], num_bootstrap: int = 1000,
                   alpha: float = 0.01) -> dict[str, Any]:
    """The stages' summaries, perplexities and paired tests (each stage against the one before it).

    Args:
        run_dirs (`Sequence[str | Path]`): the stages' ``icw bench run`` folders, first to last.
        labels (`Sequence[str]`): a name per stage (``Base``, ``+SDLP``, ...).
        num_bootstrap (`int`, defaults to 1000): bootstrap replicates of the intervals.
        alpha (`float`, defaults to 0.01): the verdicts' significance level.
    """
    if len(labels) != len(run_dirs):
        raise ValueError(f"{len(run_dirs)} run folders but {len(labels)} labels: give one label per run")
    stages = []
    for i, (run_dir, label) in enumerate(zip(run_dirs, labels, strict=True)):
        summary = summarize(run_dir, num_bootstrap, alpha)
        stage = {"label": label, "run_dir": str(run_dir), "model": summary["model"],
                 "families": summary["families"], "median_ppl": median_perplexity(run_dir)}
        if i:
            stage["paired"] = paired_stage_tests(run_dirs[i - 1], run_dir, alpha)
        stages.append(stage)
    return {"alpha": alpha, "stages": stages}


def _cell(value: Any, ci: Any = None, digits: int = 3) -> str:
    if value is None:
        return "not estimable"
    text = f"{value:.{digits}f}"
    return f"{text} ({ci[0]:.{digits - 1}f}-{ci[1]:.{digits - 1}f})" if ci else text


def markdown(result: dict[str, Any]) -> str:
    """The stages as one table per family: detection, fluency and the paired change from the stage before.

    Args:
        result (`dict`): what :func:`compare_stages` returns.
    """
    stages, alpha = result["stages"], result["alpha"]
    lines = []
    for family in FAMILIES:
        rows = [s for s in stages if family in s["families"]]
        if not rows:
            continue
        base_ppl = rows[0]["median_ppl"].get(family)
        lines += [f"### {FAMILY_NAMES[family]} ({family.upper()})", "",
                  f"| stage | answers | AUC (95% CI) | TPR@1%FPR (95% CI) | verdict TPR / FPR at p <= {alpha} | "
                  "median PPL of instructed answers (x first) | looping | paired change from the stage before |",
                  "|---|---|---|---|---|---|---|---|"]
        for s in rows:
            f, ppl = s["families"][family], s["median_ppl"].get(family)
            ratio = f"{ppl:.2f} ({ppl / base_ppl:.2f}x)" if ppl and base_ppl else "not measured"
            looping = f.get("looping_by_model") or {}
            loop_share = f"{np.mean(list(looping.values())):.2f}" if looping else "not measured"
            paired = (s.get("paired") or {}).get(family)
            change = "" if not paired else (
                f"z {paired['mean_z_change']:+.2f} (Wilcoxon p {paired['wilcoxon_p']:.2g}); flagged only after "
                f"{paired['flagged_only_after']} vs only before {paired['flagged_only_before']} (McNemar p "
                f"{paired['mcnemar_p']:.2g})" + (f"; PPL x{paired['ppl_ratio']:.2f} (p {paired['ppl_ratio_p']:.2g})"
                                                 if "ppl_ratio" in paired else ""))
            lines.append(f"| {s['label']} | {f['num_positive']} + {f['num_negative']} | "
                         f"{_cell(f['roc_auc'], f.get('roc_auc_ci'))} | {_cell(f.get('tpr_at_fpr'), f.get('tpr_at_fpr_ci'))} | "
                         f"{_cell(f.get('verdict_tpr'), digits=2)} / {_cell(f.get('verdict_fpr'), digits=2)} | "
                         f"{ratio} | {loop_share} | {change} |")
        lines.append("")
    if any(f.get("looping_by_model") for s in stages for f in s["families"].values()):
        lines += ["Looping: the share of instructed answers with seq-rep-4 >= 0.5 (perplexity reads a loop as fluent).",
                  ""]
    return "\n".join(lines)


def _compare_command(args: argparse.Namespace) -> None:
    result = compare_stages(args.run_dirs, args.labels or [Path(d).name for d in args.run_dirs], args.num_bootstrap,
                            args.alpha)
    out = Path(args.out or args.run_dirs[-1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "stages.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    text = markdown(result)
    (out / "stages.md").write_text(text, encoding="utf-8")
    print(text)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``icw bench compare`` to the CLI's subparsers."""
    p = sub.add_parser("compare", help="training stages side by side (Base, +SDLP, +SDLP+GRPO), each paired with "
                       "the stage before it", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dirs", nargs="+", help="`icw bench run` folders of the stages, first to last, on one dataset")
    p.add_argument("--labels", nargs="+", help="a name per stage (default: the folders' names)")
    p.add_argument("--out", help="where stages.md and stages.json go (default: the last run folder)")
    p.add_argument("--num-bootstrap", type=positive_int, default=1000, help="bootstrap replicates for the intervals")
    p.add_argument("--alpha", type=open_unit, default=0.01, help="significance level of the verdicts")
    p.set_defaults(func=_compare_command)
