"""``icw bench report RUN_DIR``: the results of ``icw bench run`` as tables, figures and JSON.

Writes into the run directory:

* ``results.json``: the summary the model-card command reads (format: results_schema);
* ``report.md``: detection in the layout of the paper's Table 2 (ROC-AUC and TPR@1%FPR per
  family), the verdict-based TPR and FPR of the exact p-values at ``alpha`` with Clopper-Pearson
  intervals, quality in the layout of Table 3 (perplexity per reference model, the four judge
  scores and their mean; beside them the share of looping answers, seq-rep-4 >= 0.5, which perplexity
  reads as fluent), mean z of positives vs negatives, AUC after each attack, and the
  evasion success rate (ESR) of every attack at utility and, when the judge scored the attacks
  (``icw bench run --attacks ... --judge-url ...``), Coverage constraints (:func:`evasion`);

TPR@1%FPR needs at least :data:`MIN_NEGATIVES_FOR_TPR_AT_1FPR` negatives: with fewer, the 1% point of
the negatives is the largest negative itself, so it is reported as not estimable (``null`` in
``results.json``) rather than as a misleading 1.000 [1.000, 1.000]. Every number comes with its
interval.
* ``roc_<family>.png`` and ``z_hist_<family>.png`` (matplotlib, Agg backend).

All statistics come from :func:`icw.detection.detection_report` on paired scores.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..argtypes import open_unit, positive_int
from ..jsonl import read_json_object
from ..keys import FAMILIES, FAMILY_NAMES, as_key
from ..text import sentence_initial_spans
from .quality import JUDGE_DIMENSIONS, LOOPING_REP, REPETITION_N
from .runner import QUALITY, RESPONSES, RUN_CONFIG, load_records
from .scoring import detection_summary, paired_scores

#: Below this many negatives an empirical 1% false-positive threshold does not exist.
MIN_NEGATIVES_FOR_TPR_AT_1FPR = 100
_NOT_ESTIMABLE = "not estimable"
_JUDGE_SHORT = {"relevance": "R", "clarity": "C", "informativeness": "I", "factual_correctness": "FC"}


def verdict_rates(records: list[dict[str, Any]], family: str, alpha: float, confidence: float = 0.95
                  ) -> dict[str, Any] | None:
    """Verdict-based TPR and FPR at ``alpha`` (``p_value <= alpha``) on the paired queries of one family,
    each with a Clopper-Pearson interval (``scipy.stats.binomtest``).

    Args:
        records (`list[dict]`): the run's scored records.
        family (`str`): the family.
        alpha (`float`): the verdict's significance level.
        confidence (`float`, defaults to 0.95): the intervals' confidence level.
    """
    from scipy.stats import binomtest

    pos: dict[str, float] = {}
    neg: dict[str, float] = {}
    for r in records:
        if r.get("family") != family or r.get("p_value") is None or r.get("attack", "none") != "none":
            continue
        (pos if r["role"] == "positive" else neg)[r["id"]] = r["p_value"]
    ids = sorted(set(pos) & set(neg))
    if not ids:
        return None
    out: dict[str, Any] = {"alpha": alpha, "confidence": confidence}
    for name, scores in (("tpr", pos), ("fpr", neg)):
        hits = sum(scores[i] <= alpha for i in ids)
        ci = binomtest(hits, len(ids)).proportion_ci(confidence_level=confidence, method="exact")
        out[f"verdict_{name}"], out[f"verdict_{name}_ci"] = hits / len(ids), [float(ci.low), float(ci.high)]
    return out


def summarize(run_dir: str | Path, num_bootstrap: int = 1000, alpha: float = 0.01) -> dict[str, Any]:
    """The ``results.json`` object of a run directory.

    Args:
        run_dir (`str` or `Path`): an ``icw bench run`` folder.
        num_bootstrap (`int`, defaults to 1000): bootstrap replicates of the intervals.
        alpha (`float`, defaults to 0.01): the verdicts' significance level.
    """
    run_dir = Path(run_dir)
    if not (run_dir / RESPONSES).exists():
        raise ValueError(f"{run_dir} has no {RESPONSES}: pass the --out folder of an `icw bench run`")
    if not isinstance(num_bootstrap, int) or isinstance(num_bootstrap, bool) or num_bootstrap < 1:
        raise ValueError(f"--num-bootstrap must be a whole number >= 1 (e.g. 1000), got {num_bootstrap!r}")
    config = read_json_object(run_dir / RUN_CONFIG) if (run_dir / RUN_CONFIG).exists() else {}
    records = load_records(run_dir)
    quality = load_records(run_dir, QUALITY) if (run_dir / QUALITY).exists() else []
    models = sorted({r["model"] for r in records})
    if len(models) > 1:
        raise ValueError(f"{run_dir} mixes results of several models ({models}); report one run folder per model")
    result: dict[str, Any] = {
        "model": models[0] if models else config.get("model"), "base_model": config.get("base_model"),
        "adapter": "peft/lora" if config.get("adapter") else None, "dataset": config.get("dataset"),
        "mode": config.get("mode"), "max_new_tokens": config.get("max_new_tokens"), "families": {},
        "num_failed": sum(1 for r in records if r.get("error")),
    }
    for family in FAMILIES:
        pos, neg = paired_scores(records, family)
        summary = detection_summary(pos, neg, num_bootstrap=num_bootstrap)
        if summary is None:
            continue
        if summary["num_negative"] < MIN_NEGATIVES_FOR_TPR_AT_1FPR:
            summary["tpr_at_fpr"], summary["tpr_at_fpr_ci"] = None, None
            summary["tpr_at_fpr_note"] = (f"not estimable: {summary['num_negative']} negatives, "
                                           f"at least {MIN_NEGATIVES_FOR_TPR_AT_1FPR} are needed")
        summary.update(verdict_rates(records, family, alpha) or {})
        summary["ppl"], summary["ppl_by_model"], summary["ppl_median_by_model"] = _perplexity(quality, family)
        summary["seq_rep_by_model"], summary["looping_by_model"] = _repetition(quality, family)
        summary["judge"], summary["judge_failures"] = _judge(quality, family)
        if family == "sa":
            summary["sa_openings"] = sa_openings(records)
        attacks = sorted({r["attack"] for r in records if r["family"] == family and r.get("attack", "none") != "none"})
        summary["attacks"] = {}
        for attack in attacks:
            apos, aneg = paired_scores(records, family, attack)
            got = detection_summary(apos, aneg, num_bootstrap=num_bootstrap)
            if got:
                estimable = got["num_negative"] >= MIN_NEGATIVES_FOR_TPR_AT_1FPR
                summary["attacks"][attack] = {"roc_auc": got["roc_auc"], "tpr_at_fpr": got["tpr_at_fpr"] if estimable else None,
                                              "num_positive": got["num_positive"],
                                              "mean_z_positive": got["mean_z_positive"]}
        summary["evasion"] = {a: got for a in ["none", *attacks]
                              if (got := evasion(records, family, a, alpha, quality=quality))}
        result["families"][family] = summary
    return result


#: Utility constraints of the ESR table (the paper's P-SP columns; here chrF, see semantic_utility).
UTILITY_CONSTRAINTS = (0.6, 0.7, 0.8, 0.9)
#: Coverage constraints of the ESR table (the paper's Coverage columns: an LLM judge's 1-5 score).
COVERAGE_CONSTRAINTS = (2.0, 3.0, 4.0, 4.5)


def evasion(records: list[dict[str, Any]], family: str, attack: str, alpha: float = 0.01,
            constraints: tuple[float, ...] = UTILITY_CONSTRAINTS, quality: list[dict[str, Any]] | None = None,
            coverage_constraints: tuple[float, ...] = COVERAGE_CONSTRAINTS) -> dict[str, Any] | None:
    """Evasion success rate of one attack on one family's positives, overall and at utility and Coverage
    constraints.

    An attacked answer *evades* when its exact p-value is above ``alpha`` = 0.01 (the verdict
    ``p_value <= alpha`` no longer fires), i.e. it falls
    below the detection threshold whose false-positive rate on unwatermarked text is 1% by the
    verifier's null (calibrated by construction, independent of how many negatives the run has).
    ``esr`` = evaded / attacked; ``esr_at_utility[c]`` = (evaded and utility >= c) / attacked, as in
    the paper's Table (so it can only fall as the constraint tightens). Utility is
    :func:`icw.rewriting.semantic_utility` (chrF against the unattacked answer); ``attack="none"``
    gives the baseline (utility 1). Failed attacks (no text) are left out. None if nothing was scored.

    Coverage (the paper's other constraint, RLCracker style) is an LLM judge's 1-5 score of how
    completely the attacked text keeps the information and meaning of the unattacked answer
    (:func:`icw.bench.quality.coverage_family`, records with ``metric: "coverage"`` in ``quality``).
    When the judge scored this attack, the result adds ``esr_at_coverage[c]`` = (evaded and
    coverage >= c) / attacked, ``mean_coverage`` (over the scored answers) and ``coverage_unscored``:
    attacked answers without a score (a failed or missing judgement) count as *not* meeting any
    constraint. When only failures were recorded, just ``coverage_unscored`` is added. The baseline
    ``none`` is the unattacked answer itself, so its coverage is 5 by definition (given whenever the
    judge scored any attack of the family). Several judges' scores of one answer are averaged.

    Args:
        records (`list[dict]`): the run's scored records.
        family (`str`): the family.
        attack (`str`): the attack's name (``"none"``: the baseline).
        alpha (`float`, defaults to 0.01): the verdict's significance level.
        constraints (`tuple[float, ...]`, defaults to ``(0.6, 0.7, 0.8, 0.9)``): the utility thresholds
            ``c`` of ``esr_at_utility``.
        quality (`list[dict]`, *optional*): the run's ``quality.jsonl`` records (``None``: no Coverage).
        coverage_constraints (`tuple[float, ...]`, defaults to ``(2, 3, 4, 4.5)``): the Coverage
            thresholds ``c`` of ``esr_at_coverage``.
    """
    from ..rewriting import semantic_utility

    rows = [r for r in records if r.get("family") == family and r.get("role") == "positive"
            and r.get("attack", "none") == attack and r.get("p_value") is not None]
    if not rows:
        return None
    evaded = np.array([r["p_value"] > alpha for r in rows])
    if attack == "none":
        utility = np.ones(len(rows))
    else:
        utility = np.array(semantic_utility([r.get("source_response") or "" for r in rows],
                                            [r["response"] for r in rows]), dtype=float)
    return {"num_attacked": len(rows), "alpha": alpha, "utility": "chrF", "mean_utility": float(utility.mean()),
            "esr": float(evaded.mean()),
            "esr_at_utility": {f"{c:g}": float((evaded & (utility >= c)).mean()) for c in constraints},
            **_coverage_esr(rows, evaded, family, attack, quality or [], coverage_constraints)}


def _coverage_esr(rows: list[dict[str, Any]], evaded: np.ndarray, family: str, attack: str,
                  quality: list[dict[str, Any]], constraints: tuple[float, ...]) -> dict[str, Any]:
    """The Coverage fields of :func:`evasion` (empty when the judge scored no attack of ``family``)."""
    judged = [q for q in quality if q.get("family") == family and q.get("metric") == "coverage"]
    if attack == "none":
        if not any(q.get("score") is not None for q in judged):
            return {}
        coverage = np.full(len(rows), 5.0)  # the unattacked answer keeps all of itself
    else:
        judged = [q for q in judged if q.get("scored_attack") == attack]
        if not judged:
            return {}
        scores: dict[Any, list[float]] = {}
        for q in judged:
            if q.get("score") is not None:
                scores.setdefault(q["id"], []).append(float(q["score"]))
        coverage = np.array([np.mean(scores[r["id"]]) if r["id"] in scores else np.nan for r in rows])
    scored = ~np.isnan(coverage)
    out: dict[str, Any] = {"coverage_unscored": int((~scored).sum())}
    if scored.any():
        value = np.where(scored, coverage, 0.0)
        out["mean_coverage"] = float(coverage[scored].mean())
        out["esr_at_coverage"] = {f"{c:g}": float((evaded & scored & (value >= c)).mean()) for c in constraints}
    if attack != "none":
        out["coverage_judges"] = sorted({str(q.get("judge")) for q in judged})
    return out


#: Sentence positions the SA opening diagnostic reports.
SA_OPENING_POSITIONS = 5


def sa_openings(records: list[dict[str, Any]], positions: int = SA_OPENING_POSITIONS) -> list[float] | None:
    """SA: for each sentence position i, the share of instructed answers whose i-th sentence opens with the key's
    i-th letter (an answer with fewer sentences misses). Training learns the acrostic from the left, so these move
    before the LCS statistic reaches a verdict; chance is about 1/20 a position.

    Args:
        records (`list[dict]`): the run's scored records (only unattacked SA positives count).
        positions (`int`, defaults to 5): how many sentence positions to report, from the first.

    Returns:
        The share per position, or ``None`` when the run has no SA answers.
    """
    rows = [r for r in records if r["family"] == "sa" and r["role"] == "positive"
            and r.get("attack", "none") == "none" and r.get("response") is not None]
    if not rows:
        return None
    hits = np.zeros(positions)
    for r in rows:
        secret = as_key(r["key"]).secret_string
        openings = [letter.upper() for _, letter in sentence_initial_spans(r["response"])]
        hits += [i < min(len(openings), len(secret)) and openings[i] == secret[i] for i in range(positions)]
    return [round(float(h), 4) for h in hits / len(rows)]


def _values_by_reference(quality: list[dict[str, Any]], family: str, metric: str) -> dict[str, list[float]]:
    """A family's non-null ``metric`` values in ``quality.jsonl``, by reference model."""
    by_model: dict[str, list[float]] = {}
    for q in quality:
        if q.get("family") == family and q.get("metric") == metric and q.get("value") is not None:
            by_model.setdefault(q["reference"], []).append(q["value"])
    return by_model


def _perplexity(quality: list[dict[str, Any]], family: str
                ) -> tuple[float | None, dict[str, float], dict[str, float]]:
    """The mean over reference models of their mean perplexity (the paper's ablation table), and the mean and
    median per reference model: one degenerate answer can move a mean of 100 several-fold, never the median."""
    by_model = _values_by_reference(quality, family, "ppl")
    means = {m: float(np.mean(v)) for m, v in by_model.items()}
    medians = {m: float(np.median(v)) for m, v in by_model.items()}
    return (float(np.mean(list(means.values()))) if means else None), means, medians


def _repetition(quality: list[dict[str, Any]], family: str) -> tuple[dict[str, float], dict[str, float]]:
    """Per reference model, the instructed answers' mean seq-rep-4 and the share that loop (seq-rep-4 >= 0.5)."""
    by_model = _values_by_reference(quality, family, f"seq_rep_{REPETITION_N}")
    return ({m: float(np.mean(v)) for m, v in by_model.items()},
            {m: float(np.mean(np.asarray(v) >= LOOPING_REP)) for m, v in by_model.items()})


def _judge(quality: list[dict[str, Any]], family: str) -> tuple[dict[str, float] | None, int]:
    rows = [q for q in quality if q.get("family") == family and q.get("metric") == "judge"]
    scored = [q["scores"] for q in rows if q.get("scores")]
    if not scored:
        return None, len(rows)
    return {d: float(np.mean([s[d] for s in scored])) for d in JUDGE_DIMENSIONS}, len(rows) - len(scored)


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def _with_ci(value: Any, ci: Any, digits: int = 3) -> str:
    """``value [lo, hi]``; ``not estimable`` when the value is missing."""
    if value is None:
        return _NOT_ESTIMABLE
    return f"{_fmt(value, digits)} [{_fmt(ci[0], digits)}, {_fmt(ci[1], digits)}]" if ci else _fmt(value, digits)


def _tpr_label(summary: dict[str, Any]) -> str:
    """``TPR@1%FPR`` for the rate the summary was computed at (results before ``fpr`` was stored: 1%)."""
    return f"TPR@{100 * summary.get('fpr', 0.01):g}%FPR"


def markdown(result: dict[str, Any]) -> str:
    """Tables 2 and 3 of the paper for one model, plus mean z and attacks.

    Args:
        result (`dict`): the object :func:`summarize` returns.
    """
    fams = [f for f in FAMILIES if f in result["families"]]
    F = result["families"]
    name = result["model"] + (f" (trained from {result['base_model']})" if result.get("base_model") else "")
    lines = [f"# ICWBench: {name}", "",
             f"Dataset `{result.get('dataset')}`, mode `{result.get('mode')}`, "
             f"max new tokens {result.get('max_new_tokens')}.", ""]
    lines += ["## Detection (paper Table 2)", "",
              "| Model | " + " | ".join(f"{f.upper()} AUC | {f.upper()} {_tpr_label(F[f])}" for f in fams) + " |",
              "|---|" + "---:|---:|" * len(fams),
              f"| {result['model']} | " + " | ".join(
                  f"{_fmt(F[f]['roc_auc'])} | {_fmt(F[f]['tpr_at_fpr']) if F[f]['tpr_at_fpr'] is not None else _NOT_ESTIMABLE}"
                  for f in fams) + " |", ""]
    alpha = next((F[f]["alpha"] for f in fams if "alpha" in F[f]), 0.01)
    lines += ["## Scores per family", "",
              "| Family | n (pos/neg) | mean z positive | mean z negative | AUC [95% CI] | TPR@1%FPR [95% CI] | "
              f"verdict TPR at p <= {alpha:g} [95% CI] | verdict FPR at p <= {alpha:g} [95% CI] |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for f in fams:
        s = F[f]
        lines.append(f"| {FAMILY_NAMES[f]} ({f.upper()}) | {s['num_positive']}/{s['num_negative']} | "
                     f"{_fmt(s['mean_z_positive'], 2)} | {_fmt(s['mean_z_negative'], 2)} | "
                     f"{_with_ci(s['roc_auc'], s['roc_auc_ci'])} | {_with_ci(s['tpr_at_fpr'], s['tpr_at_fpr_ci'])} | "
                     f"{_with_ci(s.get('verdict_tpr'), s.get('verdict_tpr_ci'))} | "
                     f"{_with_ci(s.get('verdict_fpr'), s.get('verdict_fpr_ci'))} |")
    if (F.get("sa") or {}).get("sa_openings"):
        shares = ", ".join(f"{100 * v:.0f}%" for v in F["sa"]["sa_openings"])
        lines += ["", f"SA instructed answers whose i-th sentence opens with the key's i-th letter, sentences 1-"
                  f"{len(F['sa']['sa_openings'])}: {shares} (about 5% by chance)."]
    small = [f"{f.upper()} ({F[f]['num_negative']})" for f in fams if F[f]["tpr_at_fpr"] is None]
    if small:
        lines += ["", f"TPR@1%FPR is not estimable with fewer than {MIN_NEGATIVES_FOR_TPR_AT_1FPR} negatives: "
                  f"{', '.join(small)}. The verdict rates use the exact p-values and hold at any sample size."]
    refs = sorted({m for f in fams for stat in ("ppl_by_model", "looping_by_model") for m in F[f].get(stat, {})})
    if refs or any(F[f].get("judge") for f in fams):
        head = [f"{stat} ({r})" for r in refs for stat in ("PPL", "median PPL", "looping")]
        head += [_JUDGE_SHORT[d] for d in JUDGE_DIMENSIONS] + ["Avg"]
        lines += ["", "## Quality (paper Table 3)", "",
                  "| Family | " + " | ".join(head) + " | judge failures |", "|---|" + "---:|" * (len(head) + 1)]
        for f in fams:
            s, judge = F[f], F[f].get("judge")
            cells = [_fmt(s.get(stat, {}).get(r), 2) for r in refs
                     for stat in ("ppl_by_model", "ppl_median_by_model", "looping_by_model")]
            cells += [_fmt(judge[d], 2) if judge else "-" for d in JUDGE_DIMENSIONS]
            cells.append(_fmt(float(np.mean(list(judge.values()))), 2) if judge else "-")
            lines.append(f"| {f.upper()} | " + " | ".join(cells) + f" | {s.get('judge_failures', 0)} |")
        if refs:
            lines += ["", f"Looping: the share of instructed answers with seq-rep-{REPETITION_N} >= {LOOPING_REP:g} (half "
                      f"their {REPETITION_N}-grams repeat an earlier one, in the reference model's tokens); a loop has a "
                      "low perplexity, so read the two together."]
    attacks = sorted({a for f in fams for a in F[f].get("attacks", {})})
    if attacks:
        lines += ["", "## Robustness: AUC (TPR at the report's FPR) after each attack", "",
                  "| Family | none | " + " | ".join(attacks) + " |", "|---|" + "---:|" * (len(attacks) + 1)]
        for f in fams:
            cells = [f"{_fmt(F[f]['roc_auc'])} ({_fmt(F[f]['tpr_at_fpr'], 2)})"]
            for a in attacks:
                got = F[f]["attacks"].get(a)
                cells.append(f"{_fmt(got['roc_auc'])} ({_fmt(got['tpr_at_fpr'], 2)})" if got else "-")
            cells = [c.replace("(-)", "(n/e)") for c in cells]
            lines.append(f"| {f.upper()} | " + " | ".join(cells) + " |")
    lines += _evasion_table(F, fams)
    if result.get("num_failed"):
        lines += ["", f"{result['num_failed']} item(s) failed and are recorded with an `error` field; "
                  "rerun the same `icw bench run` command to retry them."]
    return "\n".join(lines) + "\n"


def _evasion_table(F: dict[str, Any], fams: list[str]) -> list[str]:
    """The ESR table at utility and Coverage constraints (paper, Appendix "Adaptive attack"): every attack
    that ran, side by side; the Coverage cells are "-" where no judge scored the attack."""
    rows = [(f, a, e) for f in fams for a, e in F[f].get("evasion", {}).items()]
    if not any(a != "none" for _, a, _ in rows):
        return []
    constraints = list(next(e for _, _, e in rows)["esr_at_utility"])
    covered = next((list(e["esr_at_coverage"]) for _, _, e in rows if "esr_at_coverage" in e),
                   [f"{c:g}" for c in COVERAGE_CONSTRAINTS])
    lines = ["", "## Evasion at utility constraints (lower ESR is better for the defender)", "",
             f"ESR: fraction of attacked positives whose exact p-value is above {rows[0][2]['alpha']:g} (the verdict "
             "no longer fires: below the detection threshold of that false-positive rate); at utility >= c: "
             "evaded *and* chrF against the unattacked answer >= c, over all attacked positives.", "",
             "Coverage: the LLM judge's 1-5 score of how completely the attacked answer keeps the information and "
             "meaning of the unattacked one (`icw bench run --attacks ... --judge-url ...`); at coverage >= c: "
             "evaded *and* coverage >= c, over all attacked positives, an answer the judge did not score counting "
             "as not meeting it (column *unscored*). The row `none` is the unattacked answer: coverage 5 by "
             "definition. \"-\": no judge scored that attack.", "",
             "| Family | Attack | n | chrF utility | ESR | " + " | ".join(f"ESR @ utility >= {c}" for c in constraints)
             + " | Coverage | " + " | ".join(f"ESR @ coverage >= {c}" for c in covered) + " | unscored |",
             "|---|---|---:|---:|---:|" + "---:|" * (len(constraints) + len(covered) + 2)]
    for f, a, e in rows:
        at_coverage = e.get("esr_at_coverage", {})
        lines.append(f"| {f.upper()} | {a} | {e['num_attacked']} | {_fmt(e['mean_utility'])} | {_fmt(e['esr'])} | "
                     + " | ".join(_fmt(e["esr_at_utility"][c]) for c in constraints)
                     + f" | {_fmt(e.get('mean_coverage'), 2)} | " + " | ".join(_fmt(at_coverage.get(c)) for c in covered)
                     + f" | {e.get('coverage_unscored', '-')} |")
    return lines


def plot(run_dir: str | Path, records: list[dict[str, Any]] | None = None) -> list[Path]:
    """ROC curves and z histograms per family as PNG; returns the files written.

    Args:
        run_dir (`str` or `Path`): the run folder the PNG files are written to.
        records (`list[dict]`, *optional*): the run's records (``None``: read from ``run_dir``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import roc_curve

    run_dir = Path(run_dir)
    records = load_records(run_dir) if records is None else records
    written = []
    for family in FAMILIES:
        pos, neg = paired_scores(records, family)
        if not pos or not neg:
            continue
        attacks = sorted({r["attack"] for r in records if r["family"] == family and r.get("attack", "none") != "none"})
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
        for attack in ["none", *attacks]:
            apos, aneg = paired_scores(records, family, attack)
            if not apos:
                continue
            fpr, tpr, _ = roc_curve(np.r_[np.ones(len(apos)), np.zeros(len(aneg))], np.r_[apos, aneg])
            ax.plot(fpr, tpr, label="no attack" if attack == "none" else attack)
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
        ax.set(xlabel="false positive rate", ylabel="true positive rate", title=f"ROC, {family.upper()}",
               xlim=(0, 1), ylim=(0, 1.01))
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        path = run_dir / f"roc_{family}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
        fig, ax = plt.subplots(figsize=(5, 3.5))
        bins = np.histogram_bin_edges(np.r_[pos, neg], bins=20)
        ax.hist(neg, bins=bins, alpha=0.6, label=f"negatives (n={len(neg)})")
        ax.hist(pos, bins=bins, alpha=0.6, label=f"positives (n={len(pos)})")
        ax.set(xlabel="z-score", ylabel="responses", title=f"z-scores, {family.upper()}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = run_dir / f"z_hist_{family}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


def report(run_dir: str | Path, num_bootstrap: int = 1000, figures: bool = True, alpha: float = 0.01) -> dict[str, Any]:
    """Write results.json, report.md and the figures; returns the results object.

    Args:
        run_dir (`str` or `Path`): an ``icw bench run`` folder.
        num_bootstrap (`int`, defaults to 1000): bootstrap replicates of the intervals.
        figures (`bool`, defaults to `True`): also write the PNG figures.
        alpha (`float`, defaults to 0.01): the verdicts' significance level.
    """
    run_dir = Path(run_dir)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"--alpha must lie strictly between 0 and 1, got {alpha!r}")
    result = summarize(run_dir, num_bootstrap, alpha)
    if not result["families"]:
        raise ValueError(f"{run_dir} has no family with both a scored positive and a scored negative yet")
    (run_dir / "results.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    (run_dir / "report.md").write_text(markdown(result), encoding="utf-8")
    if figures:
        plot(run_dir)
    return result


def _report_command(args: argparse.Namespace) -> None:
    report(args.run_dir, args.num_bootstrap, figures=not args.no_figures, alpha=args.alpha)
    print((Path(args.run_dir) / "report.md").read_text(encoding="utf-8"))


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``icw bench report`` to the CLI's subparsers."""
    p = sub.add_parser("report", help="tables (paper Tables 2-3), ROC/z-histogram PNGs and results.json of a run",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", help="the --out folder of `icw bench run`")
    p.add_argument("--num-bootstrap", type=positive_int, default=1000, help="bootstrap replicates for the intervals")
    p.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    p.add_argument("--alpha", type=open_unit, default=0.01, help="significance level of the verdict-based TPR/FPR")
    p.set_defaults(func=_report_command)
