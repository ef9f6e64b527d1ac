"""Shared helpers for the benchmark scripts: human-written English from gensim's test data.

gensim 4.4.0 ships three small English corpora in ``gensim/test/test_data``. We read the
files directly (the package is located with ``importlib.util.find_spec`` and never imported):

* ``lee_background.cor``: 300 news documents, one per line;
* ``lee.cor``: 50 more news documents;
* ``enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2``: 107 Wikipedia
  articles, from which we keep the paragraphs of more than 40 words after stripping the
  wiki markup roughly (templates, tables, references, links, emphasis, headings, lists).

None of this text was written with any ICW key in mind, so every watermark test on it is a
test under the null hypothesis.
"""

from __future__ import annotations

import argparse
import bz2
import importlib.util
import os
import re
import statistics
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_var, "1")

WIKI_FILE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
MIN_WIKI_WORDS = 40


def gensim_test_data() -> Path:
    """``gensim/test/test_data`` of the installed gensim, found without importing gensim."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the benchmarks read human text shipped with gensim: pip install gensim==4.4.0")
    path = Path(next(iter(spec.submodule_search_locations))) / "test" / "test_data"
    if not (path / "lee_background.cor").exists():
        raise RuntimeError(f"{path} lacks lee_background.cor: reinstall gensim==4.4.0")
    return path


def _lines(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]


_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
_TABLE = re.compile(r"\{\|.*?\|\}", re.S)
_REF = re.compile(r"<ref[^>/]*/>|<ref[^>]*>.*?</ref>", re.S | re.I)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_TAG = re.compile(r"<[^>]+>")
_FILE_LINK = re.compile(r"\[\[(?:File|Image|Category|[a-z]{2,3}(?:-[a-z]+)?):", re.I)
_LINK = re.compile(r"\[\[(?:[^|\[\]]*\|)?([^\[\]]*)\]\]")
_EXT_LINK = re.compile(r"\[https?://[^\s\]]+\s*([^\]]*)\]")
_EMPHASIS = re.compile(r"'{2,}")
_SPACES = re.compile(r"[ \t]+")


def _drop_file_links(text: str) -> str:
    """Remove ``[[File:...]]``-like links, whose captions may nest further links."""
    out, pos = [], 0
    for match in _FILE_LINK.finditer(text):
        if match.start() < pos:
            continue  # inside a link already dropped
        out.append(text[pos:match.start()])
        depth, i = 0, match.start()
        while i < len(text):
            if text.startswith("[[", i):
                depth, i = depth + 1, i + 2
            elif text.startswith("]]", i):
                depth, i = depth - 1, i + 2
                if depth == 0:
                    break
            else:
                i += 1
        pos = i
    out.append(text[pos:])
    return "".join(out)


def strip_wiki_markup(text: str) -> list[str]:
    """Rough plain text of a wiki article, as a list of paragraphs (not a full parser)."""
    text = _COMMENT.sub("", text)
    text = _REF.sub("", text)
    for _ in range(5):  # nested templates, innermost first
        text, n = _TEMPLATE.subn("", text)
        if not n:
            break
    text = _TABLE.sub("", text)
    text = _drop_file_links(text)
    text = _LINK.sub(r"\1", text)
    text = _EXT_LINK.sub(r"\1", text)
    text = _TAG.sub("", text)
    text = _EMPHASIS.sub("", text)
    text = text.replace("&nbsp;", " ").replace("&amp;", "&").replace("&quot;", '"')
    paragraphs = []
    for block in text.split("\n"):
        block = _SPACES.sub(" ", block).strip()
        if not block or block[0] in "=*#:;|!{}" or block.startswith("__"):
            continue  # headings, lists, indents, table remains, magic words
        paragraphs.append(block)
    return paragraphs


@lru_cache(maxsize=1)
def wikipedia_paragraphs(min_words: int = MIN_WIKI_WORDS) -> tuple[str, ...]:
    """Paragraphs of more than ``min_words`` words from gensim's shortened Wikipedia dump."""
    out: list[str] = []
    with bz2.open(gensim_test_data() / WIKI_FILE, "rb") as handle:
        for _, elem in ET.iterparse(handle):
            if elem.tag.rsplit("}", 1)[-1] == "text" and elem.text and not elem.text.lstrip().startswith("#REDIRECT"):
                out.extend(p for p in strip_wiki_markup(elem.text) if len(p.split()) > min_words)
            elem.clear()
    return tuple(out)


@lru_cache(maxsize=1)
def human_passages() -> tuple[tuple[str, str], ...]:
    """Every human passage as ``(source, text)``: 300 + 50 news documents, then Wikipedia paragraphs."""
    data = gensim_test_data()
    out = [("lee_background", t) for t in _lines(data / "lee_background.cor")]
    out += [("lee", t) for t in _lines(data / "lee.cor")]
    out += [("wikipedia", t) for t in wikipedia_paragraphs()]
    return tuple(out)


def human_texts(num_texts: int) -> list[str]:
    """The human passages repeated (in order) to exactly ``num_texts`` texts: a corpus of any size under the null."""
    passages = [text for _, text in human_passages()]
    return (passages * (num_texts // len(passages) + 1))[:num_texts]


def corpus_parser(description: str, num_texts: int, families: list[str], quick_family: str) -> argparse.ArgumentParser:
    """The options of the corpus benchmarks; ``--quick`` is set to 200 texts of ``quick_family``, 1 repeat
    (call :func:`apply_quick` after parsing)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--num-texts", type=int, default=num_texts)
    parser.add_argument("--families", nargs="+", default=families, choices=("tsp", "wip", "sa"))
    parser.add_argument("--tokenizer", default="qwen3")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_const", const=quick_family,
                        help=f"200 texts, {quick_family.upper()} only, 1 repeat")
    return parser


def apply_quick(args: argparse.Namespace) -> argparse.Namespace:
    """``--quick``: 200 texts of one family, 1 repeat."""
    if args.quick:
        args.num_texts, args.families, args.repeats = 200, [args.quick], 1
    return args


def texts_of_tokens(tokenizer: Any, num_texts: int, num_tokens: int = 600) -> list[str]:
    """``num_texts`` human texts of exactly ``num_tokens`` tokens (consecutive passages joined
    by blank lines, then cut at the ``num_tokens``-th token's end)."""
    passages = [t for _, t in human_passages()]
    texts: list[str] = []
    i = 0
    while len(texts) < num_texts:
        if i >= len(passages):
            raise ValueError(f"not enough human text for {num_texts} texts of {num_tokens} tokens")
        parts: list[str] = []
        while i < len(passages):
            parts.append(passages[i])
            i += 1
            joined = "\n\n".join(parts)
            enc = tokenizer(joined, add_special_tokens=False, return_offsets_mapping=True)
            if len(enc["input_ids"]) >= num_tokens:
                texts.append(joined[: enc["offset_mapping"][num_tokens - 1][1]])
                break
    return texts


def rate_with_ci(hits: int, n: int) -> str:
    """``hits / n`` with its 95% Clopper-Pearson interval."""
    from scipy.stats import binomtest

    ci = binomtest(int(hits), n).proportion_ci(0.95)
    return f"{hits / n:.3f} [{ci.low:.3f}, {ci.high:.3f}]"


def median_time(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Median wall time and median CPU time of this process (all threads) of ``fn()`` over
    ``repeats`` calls, in seconds. CPU time is the steadier measure on a busy machine."""
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def benchmark_model(name: str, device: str = "cpu", dtype: str | None = None) -> tuple[Any, Any]:
    """``(model, tokenizer)``: a random model with a real Qwen3 shape (``icw.testing.QWEN3_SHAPES``,
    for GPU timings: the architecture matters, not the weights), else ``icw.models.load_model``."""
    import torch

    from icw.models import load_model
    from icw.testing import QWEN3_SHAPES, random_model

    torch_dtype = getattr(torch, dtype) if dtype else None
    if name in QWEN3_SHAPES:
        return random_model(name, device=device, dtype=torch_dtype)
    return load_model(name, dtype=torch_dtype, device=device)


#: Key seeds of the power and detection-curve benchmarks: disjoint from the audit's and ICWBench's.
ANSWER_SEED_START = 3_000_000


def biased_answers(family: str, num: int, max_new_tokens: int, cache: str | Path | None = None,
                   batch_size: int = 30, delta: float | None = None, screen: bool = False) -> list[tuple[str, str]]:
    """``num`` logit-biased SmolLM2-135M-Instruct answers to the bundled questions, each under a fresh
    key (seeds from :data:`ANSWER_SEED_START`; screened keys, :func:`icw.new_key`, with ``screen=True``), as ``(key string,
    answer)``. Kept in ``cache`` (JSON Lines) batch by batch when given, so a rerun resumes: generation
    dominates on CPU (a cached answer is reused only for the same key)."""
    import json

    from icw.bench.dataset import bundled_questions_path, read_questions
    from icw.generation import generate_responses
    from icw.models import load_model
    from icw.screening import new_key

    keys = [new_key(family, ANSWER_SEED_START + i, _smollm2() if family != "sa" else None, screen=screen)
            for i in range(num)]
    path = Path(cache) if cache else None
    done: dict[int, str] = {}
    if path is not None and path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else None
            if (row and row["max_new_tokens"] == max_new_tokens and row["family"] == family and row["index"] < num
                    and _same_material(row.get("key"), keys[row["index"]])):
                done[row["index"]] = row["answer"]
    questions = [q for q, _ in read_questions(bundled_questions_path())]
    todo = [i for i in range(num) if i not in done]
    if todo:
        model, tok = load_model("smollm2")

    def save(batch: list[int], answers: list[str]) -> None:
        for j, answer in zip(batch, answers, strict=True):
            done[todo[j]] = answer
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as out:
                out.writelines(json.dumps({"family": family, "index": todo[j], "key": keys[todo[j]].to_string(),
                                           "answer": a, "max_new_tokens": max_new_tokens}) + "\n"
                               for j, a in zip(batch, answers, strict=True))

    if todo:
        generate_responses(model, tok, [questions[i % len(questions)] for i in todo], [keys[i] for i in todo], "bias",
                           delta=delta, max_new_tokens=max_new_tokens, batch_size=batch_size,
                           progress=f"{family} answers", on_batch=save)
    return [(keys[i].to_string(), done[i]) for i in range(num)]


def _same_material(cached: str | None, key: Any) -> bool:
    """Whether a cached answer's key has ``key``'s material (a screen record alone changes nothing generated)."""
    from icw.keys import ICWKey

    return cached is None or ICWKey.from_string(cached).with_params(screen=None) == key.with_params(screen=None)


def _smollm2() -> Any:
    from icw.models import load_tokenizer

    return load_tokenizer("smollm2")


def truncate_tokens(tokenizer: Any, text: str, num_tokens: int) -> str:
    """``text`` cut after its ``num_tokens``-th token (the whole text when it is shorter)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if len(enc["input_ids"]) <= num_tokens:
        return text
    return text[: enc["offset_mapping"][num_tokens - 1][1]]
