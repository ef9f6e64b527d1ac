"""The ``icw`` command line.

Sub-commands live next to the code they drive; each module in ``_COMMAND_MODULES`` exposes
``register(subparsers)`` and sets ``func`` on its parsers. Errors a user can fix are
printed as one ``icw: error: ...`` line with exit status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import re
import signal
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any, BinaryIO

from .argtypes import DefaultsHelpFormatter, non_negative_int, one_line_error, open_unit, positive_int, rate
from .cli_corpus import add_arguments as add_corpus_arguments
from .cli_corpus import refuse_without_dataset
from .jsonl import iter_jsonl
from .keys import FAMILIES, ICWKey, ICWKeyError, KeyMismatchError
from .models import MissingAssetError, load_tokenizer
from .verification import DEFAULT_ALPHA, DEFAULT_MAX_CHARS, TextTooLongError, verify

#: Sub-commands that live next to the code they drive: name -> (module with ``register(subparsers)``, help).
#: Only the sub-command being run is imported (the others get a placeholder that only lists them), so
#: ``icw key new`` and ``icw --help`` start without torch, transformers, evaluate or datasets.
_COMMAND_MODULES = {
    "demo": ("icw.demo", "generate with and without each family's bias on the embedded model"),
    "bench": ("icw.bench.cli", "ICWBench: build the dataset, run a model, report"),
    "train": ("icw.train.cli", "cold-start synthesis, SDLP, GRPO and SFT training"),
    "hub": ("icw.publish", "Hugging Face Hub: metric Spaces, model cards"),
    "space": ("icw.space", "run the demo Space (watermark and detect side by side) in your browser"),
    "documents": ("icw.cli_documents", "ICW for third parties: keys per document, hidden instructions, "
                  "responses screened"),
}
_USER_ERRORS = (ICWKeyError, KeyMismatchError, TextTooLongError, MissingAssetError, ValueError, TypeError,
                FileNotFoundError, UnicodeDecodeError)


class Terminated(KeyboardInterrupt):
    """SIGTERM (how schedulers, containers and ``kill`` stop a job), handled like Ctrl-C: finished work is
    kept and the command ends with exit status 143 (128 + 15) instead of 130."""

    exit_status = 143


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


def _key_new(args: argparse.Namespace) -> None:
    params: dict[str, Any] = {}
    if args.gamma is not None:
        params["gamma"] = args.gamma
    if args.pool_size is not None:
        params["pool_size"] = args.pool_size
    if args.num_letters is not None:
        params["num_letters"] = args.num_letters
    if args.length is not None:
        if args.family == "wip" and args.num_letters is None:  # the old spelling, kept for one release
            print("icw: warning: --length for a WIP key is deprecated; use --num-letters", file=sys.stderr)
            params["num_letters"] = args.length
        else:
            params["length"] = args.length
    if args.corpus and args.max_fpr is None:
        raise ValueError("--corpus is what --max-fpr RATE screens on: give both (icw key calibrate KEY --corpus FILE "
                         "measures a key on it)")
    tokenizer = load_tokenizer(args.tokenizer) if args.family != "sa" or args.instruction else None
    if args.max_fpr is not None or args.screen:
        from .screening import corpus_screen, screen

        spec = args.screen if args.max_fpr is None else corpus_screen(args.corpus, max_fpr=args.max_fpr,
                                                                      alpha=args.alpha)
        result = screen(args.family, args.seed, tokenizer if args.family != "sa" else None, screen=spec, **params)
        key = result.key
        _print_screen(result, tokenizer if key.family != "sa" else None, params)
    else:
        key = ICWKey.create(args.family, args.seed, tokenizer if args.family != "sa" else None, **params)
    _print_reference_fpr(key, tokenizer if key.family != "sa" else None, args.alpha)
    print(key.instruction(tokenizer) if args.instruction else key.to_string())


def _print_screen(result: Any, tokenizer: Any, params: dict[str, Any]) -> None:
    """How a screen chose the key, on stderr; for a screen over your corpus, each draw's FPR there and the screen's
    measured acceptance rate with what it does to the key's p-values."""
    key, spec = result.key, result.screen
    if spec.texts is None:
        print(f"icw: note: {spec.describe()}: draw {key.draw} of seed {key.seed} kept"
              + (f" ({len(result.rejected)} earlier draw(s) rejected)" if result.rejected else ""), file=sys.stderr)
        return
    print(f"icw: note: {spec.describe()}", file=sys.stderr)
    from .screening import CORPUS_ACCEPTANCE_KEYS, acceptance_rate, p_value_bound

    for draw, (cal,) in zip(result.rejected, result.rejected_calibration, strict=True):
        print(f"icw: note: draw {draw} of seed {key.seed} rejected: empirical FPR {cal.fpr:.2%} "
              f"({cal.num_false_positives} of {cal.num_texts}) is above {spec.max_fpr:g}", file=sys.stderr)
    (cal,) = result.screen_calibration
    print(f"icw: note: draw {key.draw} of seed {key.seed} kept: empirical FPR {cal.fpr:.2%} [{cal.ci[0]:.2%}, "
          f"{cal.ci[1]:.2%}] ({cal.num_false_positives} of {cal.num_texts}; these passages chose it)", file=sys.stderr)
    passed, tried = acceptance_rate(key.family, tokenizer, screen=spec, num_keys=CORPUS_ACCEPTANCE_KEYS, **params)
    print(f"icw: note: {p_value_bound(spec, passed, tried)}", file=sys.stderr)


def _print_reference_fpr(key: ICWKey, tokenizer: Any, alpha: float) -> None:
    """The key's calibrated false-positive rate per domain (audit half of the reference corpus), on stderr."""
    from .screening import reference_calibration

    cals = reference_calibration(key, tokenizer, alpha=alpha)
    print(f"icw: note: this key's false-positive rate at alpha {alpha:g} on human text, per domain (audit half of the "
          f"reference corpus, never used to choose the key; 95% Clopper-Pearson):", file=sys.stderr)
    for cal in cals:
        print(f"icw: note:   {cal.domain:<13} {cal.fpr:6.2%} [{cal.ci[0]:.2%}, {cal.ci[1]:.2%}]  "
              f"{cal.num_false_positives} of {cal.num_texts}", file=sys.stderr)


def _key_calibrate(args: argparse.Namespace) -> None:
    from .calibration import calibrate_keys

    key = ICWKey.from_string(args.key)
    tokenizer = load_tokenizer(args.tokenizer or key.tokenizer) if key.family != "sa" else None
    if args.reference:  # one JSON line per domain of the reference corpus
        if args.corpus:
            raise ValueError("pass --reference (the bundled reference corpus, per domain) or --corpus, not both")
        from .screening import reference_calibration

        for cal in reference_calibration(key, tokenizer, split=args.split, alpha=args.alpha,
                                         confidence=args.confidence):
            print(json.dumps({"key": key.to_string(), **cal.to_dict()}))
        return
    cal = calibrate_keys(key, args.corpus, tokenizer, alpha=args.alpha, confidence=args.confidence)[0]
    print(json.dumps(cal.to_dict()))


@contextlib.contextmanager
def _open_input(source: str) -> Iterator[BinaryIO]:
    """A binary stream of a text file or standard input, with one-line errors for bad paths."""
    if source == "-":
        yield sys.stdin.buffer
        return
    try:
        fh = open(source, "rb")  # noqa: SIM115 (closed below; the errors need the open call alone)
    except FileNotFoundError:
        raise ValueError(f"{source}: no such file (pass text files, or - for standard input)") from None
    except IsADirectoryError:
        raise ValueError(f"{source} is a directory: pass the text files in it (e.g. {source}/*.txt)") from None
    except OSError as err:
        raise ValueError(f"cannot read {source}: {err.strerror or err}") from None
    with fh:
        yield fh


def _too_long(name: str, max_chars: int) -> ValueError:
    return ValueError(f"{name} has more than {max_chars:,} characters (--max-chars). Split it into passages "
                      "(e.g. one per JSON Lines record with --jsonl), or raise --max-chars.")


def _read_texts(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """``(source, text)`` pairs, read with a bound: never more than about ``--max-chars`` per text is
    held, so an endless input (``/dev/zero``) ends in an error, not in exhausted memory."""
    for source in args.files or ["-"]:
        name = "standard input" if source == "-" else source
        with _open_input(source) as fh:
            try:
                if not args.jsonl:
                    # UTF-8 takes at most 4 bytes per character; below 1 MiB, read it all for an exact count
                    bound = max(4 * args.max_chars, 1 << 20)
                    raw = fh.read(bound + 1)
                    if len(raw) > bound:
                        raise _too_long(name, args.max_chars)
                    try:
                        yield source, raw.decode("utf-8")
                    except UnicodeDecodeError:
                        raise ValueError(f"{name} is not UTF-8 text") from None
                    continue
                # a JSON string escapes a character in at most 12 bytes (a surrogate pair); room for other fields
                bound = 12 * args.max_chars + 65536
                for number, row in iter_jsonl(fh, name=name, max_line_bytes=bound, on_torn=_note_torn):
                    if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                        raise ValueError(f"{name}:{number}: expected an object with a string 'text' field")
                    yield f"{source}:{number}", row["text"]
            except OSError as err:  # e.g. reading a directory given as standard input
                raise ValueError(f"cannot read {name}: {err.strerror or err}") from None


def _note_torn(name: str, number: int) -> None:
    print(f"icw: note: {name}:{number}: skipped an incomplete last line (no newline, not valid JSON)",
          file=sys.stderr)


def _read_keys(path: str) -> list[ICWKey]:
    """One serialized key per line (blank lines and ``#`` comments skipped)."""
    limit = 64 << 20  # a key is a short line: a larger file is a mistake (or /dev/zero)
    with _open_input(path) as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise ValueError(f"{path} is larger than {limit >> 20} MiB: pass a file of serialized keys, one per line")
    try:
        lines = raw.decode("utf-8").split("\n")  # "\n" only, like every icw line reader
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None
    keys = []
    for number, line in enumerate(lines, 1):
        if line.strip() and not line.lstrip().startswith("#"):
            try:
                keys.append(ICWKey.from_string(line))
            except ICWKeyError as err:
                raise ICWKeyError(f"{path}:{number}: {err}") from None
    if not keys:
        raise ValueError(f"{path} has no keys: write one serialized key (icw:...) per line")
    return keys


def _detect(args: argparse.Namespace) -> None:
    if (args.key is None) == (args.keys is None):
        raise ValueError("pass either --key KEY or --keys FILE (one key per line)")
    if args.dataset:  # corpus scale: datasets.map over a column, results as parquet
        if args.keys is not None:
            raise ValueError("--dataset verifies every text under one --key; --keys is for text files")
        from .cli_corpus import run_from_args

        return run_from_args(args)
    refuse_without_dataset(args)
    if args.all_keys and args.keys is None:
        raise ValueError("--all-keys lists every key of --keys FILE: pass --keys, or drop --all-keys")
    if args.keys is not None:
        return _detect_many(args)
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
    sys.stdout.write("".join(json.dumps({"source": source, **result.to_dict()}) + "\n"
                             for (source, _), result in zip(items, results, strict=True)))
    notes = [result.note for result in results if result.note]
    if len(items) == 1 and notes:
        print(f"icw: note: {items[0][0]}: {notes[0]}", file=sys.stderr)
    elif notes:  # a corpus: one line, not one per text (the notes are in the results)
        print(_notes_summary(notes, len(items)), file=sys.stderr)


def _notes_summary(notes: list[str], num_texts: int) -> str:
    """One line for the per-text notes of a corpus: how many, where to read them, the most frequent kind."""
    kinds = Counter(re.sub(r"\d+", "N", note) for note in notes)  # "only 7 units scored" and "only 9 ..." alike
    kind, count = kinds.most_common(1)[0]
    return (f"icw: note: {len(notes):,} of {num_texts:,} texts have a note in the \"note\" field of their JSON line "
            f"(most often, {count:,} times: \"{kind}\")")


def _detect_many(args: argparse.Namespace) -> None:
    from .multikey import verify_keys

    if args.highlights:
        raise ValueError("--highlights needs a single --key: rerun with the key that fired")
    keys = _read_keys(args.keys)
    tokenizer = load_tokenizer(args.tokenizer or keys[0].tokenizer) if keys[0].family != "sa" else None
    items = list(_read_texts(args))
    if not items:
        raise ValueError("no texts given: pass files, or JSON Lines with --jsonl, or text on standard input")
    results = verify_keys([t for _, t in items], keys, tokenizer, alpha=args.alpha, max_chars=args.max_chars)
    for (source, _), result in zip(items, results, strict=True):
        print(json.dumps({"source": source, **result.to_dict(all_keys=args.all_keys)}))


def _vocab(args: argparse.Namespace) -> None:
    from .vocab import vocabulary

    print(json.dumps(vocabulary(load_tokenizer(args.tokenizer)).summary()))


def _install_metrics(args: argparse.Namespace) -> None:
    from .evaluate_metrics import install_metrics

    for name, folder in install_metrics(args.modules_cache).items():
        print(f"{name}: {folder}")
    print('evaluate.load("icw_tsp") (and icw_wip, icw_sa, icw_detection) now works by the bare name, offline')


class IcwArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose ``--help`` shows defaults; its sub-parsers inherit the class.

    Args:
        *args, **kwargs: passed to ``argparse.ArgumentParser``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        one_line_error(self, message)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``icw`` parser. With ``command`` (e.g. ``"bench"``) only that sub-command's module is
    imported and the other module-backed sub-commands are placeholders; by default all are built."""
    parser = IcwArgumentParser(prog="icw", description="In-context watermarking: keys, detection, benchmarks, training.")
    sub = parser.add_subparsers(dest="command", required=True)

    key = sub.add_parser("key", help="create watermark keys").add_subparsers(dest="key_command", required=True)
    new = key.add_parser("new", help="print a new serialized key (or its instruction)")
    new.add_argument("--family", required=True, choices=FAMILIES)
    new.add_argument("--seed", required=True, type=non_negative_int)
    new.add_argument("--tokenizer", default="qwen3", help="qwen3, gpt2, smollm2 (embedded), a folder or a Hub id")
    new.add_argument("--gamma", type=open_unit, help="TSP green fraction (default: 0.2)")
    new.add_argument("--pool-size", type=positive_int, help="TSP candidate pool: the N lowest-id English tokens (default: all of V_en)")
    new.add_argument("--num-letters", type=positive_int, help="WIP green-letter count (default: 13)")
    new.add_argument("--length", type=positive_int, help="SA secret length (default: 18)")
    new.add_argument("--instruction", action="store_true", help="print the rendered instruction instead")
    new.add_argument("--max-fpr", type=rate, metavar="RATE", help="screen the key on --corpus instead: redraw within "
                     "--seed's stream until the key's empirical false-positive rate at --alpha on the corpus is at most "
                     "RATE (e.g. 0.02); the key records the screen's id (corpus-...), and its measured acceptance rate "
                     "is printed")
    new.add_argument("--alpha", type=open_unit, default=DEFAULT_ALPHA,
                     help="significance level of the per-domain false-positive report and of --max-fpr")
    new.add_argument("--corpus", help="human text for --max-fpr: JSON Lines with a 'text' field, or plain text with "
                     "passages separated by blank lines (default: the reference corpus' screening half)")
    new.add_argument("--screen", default="ref1", metavar="ID", help="screen the key against the reference corpus: "
                     "redraw its material from the seed's stream until its false-positive rate at alpha 0.01 is at "
                     "most 2%% on every domain's screening half (the key records draw and screen)")
    new.add_argument("--no-screen", dest="screen", action="store_const", const=None,
                     help="the seed's own draw, uniform over all keys (no screening)")
    new.set_defaults(func=_key_new)

    cal = key.add_parser("calibrate", help="a key's empirical false-positive rate on human text, with a binomial interval")
    cal.add_argument("key", help="a serialized key (icw:...) or its JSON")
    cal.add_argument("--corpus", help="JSON Lines with a 'text' field, or plain text with passages separated by blank "
                     "lines (default: the reference corpus' audit half, all domains pooled)")
    cal.add_argument("--alpha", type=open_unit, default=DEFAULT_ALPHA, help="significance level")
    cal.add_argument("--confidence", type=open_unit, default=0.95, help="Clopper-Pearson interval level")
    cal.add_argument("--tokenizer", help="override the key's tokenizer name")
    cal.add_argument("--reference", action="store_true", help="one line per domain of the bundled multi-domain "
                     "reference corpus instead (see icw key new)")
    cal.add_argument("--split", choices=("audit", "screen", "all"), default="audit",
                     help="with --reference: the half of the reference corpus")
    cal.set_defaults(func=_key_calibrate)

    det = sub.add_parser("detect", help="verify texts against a key (or many); one JSON object per text")
    det.add_argument("--key", help="a serialized key (icw:...) or its JSON")
    det.add_argument("--keys", metavar="FILE", help="a file of keys of one family, one per line: report which keys "
                     "fire, with Holm's family-wise error control at --alpha")
    det.add_argument("--all-keys", action="store_true", help="with --keys: print every key's z and p, not only those "
                     "that fire")
    det.add_argument("--jsonl", action="store_true", help="inputs are JSON Lines with a 'text' field")
    det.add_argument("--alpha", type=open_unit, default=DEFAULT_ALPHA, help="significance level")
    det.add_argument("--tokenizer", help="override the key's tokenizer name")
    det.add_argument("--highlights", action="store_true", help="include the counted spans")
    det.add_argument("--max-chars", type=positive_int, default=DEFAULT_MAX_CHARS, metavar="N",
                     help="refuse texts longer than N characters")
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

    for name, (module_name, text) in _COMMAND_MODULES.items():
        if command is not None and command != name:
            sub.add_parser(name, help=text, add_help=False)  # listed in `icw --help`, never parsed
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:  # a real import error inside an existing module
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``icw`` command: parse ``argv`` (default: ``sys.argv[1:]``), run the sub-command, return its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), "")  # the top level has no option with a value
    args = build_parser(command).parse_args(argv)
    in_main_thread = threading.current_thread() is threading.main_thread()  # signal handlers live there only
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main_thread else None
    try:
        args.func(args)
    except KeyboardInterrupt as err:
        print("icw: interrupted; finished work is kept, rerun the same command to resume", file=sys.stderr)
        return getattr(err, "exit_status", 130)
    except _USER_ERRORS as err:
        print(f"icw: error: {err}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
