"""The ``icw`` command line.

Sub-commands live next to the code they drive; each module in ``_COMMAND_MODULES`` exposes
``register(subparsers)`` and sets ``func`` on its parsers. Errors a user can fix are
printed as one ``icw: error: ...`` line with exit status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .corpus import add_arguments as add_corpus_arguments
from .keys import FAMILIES, ICWKey, ICWKeyError, KeyMismatchError
from .models import MissingAssetError, load_tokenizer
from .verification import DEFAULT_ALPHA, DEFAULT_MAX_CHARS, TextTooLongError, verify

#: Modules that add sub-commands (bench, train, ...); missing optional extras are skipped.
_COMMAND_MODULES = ("icw.demo", "icw.bench.cli", "icw.train.cli", "icw.publish")
_USER_ERRORS = (ICWKeyError, KeyMismatchError, TextTooLongError, MissingAssetError, ValueError, TypeError,
                FileNotFoundError, UnicodeDecodeError)


def _key_new(args: argparse.Namespace) -> None:
    params: dict[str, Any] = {}
    if args.gamma is not None:
        params["gamma"] = args.gamma
    if args.pool_size is not None:
        params["pool_size"] = args.pool_size
    if args.length is not None:
        params["num_letters" if args.family == "wip" else "length"] = args.length
    tokenizer = load_tokenizer(args.tokenizer) if args.family != "sa" or args.instruction else None
    key = ICWKey.create(args.family, args.seed, tokenizer if args.family != "sa" else None, **params)
    print(key.instruction(tokenizer) if args.instruction else key.to_string())


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {value!r}")
    return number


def _read_file(source: str) -> bytes:
    try:
        return Path(source).read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{source}: no such file (pass text files, or - for standard input)") from None
    except IsADirectoryError:
        raise ValueError(f"{source} is a directory: pass the text files in it (e.g. {source}/*.txt)") from None
    except OSError as err:
        raise ValueError(f"cannot read {source}: {err.strerror or err}") from None


def _read_texts(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    sources = args.files or ["-"]
    for source in sources:
        raw = sys.stdin.buffer.read() if source == "-" else _read_file(source)
        try:
            content = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{'standard input' if source == '-' else source} is not UTF-8 text") from None
        if not args.jsonl:
            yield source, content
            continue
        for number, line in enumerate(content.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{source}:{number}: not JSON ({err.msg})") from None
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                raise ValueError(f"{source}:{number}: expected an object with a string 'text' field")
            yield f"{source}:{number}", row["text"]


def _detect(args: argparse.Namespace) -> None:
    if args.dataset:  # corpus scale: datasets.map over a column, results as parquet
        from .corpus import run_from_args

        return run_from_args(args)
    key = ICWKey.from_string(args.key)
    tokenizer = load_tokenizer(args.tokenizer or key.tokenizer) if key.family != "sa" else None
    items = list(_read_texts(args))
    if not items:
        raise ValueError("no texts given: pass files, or JSON Lines with --jsonl, or text on standard input")
    try:
        results = verify([t for _, t in items], key, tokenizer, alpha=args.alpha, highlights=args.highlights,
                         max_chars=args.max_chars)
    except TextTooLongError as err:
        source = items[err.index][0] if 0 <= err.index < len(items) else "a text"
        name = "standard input" if source == "-" else source
        raise TextTooLongError(f"{name} has {err.length:,} characters, more than --max-chars={err.max_chars:,}. "
                               "Split it into passages (e.g. one per JSON Lines record with --jsonl), "
                               "or raise --max-chars.", err.index, err.length, err.max_chars) from None
    for (source, _), result in zip(items, results, strict=True):
        row = {"source": source, **result.to_dict()}
        if result.note:
            print(f"icw: note: {source}: {result.note}", file=sys.stderr)
        print(json.dumps(row))


def _vocab(args: argparse.Namespace) -> None:
    from .vocab import vocabulary

    print(json.dumps(vocabulary(load_tokenizer(args.tokenizer)).summary()))


def _install_metrics(args: argparse.Namespace) -> None:
    from .evaluate_metrics import install_metrics

    for name, folder in install_metrics(args.modules_cache).items():
        print(f"{name}: {folder}")
    print('evaluate.load("icw_tsp") (and icw_wip, icw_sa, icw_detection) now works by the bare name, offline')


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="icw", description="In-context watermarking: keys, detection, benchmarks, training.")
    sub = parser.add_subparsers(dest="command", required=True)

    key = sub.add_parser("key", help="create watermark keys").add_subparsers(dest="key_command", required=True)
    new = key.add_parser("new", help="print a new serialized key (or its instruction)")
    new.add_argument("--family", required=True, choices=FAMILIES)
    new.add_argument("--seed", required=True, type=int)
    new.add_argument("--tokenizer", default="qwen3", help="qwen3, gpt2, smollm2 (embedded), a folder or a Hub id")
    new.add_argument("--gamma", type=float, help="TSP green fraction (default 0.2)")
    new.add_argument("--pool-size", type=int, help="TSP candidate pool: the N lowest-id English tokens")
    new.add_argument("--length", type=int, help="SA secret length (default 18) or WIP letter count (default 13)")
    new.add_argument("--instruction", action="store_true", help="print the rendered instruction instead")
    new.set_defaults(func=_key_new)

    det = sub.add_parser("detect", help="verify texts against a key; one JSON object per text")
    det.add_argument("--key", required=True, help="a serialized key (icw:...) or its JSON")
    det.add_argument("--jsonl", action="store_true", help="inputs are JSON Lines with a 'text' field")
    det.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="significance level (default 0.01)")
    det.add_argument("--tokenizer", help="override the key's tokenizer name")
    det.add_argument("--highlights", action="store_true", help="include the counted spans")
    det.add_argument("--max-chars", type=_positive_int, default=DEFAULT_MAX_CHARS, metavar="N",
                     help=f"refuse texts longer than N characters (default {DEFAULT_MAX_CHARS:,})")
    det.add_argument("files", nargs="*", help="text files (default: standard input)")
    add_corpus_arguments(det)
    det.set_defaults(func=_detect)

    voc = sub.add_parser("vocab", help="print |V_en| and |V_en^word| of a tokenizer")
    voc.add_argument("--tokenizer", required=True)
    voc.set_defaults(func=_vocab)

    ins = sub.add_parser("install-metrics", help='register the metrics so evaluate.load("icw_tsp") works by name',
                         description="Copy the bundled evaluate metrics where evaluate looks for cached canonical "
                                     "metrics, so evaluate.load('icw_tsp') works from any directory, offline.")
    ins.add_argument("--modules-cache", metavar="DIR",
                     help="HF_MODULES_CACHE folder (default: evaluate's, ~/.cache/huggingface/modules)")
    ins.set_defaults(func=_install_metrics)

    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:  # a real import error inside an existing module
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except KeyboardInterrupt:
        print("icw: interrupted; finished work is kept, rerun the same command to resume", file=sys.stderr)
        return 130
    except _USER_ERRORS as err:
        print(f"icw: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
