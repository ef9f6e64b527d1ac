"""Screen every response against its own document's key, with the error controlled over all responses.

Each response ``i`` (a review of document ``d_i``) is verified under the key the manifest holds for
``d_i`` (:func:`icw.verify`, one batched call per chunk): ``p_i`` is the verifier's exact p-value (TSP,
WIP) or its Monte Carlo p-value (SA), valid under ``H0_i``: *the response is independent of its document's
key*. Over the ``m`` responses screened the decision controls one of two error rates:

* **family-wise (Holm, the default)**: flag ``i`` iff its Holm-adjusted p-value
  ``max_{j <= rank(i)} min(1, (m - j + 1) p_(j))`` is at most ``alpha`` (:func:`icw.multikey.holm_adjust`).
  The chance that *any* response independent of its key is flagged is at most ``alpha``, under any
  dependence between the tests; with independent tests the expected number of false flags is at most
  ``sum_k alpha^k = alpha / (1 - alpha)`` (``P(V >= k) <= C(m0, k) (alpha / (m0 - k + 1))^k <= alpha^k``).
* **false discovery rate (Benjamini-Hochberg, on request)**: flag ``i`` iff its BH-adjusted p-value
  ``min_{j >= rank(i)} min(1, m p_(j) / j)`` is at most ``q = alpha``
  (``scipy.stats.false_discovery_control``). The expected share of false flags among the ``R`` flags
  is at most ``q m0 / m <= q`` (independent or positively dependent tests): about ``q R`` of them.

A response that cannot be screened is reported, never dropped: an unknown document id, an empty text, or a
repeated response id (the first one is screened). A mostly non-English response is screened (its p-value
stays valid) and marked, since its test has little power. SA p-values are drawn with enough null secrets
(``10 m / alpha``, like :func:`icw.verify_keys`) that Holm's first threshold ``alpha / m`` can be reached.

Scores are appended to a *checkpoint* (JSON Lines, one line per response, keyed by a digest of the
response, its key and the Monte Carlo size) chunk by chunk, so a killed run resumes where it stopped.

Example:
    >>> from icw.documents import issue_keys
    >>> from icw.response_screen import Response, screen_responses
    >>> manifest = {e.document_id: e for e in issue_keys("a long and secret passphrase", ["d1"], family="sa")}
    >>> report = screen_responses([Response("d1", "r1", "Plain words. Nothing more.")], manifest)
    >>> report.num_screened, report.num_flagged
    (1, 0)
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .documents import DocumentError, DocumentKey
from .jsonl import JSONLError, append_jsonl, iter_jsonl
from .multikey import MAX_MULTI_NULL_KEYS, holm_adjust
from .verification import DEFAULT_ALPHA, DEFAULT_MAX_CHARS, DEFAULT_NULL_KEYS, verify

METHODS = ("holm", "bh")
CORRECTIONS = {"holm": "Holm step-down: family-wise error rate <= alpha over all responses screened, any dependence",
               "bh": "Benjamini-Hochberg: false discovery rate <= alpha over all responses screened "
                     "(independent or positively dependent tests)"}
RESPONSE_FIELDS = ("document_id", "response_id", "text")
REPORT_COLUMNS = ("response_id", "document_id", "flagged", "p_value", "adjusted_p_value", "z_score",
                  "num_tokens_scored", "num_aligned", "family", "problem", "note", "evidence", "source")
_SCORE_FIELDS = ("p_value", "z_score", "num_tokens_scored", "num_aligned", "note", "statistic",
                 "null_hypothesis", "p_value_method")


@dataclass(frozen=True)
class Response:
    """One response to screen.

    Args:
        document_id (`str`): the document it responds to (an id of the manifest).
        response_id (`str`): its own id (unique among the responses).
        text (`str`): the response.
        source (`str`, defaults to ``""``): where it was read (``file:line``), for the report.
    """

    document_id: str
    response_id: str
    text: str
    source: str = ""


@dataclass
class ScreenedResponse:
    """One response's outcome: its scores, the adjusted p-value and the decision, or why it was not screened.

    Args:
        response (`Response`): the response.
        family (`str`): its key's family (``""`` for an unknown document).
        key (`str`): its document's key (``""`` for an unknown document); kept out of the report's CSV.
        screened (`bool`): whether it was tested.
        problem (`str`): why it was not screened, or a caveat (``""`` when none).
        p_value (`float`): the verifier's p-value under its document's key (NaN when not screened).
        adjusted_p_value (`float`): Holm- or BH-adjusted over all screened responses (NaN when not screened).
        flagged (`bool`): ``adjusted_p_value <= alpha``.
        z_score (`float`): the paper's z.
        num_tokens_scored, num_aligned (`int`): the verifier's ``n`` and ``X``.
        note (`str`): the verifier's note, if any.
        evidence (`str`): for a flagged response, the aligned units in words.
        highlights (`list`): for a flagged response, the verifier's counted spans (``Highlight``).
    """

    response: Response
    family: str = ""
    key: str = field(default="", repr=False)
    screened: bool = False
    problem: str = ""
    p_value: float = math.nan
    adjusted_p_value: float = math.nan
    flagged: bool = False
    z_score: float = math.nan
    num_tokens_scored: int = 0
    num_aligned: int = 0
    note: str = ""
    evidence: str = ""
    highlights: list = field(default_factory=list, repr=False)

    def row(self) -> dict[str, Any]:
        """The report's CSV row."""
        r = self.response
        values = {"response_id": r.response_id, "document_id": r.document_id, "source": r.source}
        values.update({c: getattr(self, c) for c in REPORT_COLUMNS if c not in values})
        return values


@dataclass
class ScreenReport:
    """The outcome of a screen over all responses.

    Args:
        rows (`list[ScreenedResponse]`): one per response, in input order.
        method (`str`): ``"holm"`` or ``"bh"``.
        alpha (`float`): the family-wise error rate (Holm) or false discovery rate (BH).
        correction (`str`): the correction, in words.
        methods (`dict`): per family, the statistic, null hypothesis and p-value method, in words.
    """

    rows: list[ScreenedResponse]
    method: str
    alpha: float
    correction: str
    methods: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def num_screened(self) -> int:
        return sum(r.screened for r in self.rows)

    @property
    def flagged(self) -> list[ScreenedResponse]:
        return sorted((r for r in self.rows if r.flagged), key=lambda r: r.adjusted_p_value)

    @property
    def num_flagged(self) -> int:
        return sum(r.flagged for r in self.rows)

    @property
    def expected_false_flags(self) -> float:
        """Holm: ``alpha / (1 - alpha)`` (independent tests; P(any false flag) <= alpha always); BH: ``alpha R``."""
        return expected_false_flags(self.method, self.alpha, self.num_flagged)

    @property
    def problems(self) -> list[ScreenedResponse]:
        return [r for r in self.rows if r.problem]


def expected_false_flags(method: str, alpha: float, num_flagged: int) -> float:
    """The bound on the expected number of false flags printed beside the flags.

    Holm: ``alpha / (1 - alpha)`` for independent tests (``P(V >= k) <= alpha^k``). BH: ``alpha R``, ``R`` the
    flags (the expected *share* of false flags is at most ``alpha``).

    Args:
        method (`str`): ``"holm"`` or ``"bh"``.
        alpha (`float`): the error rate controlled.
        num_flagged (`int`): the number of flags ``R``.
    """
    return alpha / (1 - alpha) if check_method(method) == "holm" else alpha * num_flagged


def check_method(method: str) -> str:
    """The method's canonical name, or a one-line error.

    Args:
        method (`str`): ``"holm"`` or ``"bh"`` (any case).
    """
    name = str(method).strip().lower()
    if name not in METHODS:
        raise ValueError(f"unknown correction {method!r}: choose holm (family-wise error) or bh (false discovery rate)")
    return name


def adjust(p_values: Sequence[float], method: str = "holm") -> np.ndarray:
    """Adjusted p-values: Holm's (:func:`icw.multikey.holm_adjust`) or Benjamini-Hochberg's
    (``scipy.stats.false_discovery_control``); flag those at most ``alpha``.

    Args:
        p_values (`Sequence[float]`): the unadjusted p-values.
        method (`str`, defaults to ``"holm"``): ``"holm"`` or ``"bh"``.

    Example:
        >>> adjust([0.01, 0.04, 0.03], "holm").round(2).tolist(), adjust([0.01, 0.04, 0.03], "bh").round(2).tolist()
        ([0.03, 0.06, 0.06], [0.03, 0.04, 0.04])
    """
    p = np.asarray(p_values, dtype=np.float64)
    if p.size == 0:
        return p
    if check_method(method) == "holm":
        return holm_adjust(p)
    from scipy.stats import false_discovery_control

    return np.asarray(false_discovery_control(p, method="bh"), dtype=np.float64)


# ----------------------------------------------------------------------------------- reading
def read_responses(path: str | Path) -> list[Response]:
    """Responses from a CSV file (a header naming ``document_id``, ``response_id``, ``text``) or a JSON Lines
    file (objects with those fields), by suffix (``.csv``; ``.jsonl``/``.json``).

    Args:
        path (`str` or `Path`): the file.
    """
    path = Path(path)
    if not path.is_file():
        raise DocumentError(f"{path}: no such responses file")
    rows: list[tuple[str, Any]] = []
    if path.suffix.lower() == ".csv":
        try:
            with path.open(encoding="utf-8-sig", newline="") as handle:
                reader = csv.DictReader(handle)
                missing = [f for f in RESPONSE_FIELDS if f not in (reader.fieldnames or [])]
                if missing:
                    raise DocumentError(f"{path}: the CSV header lacks {', '.join(missing)} (it needs "
                                        f"{', '.join(RESPONSE_FIELDS)})")
                rows = [(f"{path.name}:{reader.line_num}", row) for row in reader]
        except (UnicodeDecodeError, csv.Error) as err:
            raise DocumentError(f"{path}: not a UTF-8 CSV file ({err})") from None
    elif path.suffix.lower() in (".jsonl", ".json"):
        try:
            rows = [(f"{path.name}:{n}", row) for n, row in iter_jsonl(path)]
        except JSONLError as err:
            raise DocumentError(str(err)) from None
    else:
        raise DocumentError(f"{path}: responses come as CSV (.csv) or JSON Lines (.jsonl)")
    out = []
    for where, row in rows:
        if not isinstance(row, dict) or any(not isinstance(row.get(f), (str, int)) or isinstance(row.get(f), bool)
                                            for f in RESPONSE_FIELDS):
            raise DocumentError(f"{where}: a response needs the fields {', '.join(RESPONSE_FIELDS)} (text may be empty)")
        out.append(Response(str(row["document_id"]).strip(), str(row["response_id"]).strip(), str(row["text"]), where))
    return out


# --------------------------------------------------------------------------------- screening
def _digest(response: Response, key: str, num_null_keys: int) -> str:
    data = json.dumps([response.response_id, response.document_id, response.text, key, num_null_keys])
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _load_checkpoint(path: Path | None) -> dict[str, dict[str, Any]]:
    if path is None or not path.exists():
        return {}
    try:
        return {row["digest"]: row for _, row in iter_jsonl(path) if isinstance(row, dict) and "digest" in row}
    except JSONLError as err:
        raise DocumentError(f"{err} (delete the checkpoint to start over)") from None


def screen_responses(responses: Iterable[Response], manifest: Mapping[str, DocumentKey], *, method: str = "holm",
                     alpha: float = DEFAULT_ALPHA, tokenizer: Any = None, batch_size: int = 256,
                     max_chars: int = DEFAULT_MAX_CHARS, checkpoint: str | Path | None = None,
                     highlights: bool = True, progress: bool = False) -> ScreenReport:
    """Verify each response under its document's key and flag those whose adjusted p-value is at most ``alpha``.

    Args:
        responses (`Iterable[Response]`): the responses (see :func:`read_responses`).
        manifest (`Mapping[str, DocumentKey]`): document id -> entry (:func:`icw.documents.read_manifest`).
        method (`str`, defaults to ``"holm"``): ``"holm"`` (family-wise error) or ``"bh"`` (false discovery rate).
        alpha (`float`, defaults to 0.01): the error rate controlled.
        tokenizer (*optional*): override the keys' own tokenizer (TSP/WIP).
        batch_size (`int`, defaults to 256): responses per verify call (and per checkpoint append).
        max_chars (`int`, defaults to 100,000): longer responses are an error naming them.
        checkpoint (`str` or `Path`, *optional*): JSON Lines file of scores, appended per chunk; a rerun reuses them.
        highlights (`bool`, defaults to `True`): compute the flagged responses' evidence.
        progress (`bool`, defaults to `False`): show a progress bar.
    """
    from tqdm.auto import tqdm

    method = check_method(method)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    rows = [ScreenedResponse(r) for r in responses]
    if not rows:
        raise DocumentError("no responses to screen")
    first_seen: dict[str, str] = {}
    todo: list[ScreenedResponse] = []
    for row in rows:
        r = row.response
        entry = manifest.get(r.document_id)
        if entry is not None:
            row.family, row.key = entry.family, entry.key
        if r.response_id in first_seen:
            row.problem = f"duplicate response id (first at {first_seen[r.response_id]}): not screened"
        elif entry is None:
            row.problem = "unknown document id (not in the manifest): not screened"
        elif not r.text.strip():
            row.problem = "empty response: not screened"
        elif len(r.text) > max_chars:
            raise DocumentError(f"{r.source or r.response_id}: response {r.response_id!r} has {len(r.text):,} "
                                f"characters, more than max_chars={max_chars:,}; shorten it or raise the limit")
        else:
            todo.append(row)
        first_seen.setdefault(r.response_id, r.source or "an earlier row")
    m = len(todo)
    num_null = min(max(DEFAULT_NULL_KEYS, math.ceil(10 * max(m, 1) / alpha) - 1), MAX_MULTI_NULL_KEYS)
    path = Path(checkpoint) if checkpoint is not None else None
    done = _load_checkpoint(path)
    keys = {row.response.response_id: manifest[row.response.document_id].key for row in todo}
    # the Monte Carlo size changes SA p-values only: a WIP or TSP score stays valid when responses are added
    digests = [_digest(row.response, keys[row.response.response_id], num_null if row.family == "sa" else 0)
               for row in todo]
    pending = [i for i, d in enumerate(digests) if d not in done]
    bar = tqdm(total=m, initial=m - len(pending), desc="icw screen", unit="response", disable=not progress)
    for start in range(0, len(pending), batch_size):
        chunk = pending[start:start + batch_size]
        results = verify([todo[i].response.text for i in chunk], [keys[todo[i].response.response_id] for i in chunk],
                         tokenizer, alpha=alpha, max_chars=max_chars, num_null_keys=num_null)
        scored = [{"digest": digests[i], **{f: getattr(res, f) for f in _SCORE_FIELDS}}
                  for i, res in zip(chunk, results, strict=True)]
        done.update((s["digest"], s) for s in scored)
        if path is not None:
            append_jsonl(path, scored)
        bar.update(len(chunk))
    bar.close()
    methods: dict[str, dict[str, str]] = {}
    for row, digest in zip(todo, digests, strict=True):
        s = done[digest]
        row.screened, row.p_value, row.z_score = True, float(s["p_value"]), float(s["z_score"])
        row.num_tokens_scored, row.num_aligned, row.note = int(s["num_tokens_scored"]), int(s["num_aligned"]), s["note"] or ""
        if "non-English" in row.note:
            row.problem = "non-English response: screened, but its test has little power"
        methods.setdefault(row.family, {f: s[f] for f in ("statistic", "null_hypothesis", "p_value_method")})
    adjusted = adjust([row.p_value for row in todo], method)
    for row, a in zip(todo, adjusted, strict=True):
        row.adjusted_p_value, row.flagged = float(a), bool(a <= alpha)
    report = ScreenReport(rows, method, alpha, CORRECTIONS[method], methods)
    if highlights and report.num_flagged:
        _add_evidence(report.flagged, tokenizer, alpha, max_chars)
    return report


def _add_evidence(rows: list[ScreenedResponse], tokenizer: Any, alpha: float, max_chars: int) -> None:
    """The flagged responses' counted units, and one line of evidence each."""
    results = verify([r.response.text for r in rows], [r.key for r in rows], tokenizer,
                     alpha=alpha, max_chars=max_chars, highlights=True, num_null_keys=DEFAULT_NULL_KEYS)
    unit = {"tsp": "distinct tokens are in the green set", "wip": "distinct word-initial tokens start with a green "
            "letter", "sa": "sentence starts follow the secret (longest common subsequence)"}
    for row, res in zip(rows, results, strict=True):
        row.highlights = res.highlights or []
        expected = f" (expected {res.null_mean:.1f} by chance)"
        row.evidence = f"{res.num_aligned} of {res.num_tokens_scored} {unit[res.family]}{expected}"




# ------------------------------------------------------------------------------------ report
def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table's lines, and the blank line after it."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows), ""]


def _md(text: str) -> str:
    """Markdown-escaped text (the characters that would start markup)."""
    return "".join("\\" + c if c in "\\`*_[]<>#|!" else c for c in text)


def highlighted_markdown(text: str, highlights: Sequence[Any], limit: int = 2000) -> str:
    """``text`` as a Markdown block quote, the aligned units in bold (the first ``limit`` characters).

    Args:
        text (`str`): the response.
        highlights (`Sequence`): the verifier's ``Highlight`` spans (character offsets, ``aligned``).
        limit (`int`, defaults to 2000): the most characters shown.

    Example:
        >>> from icw.verification import Highlight
        >>> highlighted_markdown("Apples fall.", [Highlight(0, 1, "A", True, "matched initial")])
        '> **A**pples fall.'
    """
    shown, out, pos = text[:limit], [], 0
    for h in sorted((h for h in highlights if h.aligned and h.end <= limit), key=lambda h: h.start):
        if h.start < pos:
            continue
        piece = shown[h.start:h.end]
        lead = len(piece) - len(piece.lstrip())  # a word-initial token starts with its space
        out += [_md(shown[pos:h.start + lead]), f"**{_md(piece[lead:])}**" if piece.strip() else _md(piece[lead:])]
        pos = h.end
    out.append(_md(shown[pos:]) + (" …" if len(text) > limit else ""))
    return "\n".join("> " + line for line in "".join(out).split("\n"))


def write_report(report: ScreenReport, out: str | Path) -> tuple[Path, Path]:
    """Write ``<out>.csv`` (every response: scores, decision, problem) and ``<out>.md`` (the flags with their
    evidence, the expected false flags, the responses not screened, the method).

    Args:
        report (`ScreenReport`): the screen's outcome.
        out (`str` or `Path`): the report's path without suffix (``report`` -> ``report.csv``, ``report.md``).

    Returns:
        `tuple[Path, Path]`: the CSV and the Markdown paths.
    """
    out = Path(out)
    csv_path, md_path = out.with_name(out.name + ".csv"), out.with_name(out.name + ".md")
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with csv_path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=REPORT_COLUMNS)
        writer.writeheader()
        for row in report.rows:
            values = row.row()
            for name in ("p_value", "adjusted_p_value", "z_score"):
                values[name] = "" if math.isnan(values[name]) else f"{values[name]:.6g}"
            writer.writerow(values)
    md_path.write_text(report_markdown(report), encoding="utf-8")
    return csv_path, md_path


def summary_line(report: ScreenReport) -> str:
    """One line: the flags, the error rate controlled and the expected false flags beside them.

    Args:
        report (`ScreenReport`): the screen's outcome.
    """
    what = "family-wise error rate (Holm)" if report.method == "holm" else "false discovery rate (Benjamini-Hochberg)"
    return (f"{report.num_flagged} of {report.num_screened} responses screened flagged at {what} {report.alpha:g}; "
            f"expected false flags <= {report.expected_false_flags:.3g}; {len(report.problems)} response(s) with a "
            "problem listed in the report")


def report_markdown(report: ScreenReport) -> str:
    """The report page (Markdown): summary, flagged responses with evidence, problems, method.

    Args:
        report (`ScreenReport`): the screen's outcome.
    """
    bound = ("Holm bounds the chance of any false flag by alpha; for independent responses the expected number "
             "of false flags is at most alpha / (1 - alpha)" if report.method == "holm" else
             "Benjamini-Hochberg bounds the expected share of false flags among the flags by alpha: about alpha x "
             "flags of them")
    lines = [f"# ICW screen: {report.num_flagged} of {report.num_screened} responses flagged", "",
             f"- correction: {report.correction}, alpha = {report.alpha:g}",
             f"- responses: {len(report.rows)} read, {report.num_screened} screened, {len(report.problems)} with a problem",
             f"- **flagged: {report.num_flagged}; expected false flags: <= {report.expected_false_flags:.3g}** ({bound})",
             ""]
    if report.flagged:
        lines += ["## Flagged responses", "", *_table(
            ["response", "document", "p-value", "adjusted p-value", "z", "evidence"],
            [[_md(r.response.response_id), _md(r.response.document_id), f"{r.p_value:.3g}",
              f"{r.adjusted_p_value:.3g}", f"{r.z_score:.2f}", r.evidence] for r in report.flagged])]
        for r in report.flagged:
            lines += [f"### {_md(r.response.response_id)} (document {_md(r.response.document_id)})", "",
                      f"p = {r.p_value:.3g}, adjusted p = {r.adjusted_p_value:.3g}: {r.evidence}; the counted units "
                      "that follow the key are in bold.", "", highlighted_markdown(r.response.text, r.highlights), ""]
    else:
        lines += ["No response is flagged.", ""]
    if report.problems:
        lines += ["## Not screened, or screened with a caveat", "", *_table(
            ["response", "document", "source", "problem"],
            [[_md(r.response.response_id), _md(r.response.document_id), _md(r.response.source), r.problem]
             for r in report.problems])]
    lines += ["## Method", "", "Each response is tested under its own document's key; the p-values are adjusted over "
              "all responses screened.", ""]
    for family, m in sorted(report.methods.items()):
        lines += [f"- **{family.upper()}**: statistic: {m['statistic']}; null hypothesis: {m['null_hypothesis']}; "
                  f"p-value: {m['p_value_method']}"]
    return "\n".join(lines) + "\n"
