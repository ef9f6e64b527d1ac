"""Regenerate the model cards we publish from their kept ICWBench results, or render one card.

    .venv/bin/python model_cards/generate.py            # every published card, from its kept results
    .venv/bin/python model_cards/generate.py --check    # exit 1 if a kept card differs from what its results give
    .venv/bin/python model_cards/generate.py RESULTS_JSON --out DIR [...]   # one card: icw hub model-card

A published card is a folder ``model_cards/<model>/`` holding ``card.yaml`` (how to render it: the
keys of :data:`CARD_OPTIONS`, among them the ``commands`` that produced the results and the facts
about the run the results do not record, as ``notes``), ``results.json`` (the output of
``icw bench report``, kept) and what this script writes from them: ``README.md`` (the card, with its
``model-index``) and ``.eval_results/*.yaml``. A trained model's folder also keeps its training run's
``icw_training.json`` (the card's "How it was trained") and ``stages.json`` (``icw bench compare`` of its
stages: the card's "Training stages" table), when present. Every card is built from
``model_cards/templates/model_card.md`` by :func:`icw.cards.model_card`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from icw.cards import write_model_card
from icw.cli import main as icw_main
from icw.jsonl import read_json_object
from icw.runs import TIMINGS, TRAINING_FACTS

HERE = Path(__file__).resolve().parent
#: What a ``card.yaml`` may set: the keyword arguments of :func:`icw.cards.write_model_card`.
CARD_OPTIONS = ("model_id", "base_model", "adapter", "dataset_id", "license", "date", "notes", "commands", "load_from")
#: ``icw bench compare``'s output over the model's training stages, kept beside results.json.
STAGES = "stages.json"


def published_cards(root: Path = HERE) -> list[Path]:
    """The folders of the published cards: every ``<root>/<model>/`` with a ``card.yaml``.

    Args:
        root (`Path`, defaults to this folder): the ``model_cards`` folder.
    """
    return sorted(path.parent for path in root.glob("*/card.yaml"))


def card_options(folder: Path) -> dict[str, Any]:
    """The rendering options of one card, read from ``folder/card.yaml`` and checked.

    Args:
        folder (`Path`): a published card's folder.
    """
    options = yaml.safe_load((folder / "card.yaml").read_text(encoding="utf-8")) or {}
    if not isinstance(options, dict):
        raise ValueError(f"{folder / 'card.yaml'}: expected a mapping of {', '.join(CARD_OPTIONS)}")
    unknown = sorted(set(options) - set(CARD_OPTIONS))
    if unknown:
        raise ValueError(f"{folder / 'card.yaml'}: unknown keys {unknown}; known: {', '.join(CARD_OPTIONS)}")
    return options


def render(folder: Path, out: Path) -> Path:
    """Write the card of ``folder`` (its ``results.json`` through its ``card.yaml``) into ``out``.

    Args:
        folder (`Path`): a published card's folder.
        out (`Path`): where to write ``README.md`` and ``.eval_results/`` (``folder`` itself to update it).
    """
    options = card_options(folder)
    if not (folder / "results.json").is_file():
        raise SystemExit(f"{folder}: no results.json; copy the output of `icw bench report` there (its card.yaml's "
                         "commands say which)")
    if (folder / TRAINING_FACTS).is_file():
        options["training"] = read_json_object(folder / TRAINING_FACTS)
    if (folder / STAGES).is_file():
        options["stages"] = folder / STAGES
    if (folder / TIMINGS).is_file():
        options["cost"] = folder / TIMINGS
    return write_model_card(folder / "results.json", out, **options)


def _generated_files(folder: Path) -> set[str]:
    return {"README.md"} | {f".eval_results/{p.name}" for p in (folder / ".eval_results").glob("*.yaml")}


def stale_files(folder: Path) -> list[str]:
    """The files of ``folder``'s card that differ from a fresh rendering (missing and extra ones too).

    Args:
        folder (`Path`): a published card's folder.
    """
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        render(folder, fresh)
        names = _generated_files(fresh) | _generated_files(folder)
        return sorted(name for name in names if not (folder / name).is_file() or not (fresh / name).is_file()
                      or (folder / name).read_bytes() != (fresh / name).read_bytes())


def regenerate(folders: list[Path], check: bool = False) -> int:
    """Render every card in ``folders`` in place, or with ``check`` report the stale ones; the exit status.

    Args:
        folders (`list[Path]`): published card folders.
        check (`bool`, defaults to `False`): compare instead of writing; 1 when a card is stale.
    """
    status = 0
    for folder in folders:
        if check:
            stale = stale_files(folder)
            status |= bool(stale)
            print(f"{folder.name}: {'stale: ' + ', '.join(stale) if stale else 'up to date'}")
        else:
            print(f"wrote {render(folder, folder)}")
    if status:
        print(f"regenerate with: {Path(sys.executable).name} model_cards/generate.py", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    """Regenerate (or ``--check``) the published cards; with a results file first, ``icw hub model-card``."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and not args[0].startswith("-"):  # one card from RESULTS_JSON, as before
        return icw_main(["hub", "model-card", *args])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a kept card differs from its results")
    parser.add_argument("--only", nargs="+", metavar="MODEL", help="only these folders of model_cards/")
    opts = parser.parse_args(args)
    folders = published_cards()
    if opts.only:
        unknown = sorted(set(opts.only) - {f.name for f in folders})
        if unknown:
            parser.error(f"no published card {unknown}; have {', '.join(f.name for f in folders)}")
        folders = [f for f in folders if f.name in opts.only]
    return regenerate(folders, check=opts.check)


if __name__ == "__main__":
    sys.exit(main())
