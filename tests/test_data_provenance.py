"""Every data file the package ships (src/icw/data/) records its source and licence: an entry of
src/icw/data/PROVENANCE.json, and, for a file whose rows carry their own, those fields on every row."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "icw" / "data"


def _rows(path: Path) -> list[dict]:
    """The JSON Lines rows of ``path`` (gzip-compressed when it ends in ``.gz``)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def provenance_problems(folder: Path) -> list[str]:
    """What is missing from ``folder``'s provenance record: files without an entry, entries without a file, an
    entry without a source or licence, a row without the fields its entry says every row carries."""
    manifest = folder / "PROVENANCE.json"
    if not manifest.is_file():
        return [f"{folder} has no PROVENANCE.json"]
    entries = json.loads(manifest.read_text(encoding="utf-8"))["files"]
    files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    problems = [f"{name}: no entry in PROVENANCE.json" for name in sorted(files - set(entries))]
    problems += [f"{name}: an entry for a file that is not there" for name in sorted(set(entries) - files)]
    for name in sorted(files & set(entries)):
        entry = entries[name]
        problems += [f"{name}: no {field}" for field in ("content", "source", "licence")
                     if not str(entry.get(field, "")).strip()]
        for field in entry.get("per_row", []):
            bare = sum(not str(row.get(field, "")).strip() for row in _rows(folder / name))
            if bare:
                problems.append(f"{name}: {bare} rows without a {field}")
    return problems


def test_every_bundled_data_file_records_its_source_and_licence():
    assert provenance_problems(DATA) == []
    entries = json.loads((DATA / "PROVENANCE.json").read_text(encoding="utf-8"))["files"]
    assert entries["reference_corpus.jsonl.gz"]["per_row"] == ["source", "licence"]
    assert "LGPL-2.1" in entries["english_initials.json"]["licence"]


def test_the_check_fails_on_a_file_without_a_record(tmp_path):
    folder = tmp_path / "data"
    shutil.copytree(DATA, folder)
    (folder / "news.txt").write_text("A news story with no recorded licence.\n", encoding="utf-8")
    rows = _rows(folder / "reference_corpus.jsonl.gz")
    rows[3]["licence"] = ""
    with gzip.open(folder / "reference_corpus.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    manifest = json.loads((folder / "PROVENANCE.json").read_text(encoding="utf-8"))
    manifest["files"]["questions.jsonl"]["licence"] = " "
    manifest["files"]["gone.json"] = {"content": "x", "source": "x", "licence": "x"}
    (folder / "PROVENANCE.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert provenance_problems(folder) == [
        "news.txt: no entry in PROVENANCE.json", "gone.json: an entry for a file that is not there",
        "questions.jsonl: no licence", "reference_corpus.jsonl.gz: 1 rows without a licence"]
    (folder / "PROVENANCE.json").unlink()
    assert provenance_problems(folder) == [f"{folder} has no PROVENANCE.json"]


def test_the_shipped_letter_statistics_hold_counts_not_text():
    data = json.loads((DATA / "english_initials.json").read_text(encoding="utf-8"))
    assert sorted(data["frequencies"]) == [chr(c) for c in range(65, 91)]
    assert all(isinstance(v, float) for v in data["frequencies"].values())
    assert all(isinstance(data[k], int) for k in ("passages", "words"))
