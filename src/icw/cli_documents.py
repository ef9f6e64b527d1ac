"""``icw documents``: ICW for third parties, in three steps (and a secret to start from).

* ``icw documents secret --out secret.txt``: a fresh random secret; keep it private.
* ``icw documents keys --secret-file secret.txt --manifest manifest.jsonl papers/*.pdf``: one screened
  key per document (:mod:`icw.documents`), appended to the manifest; ids already issued are skipped, so a
  rerun issues only the new documents.
* ``icw documents protect --manifest manifest.jsonl --out protected/ papers/*.pdf``: each document's
  instruction hidden in a copy of it (:mod:`icw.protect`); the originals are never modified.
* ``icw documents screen --manifest manifest.jsonl reviews.csv --out report``: every response verified
  under its document's key, flags with Holm (or ``--method bh``), ``report.csv`` and ``report.md``
  (:mod:`icw.response_screen`); resumable from its checkpoint.

A document's id is its file name without the suffix (``papers/123.pdf`` is ``123``), or one id per line of
``--ids-file``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .argtypes import open_unit, positive_int
from .documents import DEFAULT_FAMILY, DEFAULT_TOKENIZER, DocumentError, read_manifest, read_secret
from .keys import FAMILIES
from .verification import DEFAULT_ALPHA


def _note(message: str) -> None:
    print(f"icw: note: {message}", file=sys.stderr)


def _secret(args: argparse.Namespace) -> None:
    import os

    from .documents import new_secret

    if args.out is None:
        print(new_secret())
    else:
        try:  # created readable by its owner only, and never over an existing secret
            fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise DocumentError(f"{args.out} exists: a new secret would orphan every key issued from it; "
                                "choose another file") from None
        with os.fdopen(fd, "w") as handle:
            handle.write(new_secret() + "\n")
        print(f"secret written to {args.out} (readable by you only)")
    _note("keep this secret private: with it anyone can rebuild every document's key (the manifest never holds it)")


def _ids(args: argparse.Namespace) -> list[str]:
    if bool(args.ids_file) == bool(args.documents):
        raise DocumentError("name the documents: pass their files (the id is the file name without its suffix) "
                            "or --ids-file FILE (one id per line), not both")
    if args.documents:
        return [Path(p).stem for p in args.documents]
    try:
        lines = Path(args.ids_file).read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as err:
        raise DocumentError(f"cannot read --ids-file {args.ids_file}: {err}") from None
    return [line.strip() for line in lines if line.strip()]


def _keys(args: argparse.Namespace) -> None:
    from .documents import issue_keys, write_manifest

    ids = _ids(args)
    secret = read_secret(args.secret_file)
    manifest = Path(args.manifest)
    issued = read_manifest(manifest) if manifest.exists() else {}
    new = [d for d in ids if d not in issued]
    if len(new) < len(ids):
        _note(f"{len(ids) - len(new)} document(s) already have a key in {manifest}: kept as issued")
    params = {"num_letters": args.num_letters} if args.num_letters else {}
    entries = issue_keys(secret, new, family=args.family, tokenizer=args.tokenizer, **params) if new else []
    write_manifest(entries, manifest)
    print(f"{len(entries)} key(s) issued into {manifest} ({args.family.upper()}; {len(issued) + len(entries)} "
          "document(s) in it)")


def _protect(args: argparse.Namespace) -> None:
    from tqdm.auto import tqdm

    from .protect import document_kind, protect_file

    manifest = read_manifest(args.manifest)
    paths = [Path(p) for p in args.documents]
    for path in paths:
        document_kind(path)
    unknown = [p for p in paths if p.stem not in manifest]
    if unknown:
        raise DocumentError(f"{unknown[0]}: no key for document {unknown[0].stem!r} in {args.manifest}"
                            + (f" (nor for {len(unknown) - 1} more)" if len(unknown) > 1 else "")
                            + ": issue keys first (icw documents keys ...)")
    out = Path(args.out)
    failed = 0
    for path in tqdm(paths, desc="icw protect", unit="document", disable=not sys.stderr.isatty()):
        try:
            protect_file(path, out / path.name, manifest[path.stem].instruction,
                         page=-1 if args.last_page else args.page)
        except DocumentError as err:
            failed += 1
            _note(f"not protected: {err}")
    print(f"{len(paths) - failed} of {len(paths)} document(s) protected into {out}/")
    if failed:
        raise DocumentError(f"{failed} document(s) could not be protected (listed above); their originals are "
                            "untouched")


def _screen(args: argparse.Namespace) -> None:
    from .response_screen import read_responses, screen_responses, summary_line, write_report

    manifest = read_manifest(args.manifest)
    responses = [r for path in args.responses for r in read_responses(path)]
    out = Path(args.out)
    checkpoint = Path(args.checkpoint) if args.checkpoint else out.with_name(out.name + ".scores.jsonl")
    report = screen_responses(responses, manifest, method=args.method, alpha=args.alpha, tokenizer=args.tokenizer,
                              batch_size=args.batch_size, checkpoint=checkpoint, progress=sys.stderr.isatty())
    csv_path, md_path = write_report(report, out)
    for row in report.flagged:
        print(f"FLAGGED {row.response.response_id} (document {row.response.document_id}): p = {row.p_value:.3g}, "
              f"adjusted p = {row.adjusted_p_value:.3g}; {row.evidence}")
    print(summary_line(report))
    print(f"report: {csv_path} and {md_path}")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``icw documents`` to the CLI's subparsers."""
    docs = sub.add_parser("documents", help="ICW for third parties: keys per document, hidden instructions, "
                          "responses screened")
    steps = docs.add_subparsers(dest="documents_command", required=True)

    secret = steps.add_parser("secret", help="make a new random secret (keep it private)")
    secret.add_argument("--out", metavar="FILE", help="write it to FILE (created readable by you only; an existing "
                        "file is never overwritten) instead of printing it")
    secret.set_defaults(func=_secret)

    keys = steps.add_parser("keys", help="issue one key per document, derived from the secret, into the manifest")
    keys.add_argument("documents", nargs="*", help="document files: each one's id is its name without the suffix")
    keys.add_argument("--ids-file", metavar="FILE", help="document ids, one per line (instead of files)")
    keys.add_argument("--secret-file", required=True, metavar="FILE", help="the secret (icw documents secret)")
    keys.add_argument("--manifest", required=True, metavar="FILE", help="the manifest (JSON Lines) to append to")
    keys.add_argument("--family", choices=FAMILIES, default=DEFAULT_FAMILY, help="ICW family of the keys")
    keys.add_argument("--tokenizer", default=DEFAULT_TOKENIZER, help="tokenizer of TSP/WIP keys")
    keys.add_argument("--num-letters", type=positive_int, help="WIP green-letter count (default: 13)")
    keys.set_defaults(func=_keys)

    protect = steps.add_parser("protect", help="hide each document's instruction in a copy of it (PDF, HTML, text)")
    protect.add_argument("documents", nargs="+", help="PDF, HTML, plain text or Markdown files")
    protect.add_argument("--manifest", required=True, metavar="FILE", help="the manifest of issued keys")
    protect.add_argument("--out", required=True, metavar="DIR", help="folder for the protected copies")
    protect.add_argument("--page", type=positive_int, default=1, help="PDF page to hide the instruction on")
    protect.add_argument("--last-page", action="store_true", help="hide it on each PDF's last page instead")
    protect.set_defaults(func=_protect)

    screen = steps.add_parser("screen", help="verify every response under its document's key; flag with error "
                              "control over all of them")
    screen.add_argument("responses", nargs="+", help="CSV or JSON Lines files with document_id, response_id, text")
    screen.add_argument("--manifest", required=True, metavar="FILE", help="the manifest of issued keys")
    screen.add_argument("--method", choices=("holm", "bh"), default="holm",
                        help="holm: family-wise error rate; bh: false discovery rate (Benjamini-Hochberg)")
    screen.add_argument("--alpha", type=open_unit, default=DEFAULT_ALPHA, help="the error rate controlled")
    screen.add_argument("--out", default="icw-screen", metavar="PATH", help="report path without suffix: "
                        "PATH.csv and PATH.md")
    screen.add_argument("--checkpoint", metavar="FILE", help="scores kept as they are computed, so a rerun "
                        "resumes (default: PATH.scores.jsonl)")
    screen.add_argument("--tokenizer", help="override the keys' tokenizer")
    screen.add_argument("--batch-size", type=positive_int, default=256, help="responses per verify call")
    screen.set_defaults(func=_screen)
