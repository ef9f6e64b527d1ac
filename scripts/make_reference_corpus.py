"""Build ``src/icw/data/reference_corpus.jsonl.gz``: human English in five domains, every passage with its
provenance and licence, split into a screening half and an audit half.

The corpus is the reference that new keys are screened against (``icw.screening``) and that
``icw key new`` reports per-domain false-positive rates on. Only text that may be redistributed is
shipped; each passage records where it came from and under which terms:

============== ======================================================= ==========================================
domain         source                                                  licence
============== ======================================================= ==========================================
encyclopedia   Wikipedia articles in gensim 4.4.0's test data          CC BY-SA 3.0 (Wikipedia contributors)
technical      the Python 3.11 documentation (library, reference,      PSF License 2.0 (Python Software Foundation)
               tutorial, HOWTOs, FAQ), Debian package python3.11-doc
legal          licence texts: /usr/share/common-licenses (Debian        each licence's own terms, which allow
               base-files) and the licence files of the Python         verbatim copies
               packages installed in .venv
fiction        Jane Austen's six novels, Debian package                 public domain (author died 1817)
               r-cran-janeaustenr 1.0.0
dictionary     Ambrose Bierce, The Devil's Dictionary (1911), Debian    public domain
               package dict-devil
============== ======================================================= ==========================================

Passages are 100-400 words: consecutive paragraphs of one document are joined until a passage has
at least 100 words, and a longer paragraph is cut at sentence ends. Exact duplicates (after
lower-casing and dropping non-letters) are kept once. The halves are split by *document group*
(a Wikipedia article, a documentation page, a licence file, a novel's chapter, a run of
dictionary entries), by a hash of the group's name, so near-duplicate neighbours never straddle
the halves. A domain with more than ``--per-half`` passages in a half is subsampled (seeded).

Not shipped, because their licences do not clearly allow redistribution: gensim's news documents
(``lee_background.cor``) and Usenet posts (``mini_newsgroup``). ``benchmarks/key_screening.py`` reads
them from the installed gensim as domains held out of the corpus entirely.

Run from the repository root on Debian 12 (the Debian packages are downloaded with ``apt-get
download`` into a temporary folder and unpacked with ``dpkg-deb``; nothing is installed)::

    python scripts/make_reference_corpus.py
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import json
import re
import struct
import subprocess
import sys
import tempfile
import textwrap
import xml.etree.ElementTree as ET
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import WIKI_FILE, gensim_test_data, strip_wiki_markup  # noqa: E402

OUT = ROOT / "src" / "icw" / "data" / "reference_corpus.jsonl.gz"
MIN_WORDS, MAX_WORDS = 100, 400
DEBIAN_PACKAGES = {"python3.11-doc": "3.11.2-6+deb12u9", "r-cran-janeaustenr": "1.0.0-1", "dict-devil": "1.0-13.1"}
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")


# ----------------------------------------------------------------------------- passages
def chunk_paragraphs(paragraphs: list[str]) -> list[str]:
    """Passages of ``MIN_WORDS``-``MAX_WORDS`` words from one document's paragraphs, in order.

    Paragraphs are joined (blank line between) until a passage reaches ``MIN_WORDS``; a paragraph
    longer than ``MAX_WORDS`` is first cut at sentence ends into pieces of at most ~300 words. A last
    piece under ``MIN_WORDS`` joins the previous passage when both fit in ``MAX_WORDS``, else it is dropped.
    """
    pieces: list[str] = []
    for para in paragraphs:
        para = para.strip()
        if not para:
            continue
        if len(para.split()) <= MAX_WORDS:
            pieces.append(para)
            continue
        current: list[str] = []
        for sentence in _SENTENCE_END.split(para):
            if current and len(" ".join(current + [sentence]).split()) > 300:
                pieces.append(" ".join(current))
                current = []
            current.append(sentence)
        if current:
            pieces.append(" ".join(current))
    out: list[str] = []
    current = []
    for piece in pieces:
        if current and len("\n\n".join(current + [piece]).split()) > MAX_WORDS:
            if len("\n\n".join(current).split()) >= MIN_WORDS:
                out.append("\n\n".join(current))
            current = []
        current.append(piece)
        if len("\n\n".join(current).split()) >= MIN_WORDS:
            out.append("\n\n".join(current))
            current = []
    if current:
        tail = "\n\n".join(current)
        if out and len((out[-1] + "\n\n" + tail).split()) <= MAX_WORDS:
            out[-1] += "\n\n" + tail
        elif len(tail.split()) >= MIN_WORDS:
            out.append(tail)
    return [p for p in out if MIN_WORDS <= len(p.split()) <= MAX_WORDS]


# ------------------------------------------------------------------------------ sources
def encyclopedia() -> Iterator[tuple[str, list[str]]]:
    """``(article title, paragraphs)`` of gensim's shortened English Wikipedia dump."""
    title = ""
    with bz2.open(gensim_test_data() / WIKI_FILE, "rb") as handle:
        for _, elem in ET.iterparse(handle):
            tag = elem.tag.rsplit("}", 1)[-1]
            if tag == "title":
                title = elem.text or ""
            elif tag == "text" and elem.text and not elem.text.lstrip().startswith("#REDIRECT"):
                yield title, [p for p in strip_wiki_markup(elem.text) if len(p.split()) >= 20]
            if tag == "page":
                elem.clear()


_ROLE = re.compile(r":[a-zA-Z:]+:`(?:~|!)?([^`<]*?)(?:\s*<[^>]*>)?`")
_LITERAL = re.compile(r"``(.+?)``")
_EMPH = re.compile(r"(?<![\w*])\*{1,2}([^*\n]+?)\*{1,2}(?![\w*])")
_LINK = re.compile(r"`([^`<]+?)\s*<[^>]*>`_+")
_REFNAME = re.compile(r"`([^`]+)`_+")
#: Directives whose indented body is prose (kept, dedented); every other directive is dropped with its body.
_PROSE_DIRECTIVES = {"function", "method", "class", "attribute", "data", "exception", "decorator", "describe",
                     "note", "warning", "versionadded", "versionchanged", "deprecated", "seealso", "impl-detail",
                     "classmethod", "staticmethod", "decoratormethod", "abstractmethod", "coroutinefunction",
                     "coroutinemethod", "option", "envvar", "cmdoption", "attention", "important", "tip", "hint",
                     "admonition", "glossary", "topic", "sidebar"}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def rst_paragraphs(text: str) -> list[tuple[str, list[str]]]:
    """Prose paragraphs of a reStructuredText page, grouped by section: ``[(heading, paragraphs)]``.

    Code (literal blocks after ``::``, doctests, code directives), tables, comments, targets and
    headings are dropped; roles and inline markup are reduced to their text.
    """
    lines = text.replace("\t", "    ").splitlines()
    sections: list[tuple[str, list[str]]] = [("", [])]
    para: list[str] = []

    def flush() -> None:
        if para:
            joined = " ".join(s.strip() for s in para)
            joined = _LINK.sub(r"\1", _ROLE.sub(r"\1", joined))
            joined = _REFNAME.sub(r"\1", _LITERAL.sub(r"\1", joined))
            joined = _EMPH.sub(r"\1", joined).replace("\\", "")
            if re.search(r"[A-Za-z]", joined) and not joined.startswith(("+-", "==", "|")):
                sections[-1][1].append(re.sub(r"\s+", " ", joined).strip())
            para.clear()

    i, skip_below = 0, None  # skip_below: drop lines indented more than this (a dropped block's body)
    literal_next = False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if skip_below is not None:
            if not stripped or _indent(line) > skip_below:
                i += 1
                continue
            skip_below = None
        if not stripped:
            flush()
            if literal_next:  # a paragraph ended with "::": the next indented block is code
                base = _indent(lines[i - 1]) if i else 0
                j = i + 1
                while j < len(lines) and not lines[j].strip():
                    j += 1
                if j < len(lines) and _indent(lines[j]) > base:
                    skip_below = base
                literal_next = False
            i += 1
            continue
        if i + 1 < len(lines) and re.fullmatch(r"([=\-~^\"'*#+`:.])\1{2,}", lines[i + 1].strip() or "x") \
                and len(lines[i + 1].strip()) >= len(stripped) - 2:
            flush()
            sections.append((stripped, []))
            i += 2
            continue
        if re.fullmatch(r"([=\-~^\"'*#+`])\1{2,}", stripped):
            flush()
            i += 1
            continue
        if stripped.startswith(".. "):
            flush()
            match = re.match(r"\.\. ([\w:-]+)::", stripped)
            if match and match.group(1).split(":")[-1] in _PROSE_DIRECTIVES:
                i += 1
                while i < len(lines) and lines[i].strip().startswith(":") and _indent(lines[i]) > _indent(line):
                    i += 1  # directive options
                continue
            skip_below = _indent(line)
            i += 1
            continue
        if stripped.startswith((">>>", "...", "$ ", "+-", "|")) or stripped.startswith("%"):
            flush()
            i += 1
            continue
        if stripped.startswith(("* ", "- ", "#. ")) or re.match(r"\d+\. ", stripped):
            flush()
            stripped = stripped.split(" ", 1)[1] if " " in stripped else stripped
        para.append(stripped.rstrip(":") + ":" if stripped.endswith("::") else stripped)
        if stripped.endswith("::"):
            literal_next = True
        i += 1
    flush()
    return sections


def technical(doc_root: Path) -> Iterator[tuple[str, list[str]]]:
    """``(page/section, paragraphs)`` of the Python 3.11 documentation sources (``_sources/*.rst.txt``)."""
    src = doc_root / "usr/share/doc/python3.11/html/_sources"
    for part in ("library", "reference", "tutorial", "howto", "faq"):
        for page in sorted((src / part).rglob("*.rst.txt")):
            rel = page.relative_to(src).as_posix().removesuffix(".rst.txt")
            for heading, paragraphs in rst_paragraphs(page.read_text(encoding="utf-8")):
                heading = _LITERAL.sub(r"\1", _ROLE.sub(r"\1", heading))
                yield f"{rel}#{heading}", [p for p in paragraphs if len(p.split()) >= 8]


_LICENCE_METADATA = re.compile(r"^(Files|Copyright|License|Upstream-[\w-]+|Source|Format|Comment|Disclaimer)\s*:",
                               re.I)


def _text_paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs with their lines joined (Debian's " ." blank lines understood)."""
    text = "\n".join("" if line.strip() == "." else line for line in text.splitlines())
    return [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def legal(venv_site: Path) -> Iterator[tuple[str, list[str]]]:
    """``(licence file, paragraphs)``: Debian's common licences, the installed Python packages' licence files,
    then the licence texts in the Debian packages' copyright files (``/usr/share/doc/*/copyright``).

    Lines of copyright-file metadata (``Files:``, ``Copyright:``) and paragraphs without a full sentence
    (lists of names, copyright lines) are dropped.
    """
    files = sorted(p for p in Path("/usr/share/common-licenses").iterdir() if p.is_file() and not p.is_symlink())
    files += sorted(p for p in venv_site.glob("*.dist-info/**/*") if p.is_file() and re.search(
        r"licen[cs]e|copying|notice", p.name, re.I) and p.suffix in ("", ".txt", ".md", ".rst"))
    files += sorted(Path("/usr/share/doc").glob("*/copyright"))
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        kept = []
        for para in _text_paragraphs(text):
            if _LICENCE_METADATA.match(para) or para.lower().startswith(("copyright", "(c)", "©")):
                continue
            if len(para.split()) >= 12 and re.search(r"[a-z]{3,}[ ,;:]+[a-z]{2,}", para):
                kept.append(para)
        name = path.as_posix()
        name = name[name.index("site-packages/") + 14:] if "site-packages/" in name else name
        yield name, kept


def _r_strings(blob: bytes) -> list[str]:
    """A character vector from R's XDR serialization (``saveRDS``/lazy-load format 2 or 3)."""
    assert blob[:2] == b"X\n", "expected R's XDR serialization"
    pos = 2
    version = struct.unpack(">i", blob[pos:pos + 4])[0]
    pos += 12
    if version == 3:
        pos += 4 + struct.unpack(">i", blob[pos:pos + 4])[0]  # native encoding name
    flags, length = struct.unpack(">ii", blob[pos:pos + 8])
    assert flags & 0xFF == 16, "expected a character vector (STRSXP)"
    pos += 8
    out = []
    for _ in range(length):
        _, size = struct.unpack(">ii", blob[pos:pos + 8])
        pos += 8
        if size < 0:
            out.append("")
            continue
        out.append(blob[pos:pos + size].decode("utf-8", errors="replace"))
        pos += size
    return out


AUSTEN = {"emma": "Emma (1815)", "mansfieldpark": "Mansfield Park (1814)", "northangerabbey": "Northanger Abbey (1817)",
          "persuasion": "Persuasion (1817)", "prideprejudice": "Pride and Prejudice (1813)",
          "sensesensibility": "Sense and Sensibility (1811)"}


def fiction(pkg_root: Path) -> Iterator[tuple[str, list[str]]]:
    """``(novel/chapter, paragraphs)`` of Jane Austen's novels, read from janeaustenr's lazy-load database."""
    base = pkg_root / "usr/lib/R/site-library/janeaustenr/data/Rdata"
    index = gzip.decompress(base.with_suffix(".rdx").read_bytes())
    rdb = base.with_suffix(".rdb").read_bytes()
    # the index is a named list of (offset, length) integer pairs: the pairs come first, in order, then the names
    pairs = [struct.unpack(">ii", m.group(1)) for m in re.finditer(rb"\x00\x00\x00\x0d\x00\x00\x00\x02(.{8})", index, re.S)]
    names = sorted(AUSTEN, key=lambda n: index.index(n.encode()))
    for name, (offset, length) in zip(names, pairs[: len(names)], strict=True):
        blob = rdb[offset:offset + length]
        lines = _r_strings(zlib.decompress(blob[4:]))
        chapter, paragraphs, current = 0, [], []  # chapters numbered through the volumes; 0 is the front matter
        for line in lines + ["CHAPTER END"]:
            if re.fullmatch(r"\s*(CHAPTER|Chapter)\s+([\dIVXLC]+\.?|END)\s*", line):
                if current:
                    paragraphs.append(" ".join(current).replace("_", ""))
                    current = []
                if paragraphs and chapter > 0:
                    yield f"{name}/{chapter}", paragraphs
                chapter, paragraphs = chapter + 1, []
            elif line.strip():
                current.append(line.strip())
            elif current:
                paragraphs.append(" ".join(current).replace("_", ""))
                current = []


def dictionary(pkg_root: Path) -> Iterator[tuple[str, list[str]]]:
    """``(run of entries, paragraphs)`` of The Devil's Dictionary (dictd database, gzip-compatible)."""
    text = gzip.decompress((pkg_root / "usr/share/dictd/devil.dict.dz").read_bytes()).decode("utf-8", errors="replace")
    entries = [e for e in re.split(r"\n\s*\n(?=[A-Z][A-Z' -]+[,.])", text) if re.match(r"[A-Z][A-Z' -]+,", e)]
    for start in range(0, len(entries), 12):  # a group: 12 consecutive entries
        paragraphs = []
        for entry in entries[start:start + 12]:
            for para in re.split(r"\n\s*\n", entry):
                lines = [ln.strip() for ln in para.splitlines() if ln.strip()]
                if lines:
                    paragraphs.append(re.sub(r"[{}]", "", " ".join(lines)))
        yield f"entries-{start // 12:03d}", paragraphs


# ------------------------------------------------------------------------------- build
DOMAINS = {
    "encyclopedia": ("Wikipedia article {group!r}, from gensim 4.4.0 test_data/" + WIKI_FILE,
                     "CC BY-SA 3.0 (Wikipedia contributors)"),
    "technical": ("Python 3.11 documentation, {group}, Debian package python3.11-doc 3.11.2-6+deb12u9",
                  "PSF-2.0 (Python Software Foundation License)"),
    "legal": ("licence file {group}", "verbatim licence text; its own terms permit verbatim copies"),  # see legal()
    "fiction": ("Jane Austen, {novel}, chapter {chapter}; Debian package r-cran-janeaustenr 1.0.0-1",
                "public domain (published 1811-1817; the author died in 1817)"),
    "dictionary": ("Ambrose Bierce, The Devil's Dictionary (1911), {group}; Debian package dict-devil",
                   "public domain (published 1911)"),
}


def _fetch_debs(folder: Path) -> dict[str, Path]:
    """Download and unpack the Debian packages (no installation); ``{package: unpacked root}``."""
    roots = {}
    for package in DEBIAN_PACKAGES:
        subprocess.run(["apt-get", "download", package], cwd=folder, check=True, capture_output=True)
        deb = next(folder.glob(f"{package}_*.deb"))
        roots[package] = folder / package
        subprocess.run(["dpkg-deb", "-x", str(deb), str(roots[package])], check=True)
        print(f"{package}: {deb.name}")
    return roots


def _half(domain: str, group: str) -> str:
    """``"screen"`` or ``"audit"`` from a hash of the passage's document group."""
    return "screen" if hashlib.sha256(f"{domain}/{group}".encode()).digest()[0] % 2 == 0 else "audit"


def _norm(text: str) -> str:
    return re.sub(r"[^a-z]+", "", text.lower())


def build(roots: dict[str, Path], per_half: int) -> list[dict[str, str]]:
    """Every passage of every domain, deduplicated, split and capped."""
    import random

    site = next((ROOT / ".venv" / "lib").glob("python3*/site-packages"))
    sources = {"encyclopedia": encyclopedia(), "technical": technical(roots["python3.11-doc"]), "legal": legal(site),
               "fiction": fiction(roots["r-cran-janeaustenr"]), "dictionary": dictionary(roots["dict-devil"])}
    seen: set[str] = set()
    rows: list[dict[str, str]] = []
    for domain, groups in sources.items():
        template, licence = DOMAINS[domain]
        halves: dict[str, list[dict[str, str]]] = {"screen": [], "audit": []}
        numbers: Counter[str] = Counter()  # passages so far per group (a page may repeat a section heading)
        for group, paragraphs in groups:
            if domain == "legal":  # licence files repeat each other paragraph by paragraph: keep each paragraph once
                paragraphs = [p for p in paragraphs if _norm(p) not in seen and not seen.add(_norm(p))]
            for text in chunk_paragraphs(paragraphs):
                number = numbers[group]
                numbers[group] += 1
                key = _norm(text)
                if key in seen and domain != "legal":
                    continue
                seen.add(key)
                novel, _, chapter = group.partition("/")
                source = template.format(group=group, novel=AUSTEN.get(novel, novel), chapter=chapter)
                halves[_half(domain, group)].append({"id": f"{domain}/{group}/{number}", "domain": domain,
                                                     "group": group, "text": text, "source": source,
                                                     "licence": licence})
        for split, items in halves.items():
            if len(items) > per_half:
                items = sorted(random.Random(f"{domain}/{split}").sample(items, per_half), key=lambda r: r["id"])
            rows += [{**r, "split": split} for r in items]
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-half", type=int, default=800, help="most passages per domain in each half")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = build(_fetch_debs(Path(tmp)), args.per_half)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(args.out, "wb", mtime=0) as raw:  # mtime=0: reproducible bytes
        for row in rows:
            raw.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
    counts = Counter((r["domain"], r["split"]) for r in rows)
    words = Counter()
    for r in rows:
        words[r["domain"]] += len(r["text"].split())
    for domain in DOMAINS:
        n = counts[domain, "screen"] + counts[domain, "audit"]
        print(f"{domain:13s} screen {counts[domain, 'screen']:5d}  audit {counts[domain, 'audit']:5d}  "
              f"mean words {words[domain] / max(n, 1):.0f}")
    print(textwrap.shorten(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB, {len(rows)} passages)", 200))


if __name__ == "__main__":
    main()
