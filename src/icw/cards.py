"""Model cards from ICWBench results and from training runs.

``icw hub model-card RESULTS_JSON --out DIR`` turns ``icw bench report`` output into a
:class:`huggingface_hub.ModelCard` with ``model-index`` results plus ``.eval_results/*.yaml``. The
training recipes (SDLP, GRPO, SFT) write the same card into their output and checkpoint folders
with a "How it was trained" section read from the trainer (:func:`write_training_card`); a folder
that was not evaluated says so and prints the commands that evaluate it.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from .bench.dataset import ICWBENCH_ID
from .bundled import CARD_TEMPLATES_PACKAGE, bundled_folder
from .card_inputs import load_results, load_stages
from .citation import BIBTEX, PAPER_AUTHORS, PAPER_TITLE
from .jsonl import read_json_object
from .keys import FAMILY_NAMES, check_family
from .models import SMOLLM2_HUB_ID
from .runs import (
    TRAINING_FACTS,  # kept beside the card, so a later `icw hub model-card` keeps "How it was trained"
    run_cost,
)

#: The ICWBench dataset's Hub id (:data:`icw.bench.dataset.ICWBENCH_ID`); a card cites it only when the run used it.
DEFAULT_DATASET_ID = ICWBENCH_ID
#: The template's file name in ``model_cards/templates/`` (:data:`icw.bundled.CARD_TEMPLATES_PACKAGE`).
TEMPLATE_NAME = "model_card.md"
#: Queries per family in the paper's evaluation (Section 5.1: 500 LFQA queries, reused across families).
PAPER_NUM_QUERIES = 500


def model_card_template() -> Path:
    """The Jinja template behind :func:`model_card`: the repository's ``model_cards/templates/model_card.md``
    in a checkout, the copy an installed wheel carries otherwise."""
    template = bundled_folder(CARD_TEMPLATES_PACKAGE) / TEMPLATE_NAME
    if template.is_file():
        return template
    raise FileNotFoundError(f"the model card template {template} is missing; reinstall icw")


#: (results field, model-index metric type, label); the TPR label names the rate it was read at
_METRICS_IN_CARD = (("roc_auc", "roc_auc", "ROC-AUC"), ("tpr_at_fpr", "tpr_at_fpr", "TPR@{rate}FPR"),
                    ("ppl", "perplexity", "Perplexity"))


def _label(label: str, stats: dict[str, Any]) -> str:
    return label.format(rate=f"{100 * float(stats.get('fpr') or 0.01):g}%")


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def _dataset_id(results: dict[str, Any], dataset_id: str | None = None) -> str:
    """The dataset the run used, as the card's metadata names it: ``dataset_id`` when given, the
    run's dataset when it is a Hub id, else the local folder's name (no ``/``, so it never reads
    as a Hub dataset the run did not use)."""
    if dataset_id:
        return dataset_id
    used = str(results.get("dataset") or "")
    if _is_hub_id(used):
        return used
    return (Path(used).name or "ICWBench") if used else "ICWBench"


def _is_hub_id(name: str) -> bool:
    return _HUB_ID.fullmatch(name) is not None and not Path(name).expanduser().exists()


#: What the positives of each mode are (the negatives are plain answers to the same queries).
POSITIVES = {
    "instruction": "answers to queries that carry the key's ICW instruction",
    "bias": "answers to the plain queries decoded with the key's logit bias (the family's LogitsProcessor), "
            "with no instruction in the prompt",
}


def run_description(results: dict[str, Any], base_model: str | None, adapter: Any,
                    dataset_id: str | None = None) -> dict[str, Any]:
    """What the card says was run: model, adapter or not, mode, dataset, sample sizes and caveats.

    Args:
        results (`dict`): ICWBench results (``icw bench report``'s ``results.json``).
        base_model (`str`, *optional*): the base model's Hub id.
        adapter: whether the evaluated model is an adapter, or the adapter's id.
        dataset_id (`str`, *optional*): the benchmark dataset's Hub id.
    """
    mode = results.get("mode") or "instruction"
    if mode not in POSITIVES:
        raise ValueError(f"results' mode must be one of {', '.join(POSITIVES)}, got {mode!r}")
    used = str(results.get("dataset") or "")
    if dataset_id:
        dataset = f"`{dataset_id}` on the Hub (test split)"
    elif _is_hub_id(used):
        dataset = f"[`{used}`](https://huggingface.co/datasets/{used}) on the Hub (test split)"
    elif used:
        dataset = f"the local folder `{used}` (test split; not a published Hub dataset)"
    else:
        dataset = "not recorded in the results"
    sizes = {f: (stats.get("num_positive"), stats.get("num_negative")) for f, stats in results["families"].items()}
    caveats = []
    if mode == "bias":
        caveats.append("Bias mode measures the verifiers and the logit bias, not instruction following: the "
                       "model was never asked to watermark, so these numbers say nothing about how well it "
                       "follows ICW instructions.")
    small = [f"{f.upper()} {p}/{n}" for f, (p, n) in sizes.items() if isinstance(p, int) and p < 200]
    if small:
        caveats.append(f"Small samples ({', '.join(small)} positives/negatives): the 95% intervals are wide; "
                       f"the paper evaluates {PAPER_NUM_QUERIES} queries per family.")
    unestimable = [f"{f.upper()} {stats['tpr_at_fpr_note']}" for f, stats in results["families"].items()
                   if stats.get("tpr_at_fpr") is None and stats.get("tpr_at_fpr_note")]
    if unestimable:
        caveats.append(f"TPR at the fixed FPR reads n/a where it cannot be estimated ({'; '.join(unestimable)}).")
    if results.get("num_failed"):
        caveats.append(f"{results['num_failed']} generations failed and are left out of the scores.")
    if used and not dataset_id and not _is_hub_id(used):
        caveats.append("The dataset is a local folder: the run cannot be reproduced from the Hub as is.")
    if adapter:
        model_line = f"a {adapter} adapter over `{base_model}` (evaluated with the adapter loaded)"
    elif _is_base_model(results["model"], base_model):
        model_line = f"`{results['model']}`, the base model itself (no adapter, untrained for ICW)"
    elif base_model:
        model_line = f"`{results['model']}`, fine-tuned from `{base_model}` (all weights; no adapter)"
    else:
        model_line = f"`{results['model']}` as published (no adapter, no ICW training recorded)"
    return {"mode": mode, "positives": POSITIVES[mode], "dataset": dataset, "model_line": model_line,
            "sizes": sizes, "caveats": caveats}


def _hub_name(name: str | None) -> str | None:
    """The Hub id a model name stands for: icw's embedded ``smollm2`` is SmolLM2-135M-Instruct."""
    return SMOLLM2_HUB_ID if name == "smollm2" else name


def _is_base_model(model: str | None, base_model: str | None) -> bool:
    """Whether the evaluated ``model`` is ``base_model`` itself (a base row, not a model trained from it)."""
    return bool(model and base_model) and _hub_name(model) == _hub_name(base_model)


def _load_name(name: str) -> str:
    """What :func:`icw.models.load_model` is given in a card's how-to: the embedded copy for SmolLM2, so
    the snippet runs offline as printed."""
    return "smollm2" if _hub_name(name) == SMOLLM2_HUB_ID else name


def _how_to(model: str, base_model: str | None = None, adapter: bool = False, family: str = "wip",
           max_new_tokens: int = 96, local: bool = False) -> str:
    """The card's "How to use" code: load the model (``base_model`` plus ``model`` when ``adapter``), ask
    one instructed query with a ``family`` key and verify the answer; it leaves no name for the reader to fill in."""
    check_family(family)
    loaded = _load_name(base_model if adapter and base_model else model)
    lines = ["from icw import ICWKey, verify", "from icw.generation import generate_responses",
             "from icw.models import load_model"]
    if adapter:
        lines.insert(0, "from peft import PeftModel\n")
    comment = ("  # icw's embedded SmolLM2-135M-Instruct, offline" if loaded == "smollm2" else
               "  # the folder the commands above write" if local else "")
    lines += ["", f"model, tok = load_model({json.dumps(loaded)}){comment}"]
    if adapter:
        lines.append(f"model = PeftModel.from_pretrained(model, {json.dumps(str(model))})")
    pool = ", pool_size=200" if family == "tsp" else ""  # a TSP instruction lists its pool: keep it short
    lines += [f"key = ICWKey.create({json.dumps(family)}, seed=7, tokenizer=tok{pool})",
              'answer = generate_responses(model, tok, ["Why is the sky blue?"], key, mode="instruction",',
              f"                            max_new_tokens={int(max_new_tokens)})[0]",
              "result = verify(answer, key, tok)",
              "print(result.z_score, result.p_value, result.is_watermarked)"]
    return "\n".join(lines)


def eval_results(results: dict | str | Path, dataset_id: str | None = None) -> list[Any]:
    """The ``model-index`` entries (:class:`huggingface_hub.EvalResult`) of ICWBench results.

    Args:
        results (`dict`, `str` or `Path`): ICWBench results, or the path of their ``results.json``.
        dataset_id (`str`, *optional*): the benchmark dataset's Hub id (the default ICWBench id when
            ``None``).
    """
    from huggingface_hub import EvalResult

    results = load_results(results)
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
                metric_name=f"{family.upper()} {_label(label, stats)}", metric_value=round(value, 4),
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


def _interval(values: Any) -> str:
    return "[" + ", ".join(_fmt(v) for v in values) + "]" if values else ""


def model_card(results: dict | str | Path | None = None, base_model: str | None = None,
               adapter: bool | str | None = None, model_id: str | None = None, dataset_id: str | None = None,
               license: str | None = None, notes: list[str] | None = None, commands: list[str] | None = None,
               training: dict[str, Any] | None = None, stages: dict | str | Path | None = None,
               cost: str | Path | None = None, load_from: str | None = None) -> Any:
    """Build a :class:`huggingface_hub.ModelCard` from ``icw bench report`` results, a training run, or both.

    ``adapter`` (``True`` or a description such as ``"peft/lora"``) marks a PEFT adapter over
    ``base_model``; the card's metadata then says ``library_name: peft``. The card states what was
    run and nothing more: the model, adapter or not, the mode (and so what the positives are),
    the dataset actually used (a local folder is named as such), sample sizes, and caveats. With
    ``training`` (the facts a recipe records, see :func:`write_training_card`) it also says how the
    model was trained; without ``results`` it says plainly that the model was not evaluated and how
    to evaluate it.

    Args:
        results (`dict`, `str` or `Path`, *optional*): ICWBench results, or the path of their ``results.json``.
        base_model (`str`, *optional*): the base model's Hub id (card metadata ``base_model``).
        adapter (`bool` or `str`, *optional*): whether the model is a PEFT adapter (or its id).
        model_id (`str`, *optional*): the repository the card describes.
        dataset_id (`str`, *optional*): the benchmark dataset's Hub id.
        license (`str`, *optional*): the card's license identifier.
        notes (`list[str]`, *optional*): facts about the run that ``results`` does not record (e.g. which
            weights were loaded), listed under "What was run".
        commands (`list[str]`, *optional*): the commands that produced ``results``, shown so that a
            reader can rerun them.
        training (`dict`, *optional*): the facts of the training run (``icw_training.json``).
        stages (`dict`, `str` or `Path`, *optional*): ``icw bench compare`` of the model's training stages
            (``stages.json``): the card shows its table per family, with the paired tests between stages.
        cost (`str` or `Path`, *optional*): the run's ``timings.jsonl`` (:data:`icw.runs.TIMINGS`): the card's
            "Cost" section, each stage's wall time summed over its runs, and the machines.
        load_from (`str`, *optional*): where "How to use" loads the model from when ``model_id`` is not on the Hub
            (the folder the card's commands write, e.g. ``~/.cache/icw/runs/speedrun-wip/grpo``).

    Paths under the writer's home directory are shown from ``~``: a card names no one's home.
    """
    from huggingface_hub import ModelCard, ModelCardData

    if results is None and training is None:
        raise ValueError("a model card needs ICWBench results (results.json), a training run's facts, or both")
    results = load_results(results) if results is not None else None
    trained = training_description(training) if training else None
    base_model = base_model or (results or {}).get("base_model") or (training or {}).get("base_model")
    adapter = adapter or (results or {}).get("adapter") or (trained and trained["adapter"])
    if adapter and not base_model:
        raise ValueError("an adapter card needs --base-model (the model the adapter was trained on)")
    model_id = model_id or (training or {}).get("model_id") or results["model"]
    tags = ["icw", "watermarking", "in-context-watermarking", "text-generation"] + (trained["tags"] if trained else [])
    if adapter:
        tags += ["peft", "lora"] if "lora" in str(adapter).lower() or adapter is True else ["peft"]
    what, rows, eval_entries, datasets = {}, [], None, None
    if results is not None:
        what = run_description(results, base_model, adapter, dataset_id)
        dataset_id = _dataset_id(results, dataset_id)
        eval_entries = eval_results(results, dataset_id)
        datasets = [dataset_id] if "/" in str(dataset_id) else None
        rows = [_row(family, stats) for family, stats in results["families"].items()]
    hub_base, is_base = _hub_name(base_model), bool(results) and _is_base_model(model_id, base_model)
    card_data = ModelCardData(  # a base model is not its own base_model on the Hub
        model_name=model_id, base_model=hub_base if hub_base and _is_hub_id(hub_base) and not is_base else None,
        library_name="peft" if adapter else "transformers", pipeline_tag="text-generation", tags=tags,
        license=license, datasets=datasets, eval_results=eval_entries,
    )
    families = list((results or {}).get("families") or (training or {}).get("families") or ["wip"])
    card = ModelCard.from_template(
        card_data, template_path=str(model_card_template()), model_id=model_id, base_model=hub_base,
        adapter=str(adapter) if adapter else None, is_base=is_base,
        dataset_id=dataset_id, rows=rows, what=what, mode=what.get("mode"), training=trained,
        max_new_tokens=(results or {}).get("max_new_tokens"), notes=list(notes or ()), commands=list(commands or ()),
        stages=_stages_table(stages) if stages is not None else None,
        cost=run_cost(cost).markdown() if cost is not None else None,
        how_to=_how_to(load_from or model_id, base_model, bool(adapter), "wip" if "wip" in families else families[0],
                       local=bool(load_from)),
        paper_title=PAPER_TITLE, paper_authors=PAPER_AUTHORS, bibtex=BIBTEX,
    )
    home = str(Path.home()).rstrip("/")
    return ModelCard(card.content.replace(home + "/", "~/")) if home and home + "/" in card.content else card


def _stages_table(stages: dict | str | Path) -> str:
    """``icw bench compare``'s tables of ``stages.json``, checked first (imported here: the benchmark is heavy)."""
    from .bench.compare import markdown

    return markdown(load_stages(stages)).strip()


def _row(family: str, stats: dict[str, Any]) -> dict[str, str]:
    """One family's row of the card's results table."""
    judge, medians, looping = (stats.get(k) or {} for k in ("judge", "ppl_median_by_model", "looping_by_model"))
    judge_mean = float(np.mean([v for v in judge.values() if v is not None])) if judge else None
    return {
        "family": family.upper(), "name": FAMILY_NAMES[family],
        "num": f"{stats.get('num_positive', 'n/a')}/{stats.get('num_negative', 'n/a')}",
        "roc_auc": _fmt(stats.get("roc_auc")), "roc_auc_ci": _interval(stats.get("roc_auc_ci")),
        "tpr_at_fpr": _fmt(stats.get("tpr_at_fpr")), "tpr_at_fpr_ci": _interval(stats.get("tpr_at_fpr_ci")),
        "tpr_label": _label("TPR@{rate}FPR", stats), "ppl": _fmt(stats.get("ppl"), 2),
        "ppl_median": _fmt(np.mean(list(medians.values())) if medians else None, 2), "judge": _fmt(judge_mean, 2),
        "looping": _fmt(np.mean(list(looping.values())) if looping else None, 2),
        "attacks": ", ".join(f"{name}: AUC {_fmt(a.get('roc_auc'))}" for name, a in (stats.get("attacks") or {}).items()),
    }


def eval_results_files(results: dict | str | Path, dataset_id: str | None = None,
                       source_url: str | None = None, date: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """The Hub's ``.eval_results/<name>.yaml`` entries, one file per ICWBench metric.

    Args:
        results (`dict`, `str` or `Path`): ICWBench results, or the path of their ``results.json``.
        dataset_id (`str`, *optional*): the benchmark dataset's Hub id.
        source_url (`str`, *optional*): where the results came from, recorded in each entry.
        date (`str`, *optional*): the entries' date, ``YYYY-MM-DD`` (default: today); a kept card
            passes the date of its run, so that regenerating it changes nothing.
    """
    results = load_results(results)
    dataset_id = _dataset_id(results, dataset_id)
    today = str(date) if date else _dt.date.today().isoformat()
    files: dict[str, list[dict[str, Any]]] = {}
    for field, metric_type, label in _METRICS_IN_CARD:
        entries = []
        for family, stats in results["families"].items():
            value = _number(stats.get(field))
            if value is None:
                continue
            entry = {"dataset": {"id": str(dataset_id), "task_id": family}, "value": round(value, 4), "date": today,
                     "notes": f"{FAMILY_NAMES[family]} {_label(label, stats)}, {results.get('mode', 'instruction')} mode"}
            if source_url:
                entry["source"] = {"url": source_url, "name": "ICWBench report"}
            entries.append(entry)
        if entries:
            files[f"icwbench_{metric_type}.yaml"] = entries
    return files


def write_model_card(results: dict | str | Path | None, out_dir: str | Path, date: str | None = None,
                     **kwargs: Any) -> Path:
    """Write ``README.md`` and ``.eval_results/*.yaml`` into ``out_dir``; returns the README path.

    A folder a training recipe wrote keeps its "How it was trained" section: its ``icw_training.json``
    (:data:`TRAINING_FACTS`) is read unless ``training`` is passed.

    Args:
        results (`dict`, `str` or `Path`): ICWBench results, or the path of their ``results.json``
            (``None``: a training card that says the model was not evaluated).
        out_dir (`str` or `Path`): the model folder to write into.
        date (`str`, *optional*): the ``.eval_results`` entries' date (default: today).
        **kwargs: passed to :func:`model_card`.
    """
    import yaml

    out = Path(out_dir)
    if "training" not in kwargs and (out / TRAINING_FACTS).is_file():
        kwargs["training"] = read_json_object(out / TRAINING_FACTS)
    card = model_card(results, **kwargs)
    out.mkdir(parents=True, exist_ok=True)
    readme = out / "README.md"
    card.save(readme)
    if results is not None:
        (out / ".eval_results").mkdir(exist_ok=True)
        for name, entries in eval_results_files(results, kwargs.get("dataset_id"), date=date).items():
            (out / ".eval_results" / name).write_text(yaml.safe_dump(entries, sort_keys=False), encoding="utf-8")
    return readme


def write_training_card(training: dict[str, Any], out_dir: str | Path, results: dict | str | Path | None = None) -> Path:
    """Write a training run's card into ``out_dir`` (an output or checkpoint folder): ``README.md``, built
    from ``training`` (and ``results`` when the model was evaluated), and ``training`` itself as
    ``icw_training.json``. The recipes call it through :func:`icw.train.card.write_card`.

    Args:
        training (`dict`): the run's facts, as :func:`icw.train.card.training_facts` reads them from the trainer.
        out_dir (`str` or `Path`): the folder to write into.
        results (`dict`, `str` or `Path`, *optional*): ICWBench results of the trained model.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / TRAINING_FACTS).write_text(json.dumps(training, indent=2) + "\n", encoding="utf-8")
    return write_model_card(results, out, training=training)


#: What each recipe is, as a card names it.
RECIPES = {"sdlp": "SDLP, self-distillation with logit perturbation (the paper's Section 4.2)",
           "grpo": "GRPO with the verifier's z as reward (the paper's Section 4.3)",
           "sft": "SFT on the watermarked answers of D_cs (the paper's baseline)"}


def _steps(pairs: list | None, name: str) -> str:
    if not pairs:
        return ""
    (s0, v0), (s1, v1) = pairs[0], pairs[-1]
    return f"{name} {v0:.4g} at step {s0}" + (f" -> {v1:.4g} at step {s1}" if s1 != s0 else "")


def training_description(training: dict[str, Any]) -> dict[str, Any]:
    """What a card says about a training run: a one-line summary, the "How it was trained" lines, the
    tags, and the commands that evaluate the model (every number comes from ``training``).

    Args:
        training (`dict`): the facts :func:`icw.train.card.training_facts` recorded.
    """
    recipe, lora, progress = training["recipe"], training.get("adapter"), training.get("progress") or {}
    base, families = training["base_model"], list(training.get("families") or [])
    fams = ", ".join(f.upper() for f in families)
    what = (f"A LoRA adapter (rank {lora['r']}) for `{_hub_name(base)}`" if lora
            else f"`{_hub_name(base)}` with all weights fine-tuned")
    lines = [f"Recipe: {RECIPES.get(recipe, recipe)}; `recipes/{recipe}.py` (or `icw train {recipe}`).",
             f"Base model: `{base}`" + (f" (icw's embedded copy of `{SMOLLM2_HUB_ID}`)." if base == "smollm2" else ".")]
    lines.append(f"Weights: a LoRA adapter, rank {lora['r']}, alpha {lora['lora_alpha']}, on "
                 f"{', '.join(map(str, lora['target_modules']))}." if lora else "Weights: all weights fine-tuned (no adapter).")
    data = training.get("dataset") or {}
    counts = []
    for family, got in (training.get("rows") or {}).items():
        h0 = f" + {got['h0']} D_H0" if got.get("h0") else ""
        counts.append(f"{family.upper()} {got['h1']} D_H1{h0} (distinct keys: {got['keys']})")
    lines.append(f"Data: `{data.get('name')}`" + (f" (split {data['split']})" if data.get("split") else "")
                 + (f", at most {data['max_rows']} rows" if data.get("max_rows") else "")
                 + f"; families {fams}; rows trained on: {'; '.join(counts)}.")
    if training.get("keys"):
        lines.append(f"Keys: {training['keys']}")
    settings = training.get("settings") or {}
    lines.append("Settings: " + ", ".join(f"{k} {v}" for k, v in settings.items()) + ".")
    if (processes := training.get("processes") or 1) > 1:
        per_step = processes * settings.get("per_device_train_batch_size", 1) * settings.get("gradient_accumulation_steps", 1)
        lines.append(f"Processes: {processes} ({training.get('parallelism', 'data parallel')}), so {per_step} rows an "
                     "optimizer step.")
    done = progress.get("global_step")
    state = (f"optimizer step {done} of {progress.get('max_steps')} (epoch {progress.get('epoch') or 0:.2f})"
             + ("" if progress.get("final") else "; this folder is a checkpoint saved during the run"))
    measured = [m for m in (_steps(progress.get("loss"), "logged loss"), _steps(progress.get("reward"), "mean reward"))
                if m]
    if progress.get("train_loss") is not None:
        measured.append(f"mean training loss {progress['train_loss']:.4g}")
    lines.append(f"Progress: {state}" + (f"; {'; '.join(measured)}" if measured else "") + ".")
    if training.get("versions"):
        lines.append("Software: " + ", ".join(f"{k} {v}" for k, v in training["versions"].items()) + ".")
    out, tokenizer = training.get("output_dir") or training["model_id"], _load_name(base)
    run = f"runs/eval-{Path(str(out)).name}"
    model = ["--model", tokenizer, "--adapter", str(out)] if lora else ["--model", str(out)]
    evaluate = [f".venv/bin/icw bench build --out runs/icwbench --tokenizer {tokenizer} --families {' '.join(families)}",
                f".venv/bin/icw bench run --dataset runs/icwbench --out {run} --families {' '.join(families)} "
                + " ".join(model) + f" --base-model {_hub_name(base)}",
                f".venv/bin/icw bench report {run}",
                f".venv/bin/icw hub model-card {run}/results.json --out {out}"]
    return {"summary": f"{what}, trained with icw's {recipe.upper()} recipe to follow in-context watermark (ICW) "
                       f"instructions of the {fams} famil{'ies' if len(families) > 1 else 'y'}.",
            "lines": lines, "adapter": "peft/lora" if lora else None, "tags": [recipe], "evaluate": evaluate}
