"""Answer quality for ICWBench: reference-model perplexity and LLM-as-a-judge scores.

* Perplexity of a response ``y`` to query ``q`` under a reference model ``M``
  (:func:`icw.perplexity.perplexities`: the response scored after the query rendered with
  ``M``'s chat template; the paper used two large models, the default here is the embedded
  SmolLM2, any transformers model can be named). An empty response is stored with value ``null``.
* Repetition, beside each perplexity: seq-rep-4 (:func:`seq_rep_n`) of the response in ``M``'s tokens.
  A looping answer has a low perplexity, so perplexity alone reads degenerate text as fluent.
* Judge: an OpenAI-compatible chat model rates Relevance, Clarity, Informativeness and
  Factual Correctness from 1 to 5. Replies are parsed robustly (JSON, ``name: n`` lines, or
  four bare digits); an unparsable reply is retried and, if it stays unparsable, recorded
  with its raw text and an ``error`` field, never dropped.
* Coverage (the paper's adaptive-attack table, RLCracker style): the same judge endpoint scores
  from 1 to 5 (half points allowed) how completely an attacked answer keeps the information and
  meaning of the unattacked answer it was made from (:data:`COVERAGE_PROMPT`). Every finished
  attacked positive is scored, with the same re-asking and failure records as the judge.

Results go to ``RUN_DIR/quality.jsonl`` keyed like the responses (with ``attack`` holding
``ppl:<reference>``, ``rep4:<reference>``, ``judge:<model>`` or ``coverage:<attack>:<model>``), so quality is
resumable too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from tqdm.auto import tqdm

from ..perplexity import perplexities

JUDGE_DIMENSIONS = ("relevance", "clarity", "informativeness", "factual_correctness")
JUDGE_PROMPT = """You are grading an assistant's answer to a user's question.

Question:
{query}

Answer:
{response}

Rate the answer on four criteria, each an integer from 1 (very poor) to 5 (excellent):
- relevance: does it address the question that was asked?
- clarity: is it well organised and easy to read?
- informativeness: does it give useful, sufficiently detailed content?
- factual_correctness: are its statements accurate?

Reply with one JSON object and nothing else, for example:
{{"relevance": 4, "clarity": 5, "informativeness": 3, "factual_correctness": 4}}"""


# ------------------------------------------------------------------------------- perplexity
def perplexity_family(store: Any, quality: Any, model_id: str, family: str, reference: str,
                      batch_size: int = 4) -> int:
    """Perplexity of every finished, unattacked positive of ``family`` under ``reference``.

    Args:
        store: the run's result store (finished responses).
        quality: the ``quality.jsonl`` store the perplexities are appended to.
        model_id (`str`): the evaluated model's name, recorded with each row.
        family (`str`): the family to score.
        reference (`str`): the reference model that computes perplexity.
        batch_size (`int`, defaults to 4): texts per forward pass.
    """
    from ..models import load_model

    tag = f"ppl:{reference}"
    todo = _unscored_positives(store, quality, model_id, family, tag)
    if not todo:
        return 0
    model, tok = load_model(reference)
    for start in tqdm(range(0, len(todo), batch_size), desc=f"{family} perplexity ({reference})"):
        part = todo[start : start + batch_size]
        values = perplexities(model, tok, [r["query"] for r in part], [r["response"] for r in part], batch_size)
        quality.append({**_qkey(r), "attack": tag, "metric": "ppl", "reference": reference, "value": v}
                       for r, v in zip(part, values, strict=True))
    return len(todo)


#: seq-rep-n's n, and the seq-rep-4 from which an answer counts as looping (half its 4-grams repeat an earlier one).
REPETITION_N = 4
LOOPING_REP = 0.5


def seq_rep_n(token_ids: Sequence[int], n: int = REPETITION_N) -> float:
    """seq-rep-n (Welleck et al., 2020, "Neural Text Generation with Unlikelihood Training"): the share of a
    text's n-grams that repeat an earlier one, ``1 - |unique n-grams| / |n-grams|`` (0 for fewer than n tokens).

    Args:
        token_ids (`Sequence[int]`): the text's tokens.
        n (`int`, defaults to 4): the n-gram length.

    Example:
        >>> seq_rep_n([1, 2, 3, 4, 5, 6]), seq_rep_n([1, 2, 1, 2, 1, 2, 1, 2], n=2)
        (0.0, 0.7142857142857143)
    """
    grams = [tuple(token_ids[i : i + n]) for i in range(len(token_ids) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def repetition_family(store: Any, quality: Any, model_id: str, family: str, reference: str) -> int:
    """seq-rep-4 of every finished, unattacked positive of ``family`` in ``reference``'s tokens.

    Args:
        store: the run's result store (finished responses).
        quality: the ``quality.jsonl`` store the values are appended to.
        model_id (`str`): the evaluated model's name, recorded with each row.
        family (`str`): the family to score.
        reference (`str`): the reference model whose tokenizer splits the answers.
    """
    from ..models import load_tokenizer

    tag = f"rep{REPETITION_N}:{reference}"
    todo = _unscored_positives(store, quality, model_id, family, tag)
    if todo:
        tok = load_tokenizer(reference)
        quality.append({**_qkey(r), "attack": tag, "metric": f"seq_rep_{REPETITION_N}", "reference": reference,
                        "value": seq_rep_n(tok(r["response"], add_special_tokens=False)["input_ids"])} for r in todo)
    return len(todo)


def _qkey(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record[k] for k in ("model", "family", "id", "role")}


def _unscored_positives(store: Any, quality: Any, model_id: str, family: str, tag: str) -> list[dict[str, Any]]:
    """The finished, unattacked positives of ``family`` that ``quality`` holds no ``tag`` row for yet."""
    return [r for r in store.rows() if r["model"] == model_id and r["family"] == family and r["role"] == "positive"
            and r.get("attack", "none") == "none" and not r.get("error")
            and not quality.done({**_qkey(r), "attack": tag})]


# ------------------------------------------------------------------------------------ judge
def _json_objects(text: str) -> Any:
    """Every flat JSON object (a dict) written anywhere in ``text``."""
    for match in re.finditer(r"\{[^{}]*\}", text, flags=re.S):
        try:
            data = json.loads(match.group())
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            yield data


def parse_judge(text: str) -> dict[str, int] | None:
    """The four 1-5 scores from a judge reply, or None when they cannot be read.

    Accepts a JSON object (anywhere in the reply, keys case/space-insensitive), lines like
    ``Relevance: 4`` or ``Factual correctness - 5/5``, or exactly four bare digits 1-5.

    Args:
        text (`str`): the judge's reply.

    Example:
        >>> parse_judge('Sure! {"Relevance": 5, "clarity": 4, "informativeness": 4, "factual correctness": 3}')
        {'relevance': 5, 'clarity': 4, 'informativeness': 4, 'factual_correctness': 3}
        >>> parse_judge("I like it") is None
        True
    """
    if not isinstance(text, str) or not text.strip():
        return None

    def norm(name: str) -> str:
        return re.sub(r"[^a-z]+", "_", name.lower()).strip("_")

    def valid(scores: dict[str, Any]) -> dict[str, int] | None:
        got = {}
        for dim in JUDGE_DIMENSIONS:
            value = scores.get(dim)
            try:
                number = float(value)
            except (TypeError, ValueError):
                return None
            if not (1 <= number <= 5 and number == int(number)):
                return None
            got[dim] = int(number)
        return got

    for data in _json_objects(text):
        found = valid({norm(k): v for k, v in data.items()})
        if found:
            return found
    named = {}
    for dim in JUDGE_DIMENSIONS:
        pattern = dim.replace("_", r"[\s_-]*")
        m = re.search(rf"{pattern}\W{{0,6}}([1-5])(?!\d)", text, flags=re.I)
        if m:
            named[dim] = m.group(1)
    found = valid(named)
    if found:
        return found
    digits = re.findall(r"(?<![\d.])([1-5])(?![\d.])", text)
    if len(digits) == len(JUDGE_DIMENSIONS) and len(re.findall(r"\d", text)) == len(JUDGE_DIMENSIONS):
        return dict(zip(JUDGE_DIMENSIONS, map(int, digits), strict=True))
    return None


def judge_one(client: Any, query: str, response: str, attempts: int = 3) -> dict[str, Any]:
    """Ask the judge, re-asking on unparsable replies; returns scores or an ``error`` with the raw reply.

    Args:
        client (`ChatClient`): the judge endpoint.
        query (`str`): the question.
        response (`str`): the answer to grade.
        attempts (`int`, defaults to 3): times to ask before giving up on an unparsable reply.
    """
    return _ask(client, JUDGE_PROMPT.format(query=query, response=response), parse_judge, "scores",
                "the judge's reply holds no four 1-5 scores", attempts)


def _ask(client: Any, prompt: str, parse: Any, field: str, unreadable: str, attempts: int) -> dict[str, Any]:
    """Ask ``client`` up to ``attempts`` times until ``parse`` reads the reply: ``{field: value, "raw": reply}``,
    else ``{field: None, "raw": last reply, "error": why}``."""
    raw = error = None
    for _ in range(attempts):
        try:
            raw = client.complete(prompt, max_tokens=80)
        except RuntimeError as err:
            error = str(err)
            continue
        value = parse(raw)
        if value is not None:
            return {field: value, "raw": raw}
        error = unreadable
    return {field: None, "raw": raw, "error": error}


def judge_family(store: Any, quality: Any, model_id: str, family: str, client: Any, attempts: int = 3) -> int:
    """Judge every finished, unattacked positive of ``family`` not yet judged by ``client.model``.

    Args:
        store: the run's result store (finished responses).
        quality: the ``quality.jsonl`` store the scores are appended to.
        model_id (`str`): the evaluated model's name, recorded with each row.
        family (`str`): the family to judge.
        client (`ChatClient`): the judge endpoint.
        attempts (`int`, defaults to 3): times to ask before giving up on an unparsable reply.
    """
    tag = f"judge:{client.model}"
    todo = [r for r in store.rows() if r["model"] == model_id and r["family"] == family and r["role"] == "positive"
            and r.get("attack", "none") == "none" and not r.get("error")
            and not quality.done({**_qkey(r), "attack": tag})]
    for record in tqdm(todo, desc=f"{family} judge ({client.model})", disable=not todo):
        result = judge_one(client, record["query"], record["response"], attempts)
        quality.append([{**_qkey(record), "attack": tag, "metric": "judge", "judge": client.model, **result}])
    return len(todo)


# --------------------------------------------------------------------------------- coverage
COVERAGE_PROMPT = """You are comparing a rewritten text with the original text it was made from.

Original:
{original}

Rewritten:
{rewritten}

How completely does the rewritten text preserve the information and meaning of the original?
Give one score from 1 to 5 (half points such as 4.5 are allowed):
5 - all of the information and meaning is kept
4 - nearly everything is kept; a minor detail is lost or changed
3 - the main points are kept, but several details are lost or changed
2 - only part of the content is kept, or the meaning is partly changed
1 - little or nothing is kept, or the meaning is contradicted

Reply with one JSON object and nothing else, for example:
{{"coverage": 4.5}}"""

_NUMBER = r"(\d+(?:\.\d+)?)"
_SCALE = re.compile(r"\(?\b1\s*(?:-|\u2013|to)\s*5\b\)?", flags=re.I)  # "(1-5)", "1 to 5": the scale, no score
_NAMES = ("coverage", "coverage_score", "score", "rating")


def parse_coverage(text: str) -> float | None:
    """The 1-5 coverage score of a judge reply (fractions such as 4.5 allowed), or None when it cannot be read.

    Accepts, in this order: a JSON object with a ``coverage`` (or ``score``/``rating``) key anywhere
    in the reply; named scores such as ``Coverage: 4.5`` or ``**Score**: 4/5`` (all of them must
    agree); one ``N/5`` or ``N out of 5``; a reply that is a bare number. A scale such as ``(1-5)`` is
    not read as a score, and a number outside 1-5 makes the reply unreadable rather than clipped.

    Args:
        text (`str`): the judge's reply.

    Example:
        >>> parse_coverage('{"coverage": 4.5}')
        4.5
        >>> parse_coverage('Sure. {"Coverage": "3"}')
        3.0
        >>> parse_coverage("**Coverage score (1-5):** 4\\nMost details are kept.")
        4.0
        >>> parse_coverage("The rewrite drops the second half; I would rate it 2.5 out of 5.")
        2.5
        >>> parse_coverage("4.")
        4.0
        >>> parse_coverage("Coverage: 7") is None, parse_coverage("Either 3 or 4.") is None
        (True, True)
        >>> parse_coverage("Coverage: 3. On reflection, coverage: 4.") is None
        True
    """
    if not isinstance(text, str) or not text.strip():
        return None

    def valid(value: Any) -> float | None:
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
        return number if 1.0 <= number <= 5.0 else None

    for data in _json_objects(text):
        norm = {re.sub(r"[^a-z]+", "_", str(k).lower()).strip("_"): v for k, v in data.items()}
        for name in _NAMES:
            if name in norm and (found := valid(norm[name])) is not None:
                return found
    cleaned = _SCALE.sub(" ", text)
    named = re.findall(rf"\b(?:coverage|score|rating)\b[^0-9\n]{{0,20}}?{_NUMBER}", cleaned, flags=re.I)
    if named:
        values = {valid(v) for v in named}
        return values.pop() if len(values) == 1 else None
    out_of = re.findall(rf"{_NUMBER}\s*(?:/|out of)\s*5(?:\.0)?\b", cleaned, flags=re.I)
    if len(set(out_of)) == 1:
        return valid(out_of[0])
    bare = re.fullmatch(rf"[\s*`\"']*{_NUMBER}[\s*`\"'.]*", cleaned)
    return valid(bare.group(1)) if bare else None


def coverage_one(client: Any, original: str, rewritten: str, attempts: int = 3) -> dict[str, Any]:
    """Ask the judge for the coverage of one rewrite, re-asking on unparsable replies; returns the score or
    an ``error`` with the raw reply.

    Args:
        client (`ChatClient`): the judge endpoint.
        original (`str`): the unattacked answer.
        rewritten (`str`): the attacked answer.
        attempts (`int`, defaults to 3): times to ask before giving up on an unparsable reply.
    """
    return _ask(client, COVERAGE_PROMPT.format(original=original, rewritten=rewritten), parse_coverage, "score",
                "the judge's reply holds no 1-5 coverage score", attempts)


def coverage_tag(attack: str, judge: str) -> str:
    """The ``attack`` field that keys a coverage record in ``quality.jsonl``.

    Args:
        attack (`str`): the attack whose output was scored.
        judge (`str`): the judge model.

    Example:
        >>> coverage_tag("deletion", "gpt-4o")
        'coverage:deletion:gpt-4o'
    """
    return f"coverage:{attack}:{judge}"


def coverage_family(store: Any, quality: Any, model_id: str, family: str, client: Any, attempts: int = 3) -> int:
    """Coverage of every finished attacked positive of ``family`` not yet scored by ``client.model``.

    Each record holds the scored attack (``scored_attack``), the judge, the ``score`` (or ``None``
    with an ``error`` and the raw reply; those are asked again on the next run) and ``metric:
    "coverage"``. Returns the number of answers asked about.

    Args:
        store: the run's result store (finished responses and their attacked versions).
        quality: the ``quality.jsonl`` store the scores are appended to.
        model_id (`str`): the evaluated model's name, recorded with each row.
        family (`str`): the family to score.
        client (`ChatClient`): the judge endpoint.
        attempts (`int`, defaults to 3): times to ask before giving up on an unparsable reply.
    """
    todo = [r for r in store.rows() if r["model"] == model_id and r["family"] == family and r["role"] == "positive"
            and r.get("attack", "none") != "none" and not r.get("error") and r.get("response") is not None
            and r.get("source_response") is not None and not quality.done({**_qkey(r), "attack": coverage_tag(r["attack"], client.model)})]
    todo.sort(key=lambda r: (r["attack"], str(r["id"])))
    for record in tqdm(todo, desc=f"{family} coverage ({client.model})", disable=not todo):
        result = coverage_one(client, record["source_response"], record["response"], attempts)
        quality.append([{**_qkey(record), "attack": coverage_tag(record["attack"], client.model), "metric": "coverage",
                         "scored_attack": record["attack"], "judge": client.model, **result}])
    return len(todo)
