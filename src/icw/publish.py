"""Publishing to the Hugging Face Hub: the evaluate metrics as Gradio Spaces, and the ``icw hub`` command.

* ``icw hub publish-metrics --org ORG [--dry-run]`` uploads each metric folder (``metrics/<name>``)
  unchanged as a Gradio Space, whose ``app.py`` runs :func:`metric_demo` (evaluate's own widget is
  broken on gradio >= 4), plus the icw package as ``icw/`` beside it: icw is not on PyPI, so the
  Space's ``requirements.txt`` names only what is.
* ``icw hub model-card RESULTS_JSON --out DIR`` writes a model card (:mod:`icw.cards`).
* ``icw hub metric-path NAME`` prints a bundled metric folder, for ``evaluate.load``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .bench.dataset import ICWBENCH_ID
from .metric_paths import METRICS, metric_path
from .verification import DEFAULT_ALPHA

# icw.cards (numpy, scikit-learn), evaluate and gradio load inside the commands that use them, so
# that `icw hub ...` and every other `icw` command start without them.

#: The icw package folder (``src/icw`` in a checkout, the installed package otherwise).
_PACKAGE_DIR = Path(__file__).resolve().parent
#: Folders of the installed package a Space does not need: the metric folders (the Space is one of
#: them) and the card templates, which a wheel carries as data packages, and byte code.
_NOT_FOR_SPACES = {"_bundled_metrics", "_card_templates", "__pycache__"}


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

    Args:
        module_file (`str` or `Path`): the metric's ``.py`` file (``app.py`` passes its sibling).
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
    """Upload each bundled metric folder as a Gradio Space ``<org>/<name>``; returns the plan.

    A Space gets its folder's files unchanged and the icw package as ``icw/`` beside them
    (:func:`space_package_files`), in one commit. The plan lists both, with sizes, per Space.

    Args:
        org (`str`): the Hub user or organization that owns the Spaces.
        names (`Sequence[str]`, defaults to all four metrics): the bundled metrics to publish.
        dry_run (`bool`, defaults to `False`): return the plan without uploading.
        private (`bool`, defaults to `False`): create the Spaces as private.
        token (`str`, *optional*): a Hub token (``None``: the logged-in user's).
    """
    if not org or "/" in org:
        raise ValueError(f"--org must be a user or organization name without '/', got {org!r}")
    package = space_package_files()
    plan = []
    for name in names:
        folder = Path(metric_path(name))
        files = _listing(folder, _files(folder))
        plan.append({"repo_id": f"{org}/{name}", "repo_type": "space", "space_sdk": "gradio", "folder": str(folder),
                     "files": files, "package": str(_PACKAGE_DIR), "package_files": package})
    if dry_run:
        return plan
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(token=token)
    for item in plan:
        api.create_repo(item["repo_id"], repo_type="space", space_sdk="gradio", private=private, exist_ok=True)
        ops = [CommitOperationAdd(path_in_repo=f["path"], path_or_fileobj=str(Path(item["folder"], f["path"])))
               for f in item["files"]]
        ops += [CommitOperationAdd(path_in_repo=f["path"], path_or_fileobj=str(_PACKAGE_DIR.parent / f["path"]))
                for f in item["package_files"]]
        api.create_commit(item["repo_id"], ops, repo_type="space", commit_message="Upload icw metric")
        item["url"] = f"https://huggingface.co/spaces/{item['repo_id']}"
    return plan


def _files(folder: Path, skip: frozenset[str] | set[str] = frozenset({"__pycache__"})) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix != ".pyc"
                  and not skip.intersection(p.relative_to(folder).parts))


def _listing(base: Path, files: list[Path]) -> list[dict[str, Any]]:
    return [{"path": p.relative_to(base).as_posix(), "bytes": p.stat().st_size} for p in files]


def space_package_files() -> list[dict[str, Any]]:
    """The icw package files a metric Space carries as ``icw/`` next to its ``app.py``, with their sizes.

    icw is not on PyPI, so a Space cannot install it from ``requirements.txt``; the app imports
    this copy instead (a Space runs ``app.py`` from the repository root).
    """
    return _listing(_PACKAGE_DIR.parent, _files(_PACKAGE_DIR, _NOT_FOR_SPACES))


def _cli_publish(args: argparse.Namespace) -> None:
    plan = publish_metrics(args.org, args.only or METRICS, dry_run=args.dry_run, private=args.private)
    for item in plan:
        verb = "would upload" if args.dry_run else "uploaded"
        files = ", ".join(f"{f['path']} ({f['bytes']:,} B)" for f in item["files"])
        package = f"{len(item['package_files'])} files, {sum(f['bytes'] for f in item['package_files']):,} B"
        print(f"{verb} {item['folder']} -> space {item['repo_id']}: {files}; and {item['package']} as icw/ ({package})")


def _cli_model_card(args: argparse.Namespace) -> None:
    from .cards import write_model_card

    readme = write_model_card(args.results, args.out, base_model=args.base_model,
                              adapter=args.adapter_type if args.adapter else None, model_id=args.model_id,
                              dataset_id=args.dataset, license=args.license, stages=args.stages,
                              cost=args.timings)
    print(f"wrote {readme} and {readme.parent / '.eval_results'}", file=sys.stderr)


def _cli_metric_path(args: argparse.Namespace) -> None:
    print(metric_path(args.name))


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``icw hub`` (metric Spaces, model cards) to the CLI's subparsers."""
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
    card.add_argument("--adapter-type", default="peft/lora", help="adapter description")
    card.add_argument("--model-id", help="name of the model (default: results' model)")
    card.add_argument("--dataset", help=f"Hub dataset id the run used, e.g. {ICWBENCH_ID} (default: the results' dataset: "
                           "its Hub id, or a local folder named as such)")
    card.add_argument("--license", help="license identifier for the card metadata (e.g. apache-2.0)")
    card.add_argument("--stages", help="stages.json of icw bench compare over the model's training stages (Base, "
                                       "+SDLP, ...): the card shows that table with its paired tests")
    card.add_argument("--timings", help="timings.jsonl of the run (scripts/speedrun.sh): the card's Cost section, "
                                        "each stage's wall time and the machine")
    card.set_defaults(func=_cli_model_card)

    path = hub_sub.add_parser("metric-path", help="print the folder of a bundled metric (for evaluate.load)")
    path.add_argument("name", choices=METRICS)
    path.set_defaults(func=_cli_metric_path)
