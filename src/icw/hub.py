"""Hugging Face Hub surfaces: evaluate metrics, their Spaces, and model cards from ICWBench results.

* :func:`metric_path` returns a bundled metric folder, so ``evaluate.load(metric_path("icw_tsp"))``
  works from anywhere (``evaluate.load("icw_tsp")`` alone would look up ``evaluate-metric/icw_tsp``
  on the Hub). The folders ship inside the package (``icw/metrics``, a link to the repository's
  ``metrics/``, which is also what gets published as Spaces: one source of truth).
* :func:`verification_scores` and :func:`detection_scores` are what the metric modules compute:
  thin wrappers over :func:`icw.verify.verify` and :func:`icw.detection.detection_report`.
* ``icw hub publish-metrics --org ORG [--dry-run]`` uploads each metric folder as a Gradio Space.
* ``icw hub model-card RESULTS_JSON --out DIR`` turns ``icw bench report`` output into a
  :class:`huggingface_hub.ModelCard` with ``model-index`` results plus ``.eval_results/*.yaml``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .keys import FAMILIES, FAMILY_NAMES, as_keys, check_family
from .verify import DEFAULT_ALPHA

METRICS = ("icw_tsp", "icw_wip", "icw_sa", "icw_detection")
#: The ICWBench dataset on the Hub (``icw bench push`` target used in cards when none is given).
DEFAULT_DATASET_ID = "icw/ICWBench"
PAPER_TITLE = "Learning to Follow In-Context Watermark Instructions via Self-Distillation"
PAPER_AUTHORS = "Yepeng Liu, Tianyi Chen, Xuandong Zhao, Dawn Song, Yuheng Bu"
_PACKAGE_DIR = Path(__file__).resolve().parent


# ----------------------------------------------------------------------- bundled assets
def metric_path(name: str) -> str:
    """Folder of a bundled evaluate metric (``icw_tsp``, ``icw_wip``, ``icw_sa``, ``icw_detection``).

    Example:
        >>> import evaluate
        >>> tsp = evaluate.load(metric_path("icw_tsp"))  # doctest: +SKIP
    """
    if name not in METRICS:
        raise ValueError(f"unknown icw metric {name!r}; choose one of {', '.join(METRICS)}")
    for root in (_PACKAGE_DIR / "metrics", _PACKAGE_DIR.parents[1] / "metrics"):
        folder = root / name
        if (folder / f"{name}.py").is_file():
            return str(folder)
    raise FileNotFoundError(f"the bundled metric folder {name} is missing from {_PACKAGE_DIR / 'metrics'}; reinstall icw")


def model_card_template() -> Path:
    """The Jinja template behind :func:`model_card` (``model_cards/template.md`` in the repository)."""
    for root in (_PACKAGE_DIR / "model_cards", _PACKAGE_DIR.parents[1] / "model_cards"):
        if (root / "template.md").is_file():
            return root / "template.md"
    raise FileNotFoundError("the model card template is missing from icw/model_cards; reinstall icw")


# ------------------------------------------------------------------ metric computations
def _load_tokenizer(tokenizer: Any) -> Any:
    if isinstance(tokenizer, str):
        from .models import load_tokenizer

        return load_tokenizer(tokenizer)
    return tokenizer


def verification_scores(family: str, predictions: Sequence[str], keys: Any, tokenizer: Any = None,
                        alpha: float = DEFAULT_ALPHA) -> dict[str, Any]:
    """Verify ``predictions`` against ``keys`` of one family: per-text z and p plus a summary.

    ``keys`` is one key (``ICWKey`` or its string) shared by all texts, or one per text.
    ``tokenizer`` is a tokenizer object or name; by default the one named in each key.
    Returns per-text ``z_scores``, ``p_values``, ``is_watermarked``, ``num_tokens_scored`` and the
    summary ``num_texts``, ``mean_z``, ``median_z``, ``watermarked_fraction`` (share with
    ``p_value <= alpha``).
    """
    from .verify import verify

    family = check_family(family)
    if keys is None:
        raise ValueError(f"icw_{family} needs keys=...: one key string for all texts, or one per text")
    if isinstance(predictions, str):
        raise TypeError("predictions must be a list of strings, not one string")
    predictions = list(predictions)
    if not predictions:
        raise ValueError("predictions is empty: pass at least one text")
    for i, text in enumerate(predictions):
        if not isinstance(text, str):
            raise TypeError(f"prediction {i} is a {type(text).__name__}, not a str")
    key_list = as_keys(keys, len(predictions))
    for i, key in enumerate(key_list):
        if key.family != family:
            raise ValueError(f"key {i} is a {key.family} key but this is the icw_{family} metric: "
                             f"use the icw_{key.family} metric for it")
    results = verify(predictions, key_list, _load_tokenizer(tokenizer), alpha=alpha)
    z = np.array([r.z_score for r in results], dtype=np.float64)
    flagged = [r.is_watermarked for r in results]
    return {
        "z_scores": z.tolist(),
        "p_values": [r.p_value for r in results],
        "is_watermarked": flagged,
        "num_tokens_scored": [r.num_tokens_scored for r in results],
        "num_texts": len(results),
        "mean_z": float(z.mean()),
        "median_z": float(np.median(z)),
        "watermarked_fraction": float(np.mean(flagged)),
        "alpha": alpha,
    }


def detection_scores(predictions: Sequence[float], references: Sequence[int], fpr: float = 0.01,
                     confidence: float = 0.95, num_bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """ROC-AUC and TPR at ``fpr`` from detector scores (``predictions``) and labels
    (``references``: 1 watermarked, 0 plain), with bootstrap intervals
    (:func:`icw.detection.detection_report`)."""
    from .detection import detection_report

    scores = np.asarray(list(predictions), dtype=np.float64)
    labels = np.asarray(list(references))
    if scores.shape != labels.shape or scores.ndim != 1:
        raise ValueError(f"predictions and references must be two flat lists of equal length, "
                         f"got {scores.shape} and {labels.shape}")
    if not np.isin(labels, (0, 1)).all():
        raise ValueError("references must be 0 (plain text) or 1 (watermarked text)")
    report = detection_report(scores[labels == 1], scores[labels == 0], fpr=fpr, confidence=confidence,
                              num_bootstrap=num_bootstrap, seed=seed)
    return {
        "roc_auc": report.auc,
        "roc_auc_ci": list(report.auc_ci),
        "tpr_at_fpr": report.tpr,
        "tpr_at_fpr_ci": list(report.tpr_ci),
        "fpr": report.fpr,
        "confidence": report.confidence,
        "num_positive": report.num_positive,
        "num_negative": report.num_negative,
    }


# ------------------------------------------------------------------------ metric Spaces
def _split_texts(blob: str) -> list[str]:
    """Texts separated by lines holding only ``---``."""
    parts, current = [], []
    for line in blob.splitlines():
        if line.strip() == "---":
            parts.append("\n".join(current))
            current = []
        else:
            current.append(line)
    parts.append("\n".join(current))
    return [p.strip() for p in parts if p.strip()]


def _parse_scores(blob: str) -> list[float]:
    try:
        return [float(v) for v in blob.replace(",", " ").split()]
    except ValueError as err:
        raise ValueError(f"scores must be numbers separated by commas or spaces ({err})") from None


def metric_demo(module_file: str | Path) -> Any:
    """The Gradio app of a metric Space (evaluate's own widget is broken on gradio >= 4).

    ``module_file`` is the metric's ``.py`` file (``app.py`` passes its sibling), loaded with
    ``evaluate.load`` exactly as users load it.
    """
    import evaluate
    import gradio as gr

    module_file = Path(module_file)
    name = module_file.stem
    metric = evaluate.load(str(module_file))

    def run_verification(texts: str, key: str, tokenizer: str, alpha: float) -> dict:
        try:
            items = _split_texts(texts)
            return metric.compute(predictions=items, keys=key.strip(), tokenizer=tokenizer.strip() or None,
                                  alpha=float(alpha))
        except (ValueError, TypeError) as err:
            raise gr.Error(str(err)) from None

    def run_detection(positive: str, negative: str, fpr: float) -> dict:
        try:
            pos, neg = _parse_scores(positive), _parse_scores(negative)
            return metric.compute(predictions=pos + neg, references=[1] * len(pos) + [0] * len(neg), fpr=float(fpr))
        except (ValueError, TypeError) as err:
            raise gr.Error(str(err)) from None

    with gr.Blocks(title=name) as demo:
        gr.Markdown(f"# {name}\n{metric.description}")
        out = gr.JSON(label="result")
        if name == "icw_detection":
            pos = gr.Textbox(label="scores of watermarked texts (e.g. z-scores)", lines=3)
            neg = gr.Textbox(label="scores of plain texts", lines=3)
            fpr = gr.Number(value=0.01, label="false-positive rate for TPR")
            gr.Button("Compute").click(run_detection, [pos, neg, fpr], out)
        else:
            texts = gr.Textbox(label="texts (separate texts with a line holding only ---)", lines=8)
            key = gr.Textbox(label="key (icw:...)")
            tok = gr.Textbox(label="tokenizer (blank: the key's own; qwen3, gpt2, smollm2 or a Hub id)")
            alpha = gr.Number(value=DEFAULT_ALPHA, label="alpha")
            gr.Button("Verify").click(run_verification, [texts, key, tok, alpha], out)
    demo.run_verification, demo.run_detection = run_verification, run_detection  # for tests and scripts
    return demo


def publish_metrics(org: str, names: Sequence[str] = METRICS, dry_run: bool = False, private: bool = False,
                    token: str | None = None) -> list[dict[str, Any]]:
    """Upload each bundled metric folder as a Gradio Space ``<org>/<name>``; returns the plan."""
    if not org or "/" in org:
        raise ValueError(f"--org must be a user or organization name without '/', got {org!r}")
    plan = []
    for name in names:
        folder = Path(metric_path(name))
        files = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        plan.append({"repo_id": f"{org}/{name}", "repo_type": "space", "space_sdk": "gradio", "folder": str(folder),
                     "files": [{"path": str(p.relative_to(folder)), "bytes": p.stat().st_size} for p in files]})
    if dry_run:
        return plan
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    for item in plan:
        api.create_repo(item["repo_id"], repo_type="space", space_sdk="gradio", private=private, exist_ok=True)
        api.upload_folder(folder_path=item["folder"], repo_id=item["repo_id"], repo_type="space",
                          ignore_patterns=["__pycache__/*", "*.pyc"], commit_message="Upload icw metric")
        item["url"] = f"https://huggingface.co/spaces/{item['repo_id']}"
    return plan


# -------------------------------------------------------------------------- model cards
_METRICS_IN_CARD = (("auc", "roc_auc", "ROC-AUC"), ("tpr_at_1fpr", "tpr_at_1fpr", "TPR@1%FPR"),
                    ("ppl", "perplexity", "Perplexity"))


def _load_results(results: dict | str | Path) -> dict[str, Any]:
    if isinstance(results, (str, Path)):
        path = Path(results)
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not JSON ({err.msg}); pass the results.json of icw bench report") from None
    if not isinstance(results, dict) or not isinstance(results.get("families"), dict) or not results["families"]:
        raise ValueError("results must be an object with a non-empty 'families' mapping (icw bench report output)")
    for family in results["families"]:
        check_family(family)
    if not results.get("model"):
        raise ValueError("results need a 'model' field naming the evaluated model")
    return results


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def _dataset_id(results: dict[str, Any], dataset_id: str | None = None) -> str:
    """The Hub dataset the card cites: ``dataset_id``, else the run's dataset when it is a Hub id
    (a run on a local folder, e.g. ``/tmp/icwbench``, cites the default ICWBench id instead)."""
    if dataset_id:
        return dataset_id
    used = str(results.get("dataset") or "")
    is_hub_id = _HUB_ID.fullmatch(used) is not None and not Path(used).expanduser().exists()
    return used if is_hub_id else DEFAULT_DATASET_ID


def eval_results(results: dict | str | Path, dataset_id: str | None = None) -> list[Any]:
    """The ``model-index`` entries (:class:`huggingface_hub.EvalResult`) of ICWBench results."""
    from huggingface_hub import EvalResult

    results = _load_results(results)
    dataset_id = _dataset_id(results, dataset_id)
    out = []
    for family, stats in results["families"].items():
        for field, metric_type, label in _METRICS_IN_CARD:
            value = _number(stats.get(field))
            if value is None:
                continue
            out.append(EvalResult(
                task_type="text-generation", task_name="In-context watermark instruction following",
                dataset_type=str(dataset_id), dataset_name=f"ICWBench ({FAMILY_NAMES[family]})",
                dataset_config=family, dataset_split="test", metric_type=metric_type,
                metric_name=f"{family.upper()} {label}", metric_value=round(value, 4),
            ))
        for dim, score in (stats.get("judge") or {}).items():
            if score is not None:
                out.append(EvalResult(
                    task_type="text-generation", task_name="In-context watermark instruction following",
                    dataset_type=str(dataset_id), dataset_name=f"ICWBench ({FAMILY_NAMES[family]})",
                    dataset_config=family, dataset_split="test", metric_type=f"judge_{dim}",
                    metric_name=f"{family.upper()} judge {dim.replace('_', ' ')} (1-5)",
                    metric_value=round(float(score), 3)))
    return out


def _fmt(value: Any, digits: int = 3) -> str:
    return "n/a" if value is None else f"{float(value):.{digits}f}"


def model_card(results: dict | str | Path, base_model: str | None = None, adapter: bool | str | None = None,
               model_id: str | None = None, dataset_id: str | None = None, license: str | None = None) -> Any:
    """Build a :class:`huggingface_hub.ModelCard` from ``icw bench report`` results.

    ``adapter`` (``True`` or a description such as ``"peft/lora"``) marks a PEFT adapter over
    ``base_model``; the card's metadata then says ``library_name: peft``.
    """
    from huggingface_hub import ModelCard, ModelCardData

    results = _load_results(results)
    base_model = base_model or results.get("base_model")
    adapter = adapter or results.get("adapter")
    if adapter and not base_model:
        raise ValueError("an adapter card needs --base-model (the model the adapter was trained on)")
    dataset_id = _dataset_id(results, dataset_id)
    model_id = model_id or results["model"]
    tags = ["icw", "watermarking", "in-context-watermarking", "text-generation"]
    if adapter:
        tags += ["peft", "lora"] if "lora" in str(adapter).lower() or adapter is True else ["peft"]
    card_data = ModelCardData(
        model_name=model_id, base_model=base_model, library_name="peft" if adapter else "transformers",
        pipeline_tag="text-generation", tags=tags, license=license,
        datasets=[dataset_id] if "/" in str(dataset_id) else None, eval_results=eval_results(results, dataset_id),
    )
    rows = []
    for family, stats in results["families"].items():
        judge = stats.get("judge") or {}
        judge_mean = float(np.mean([v for v in judge.values() if v is not None])) if judge else None
        rows.append({
            "family": family.upper(), "name": FAMILY_NAMES[family],
            "num": f"{stats.get('num_positive', 'n/a')}/{stats.get('num_negative', 'n/a')}",
            "auc": _fmt(stats.get("auc")), "auc_ci": "[" + ", ".join(_fmt(v) for v in stats["auc_ci"]) + "]"
            if stats.get("auc_ci") else "", "tpr": _fmt(stats.get("tpr_at_1fpr")),
            "tpr_ci": "[" + ", ".join(_fmt(v) for v in stats["tpr_ci"]) + "]" if stats.get("tpr_ci") else "",
            "ppl": _fmt(stats.get("ppl"), 2), "judge": _fmt(judge_mean, 2),
            "attacks": ", ".join(f"{name}: AUC {_fmt(a.get('auc'))}" for name, a in (stats.get("attacks") or {}).items()),
        })
    return ModelCard.from_template(
        card_data, template_path=str(model_card_template()), model_id=model_id, base_model=base_model,
        adapter=str(adapter) if adapter else None, dataset_id=dataset_id, rows=rows,
        mode=results.get("mode", "instruction"), max_new_tokens=results.get("max_new_tokens"),
        paper_title=PAPER_TITLE, paper_authors=PAPER_AUTHORS,
    )


def eval_results_files(results: dict | str | Path, dataset_id: str | None = None,
                       source_url: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """The Hub's ``.eval_results/<name>.yaml`` entries, one file per ICWBench metric."""
    results = _load_results(results)
    dataset_id = _dataset_id(results, dataset_id)
    today = _dt.date.today().isoformat()
    files: dict[str, list[dict[str, Any]]] = {}
    for field, metric_type, label in _METRICS_IN_CARD:
        entries = []
        for family, stats in results["families"].items():
            value = _number(stats.get(field))
            if value is None:
                continue
            entry = {"dataset": {"id": str(dataset_id), "task_id": family}, "value": round(value, 4), "date": today,
                     "notes": f"{FAMILY_NAMES[family]} {label}, {results.get('mode', 'instruction')} mode"}
            if source_url:
                entry["source"] = {"url": source_url, "name": "ICWBench report"}
            entries.append(entry)
        if entries:
            files[f"icwbench_{metric_type}.yaml"] = entries
    return files


def write_model_card(results: dict | str | Path, out_dir: str | Path, **kwargs: Any) -> Path:
    """Write ``README.md`` and ``.eval_results/*.yaml`` into ``out_dir``; returns the README path."""
    import yaml

    card = model_card(results, **kwargs)
    out = Path(out_dir)
    (out / ".eval_results").mkdir(parents=True, exist_ok=True)
    readme = out / "README.md"
    card.save(readme)
    for name, entries in eval_results_files(results, kwargs.get("dataset_id")).items():
        (out / ".eval_results" / name).write_text(yaml.safe_dump(entries, sort_keys=False), encoding="utf-8")
    return readme


# --------------------------------------------------------------------------------- CLI
def _cli_publish(args: argparse.Namespace) -> None:
    plan = publish_metrics(args.org, args.only or METRICS, dry_run=args.dry_run, private=args.private)
    for item in plan:
        verb = "would upload" if args.dry_run else "uploaded"
        files = ", ".join(f"{f['path']} ({f['bytes']:,} B)" for f in item["files"])
        print(f"{verb} {item['folder']} -> space {item['repo_id']}: {files}")


def _cli_model_card(args: argparse.Namespace) -> None:
    readme = write_model_card(args.results, args.out, base_model=args.base_model,
                              adapter=args.adapter_type if args.adapter else None, model_id=args.model_id,
                              dataset_id=args.dataset, license=args.license)
    print(f"wrote {readme} and {readme.parent / '.eval_results'}", file=sys.stderr)


def _cli_metric_path(args: argparse.Namespace) -> None:
    print(metric_path(args.name))


def register(sub: argparse._SubParsersAction) -> None:
    hub = sub.add_parser("hub", help="Hugging Face Hub: metric Spaces, model cards")
    hub_sub = hub.add_subparsers(dest="hub_command", required=True)

    pub = hub_sub.add_parser("publish-metrics", help="upload the evaluate metrics as Spaces <org>/icw_*")
    pub.add_argument("--org", required=True, help="Hub user or organization")
    pub.add_argument("--only", nargs="+", choices=METRICS, help="publish only these metrics")
    pub.add_argument("--private", action="store_true")
    pub.add_argument("--dry-run", action="store_true", help="show what would be uploaded; upload nothing")
    pub.set_defaults(func=_cli_publish)

    card = hub_sub.add_parser("model-card", help="model card (README.md + .eval_results/) from ICWBench results")
    card.add_argument("results", help="results.json written by icw bench report")
    card.add_argument("--out", required=True, help="output folder (the model repository root)")
    card.add_argument("--base-model", help="Hub id of the base model (required for adapters)")
    card.add_argument("--adapter", action="store_true", help="the model is a PEFT adapter over --base-model")
    card.add_argument("--adapter-type", default="peft/lora", help="adapter description (default peft/lora)")
    card.add_argument("--model-id", help="name of the model (default: results' model)")
    card.add_argument("--dataset", help=f"dataset id (default: results' dataset or {DEFAULT_DATASET_ID})")
    card.add_argument("--license", help="license identifier for the card metadata (e.g. apache-2.0)")
    card.set_defaults(func=_cli_model_card)

    path = hub_sub.add_parser("metric-path", help="print the folder of a bundled metric (for evaluate.load)")
    path.add_argument("name", choices=METRICS)
    path.set_defaults(func=_cli_metric_path)


__all__ = ["METRICS", "FAMILIES", "detection_scores", "eval_results", "eval_results_files", "metric_demo",
           "metric_path", "model_card", "model_card_template", "publish_metrics", "verification_scores",
           "write_model_card"]
