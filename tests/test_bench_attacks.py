"""Attacks and quality: deletion, WordNet synonyms, endpoint rewrites, judge and coverage parsing, perplexity."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from icw.bench.attacks import (
    DeletionAttack,
    EndpointAttack,
    SynonymAttack,
    attack_family,
    make_attack,
    wordnet_synonyms,
)
from icw.bench.backends import ChatClient
from icw.bench.quality import (
    COVERAGE_PROMPT,
    coverage_family,
    coverage_one,
    judge_one,
    parse_coverage,
    parse_judge,
)
from icw.bench.runner import ResultStore
from icw.keys import ICWKey

TEXT = ("Bees collect nectar from flowers and carry it back to the hive. Inside, worker bees pass the nectar "
        "between them and fan it with their wings until most of the water evaporates. The thick result is honey, "
        "which they store in wax cells and seal for the winter.")


def test_deletion_removes_thirty_percent_reproducibly():
    attack = make_attack("deletion", seed=3)
    (out,), _ = attack([TEXT])
    n = len(TEXT.split())
    assert len(out.split()) == n - round(0.3 * n)
    assert attack([TEXT])[0][0] == out and DeletionAttack(0.3, seed=4)([TEXT])[0][0] != out
    kept = iter(TEXT.split())
    assert all(any(w == k for k in kept) for w in out.split())  # order kept, nothing invented


def test_synonyms_come_from_wordnet_and_keep_case():
    table = wordnet_synonyms()
    assert "large" in table["big"] and len(table) > 30_000
    (out,), errors = SynonymAttack(0.3, seed=1)([TEXT])
    assert errors == [None]
    before, after = TEXT.split(), out.split()
    assert len(before) == len(after)  # one word for one word
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    # 30% of the words, capped by how many have a WordNet synonym (plurals such as "bees" have none)
    assert 0.2 * len(before) <= len(changed) <= round(0.3 * len(before))
    for old, new in changed:
        old_w, new_w = old.strip(".,"), new.strip(".,")
        assert new_w.lower() in table[old_w.lower()]
        assert old_w[0].isupper() == new_w[0].isupper()


def test_synonym_attack_lowers_wip_detection(qwen3):
    """A real watermark weakens: after WordNet substitution, fewer words keep their green initials."""
    from icw.verification import verify

    key = ICWKey.create("wip", 1, qwen3)
    green = set(key.green_letters.lower())
    words = [w for w in wordnet_synonyms() if w[0] in green and len(w) > 3][:400:4]
    text = " ".join(words)
    attacked = SynonymAttack(1.0, seed=0)([text])[0][0]
    assert verify(attacked, key, qwen3).z_score < verify(text, key, qwen3).z_score


def test_endpoint_attacks_through_a_real_server(server):
    client = ChatClient(server, "tiny", max_tokens=8)
    for name, calls in (("paraphrase", 2), ("back-translation", 2), ("summarize-expand", 2)):
        attack = EndpointAttack(name, client, rounds=2, max_tokens=8)
        assert len(attack.steps(TEXT)) == calls
        out, errors = attack([TEXT, "Short text."])
        assert errors == [None, None] and all(isinstance(t, str) and t for t in out)
    with pytest.raises(ValueError, match="--attack-url"):
        make_attack("paraphrase", None)
    with pytest.raises(ValueError, match="rounds must be 1, 2 or 3"):
        EndpointAttack("paraphrase", client, rounds=4)
    with pytest.raises(ValueError, match="unknown attack"):
        make_attack("emoji")


def test_failed_attacks_are_recorded_then_retried(tmp_path, server):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    store = ResultStore(tmp_path / "responses.jsonl")
    key = ICWKey.create("sa", 9).to_string()
    store.append([{"model": "m", "family": "sa", "id": f"sa-{i}", "role": "positive", "attack": "none",
                   "key": key, "query": "q", "response": TEXT, "z_score": 1.0} for i in range(2)])
    attack_family(store, "m", "sa", [EndpointAttack("paraphrase", ChatClient(dead, "tiny", retries=0))])
    failed = [r for r in store.rows() if r["attack"] == "paraphrase"]
    assert len(failed) == 2 and all(r["error"] and r["response"] is None for r in failed)
    n = attack_family(store, "m", "sa", [EndpointAttack("paraphrase", ChatClient(server, "tiny"), max_tokens=8),
                                         make_attack("deletion")])
    assert n == 4
    done = [r for r in ResultStore(tmp_path / "responses.jsonl").rows() if r["attack"] != "none"]
    assert len(done) == 4 and all(r["z_score"] is not None and not r.get("error") for r in done)
    assert attack_family(store, "m", "sa", [make_attack("deletion")]) == 0  # nothing left to do


def test_judge_parsing_is_robust():
    assert parse_judge('Scores: {"Relevance": 5, "Clarity": 4, "Informativeness": "3", "Factual Correctness": 4}') == {
        "relevance": 5, "clarity": 4, "informativeness": 3, "factual_correctness": 4}
    assert parse_judge("Relevance: 4/5\nClarity - 3\nInformativeness = 2\nFactual correctness: 5") == {
        "relevance": 4, "clarity": 3, "informativeness": 2, "factual_correctness": 5}
    assert parse_judge("4, 4, 3, 5") == {"relevance": 4, "clarity": 4, "informativeness": 3, "factual_correctness": 5}
    for garbage in ("", "Great answer!", '{"relevance": 9, "clarity": 4, "informativeness": 4, '
                    '"factual_correctness": 4}', "1 2 3 4 5", "Relevance: 4. Clarity: 5."):
        assert parse_judge(garbage) is None


def test_judge_garbage_is_retried_and_recorded(server):
    result = judge_one(ChatClient(server, "tiny", max_tokens=8), "Why is the sky blue?", TEXT, attempts=2)
    # a random model cannot produce four scores: the failure keeps its raw reply
    assert result["scores"] is None and result["error"] and isinstance(result["raw"], str)


def test_coverage_parsing_reads_realistic_replies():
    for reply, score in (('{"coverage": 4.5}', 4.5), ('```json\n{"Coverage": 3}\n```', 3.0),
                         ('{"score": "2"}', 2.0), ("Coverage: 4/5", 4.0), ("**Coverage score (1-5):** 3.5", 3.5),
                         ("Rating: 4 out of 5. The rewrite drops the detail about wax cells.", 4.0),
                         ("The rewritten text keeps every point, so I would rate it 5/5.", 5.0),
                         ("I'd rate the coverage as 2 - half of the steps are missing.", 2.0), ("1", 1.0),
                         ("**4.5**", 4.5), ("Coverage score: 4.\nMinor details are lost.", 4.0)):
        assert parse_coverage(reply) == score, reply
    for garbage in ("", "Great rewrite!", '{"coverage": 6}', "Coverage: 0", "Between 3 and 4.", "1 2 3 4 5",
                    "The original has 5 sentences and the rewrite 3.", "Coverage: 3. Coverage: 4.",
                    '{"relevance": 4, "clarity": 5, "informativeness": 3, "factual_correctness": 4}'):
        assert parse_coverage(garbage) is None, garbage
    docs = (Path(__file__).resolve().parents[1] / "docs" / "icwbench.md").read_text(encoding="utf-8")
    assert COVERAGE_PROMPT.format(original="{original}", rewritten="{rewritten}") in docs  # the prompt as documented


def test_coverage_garbage_is_recorded_and_asked_again(tmp_path, server):
    """A random model cannot give a score: the failure keeps its raw reply, the report counts the answer as
    unscored, and the next run asks again (like the judge). Unattacked and failed attacks are never asked about."""
    from icw.bench.report import evasion

    result = coverage_one(ChatClient(server, "tiny", max_tokens=8), TEXT, "Bees make honey.", attempts=2)
    assert result["score"] is None and result["error"] and isinstance(result["raw"], str)
    store = ResultStore(tmp_path / "responses.jsonl")
    base = {"model": "m", "family": "sa", "role": "positive", "key": ICWKey.create("sa", 9).to_string(), "query": "q",
            "z_score": 0.1, "p_value": 0.5}
    store.append([{**base, "id": "a", "attack": "none", "response": TEXT},
                  {**base, "id": "a", "attack": "deletion", "response": "Bees carry nectar.", "source_response": TEXT},
                  {**base, "id": "b", "attack": "deletion", "response": None, "source_response": TEXT, "error": "boom",
                   "z_score": None, "p_value": None}])
    quality = ResultStore(tmp_path / "quality.jsonl")
    client = ChatClient(server, "tiny", max_tokens=8)
    assert coverage_family(store, quality, "m", "sa", client, attempts=1) == 1
    (rec,) = quality.rows()
    assert (rec["metric"], rec["scored_attack"], rec["judge"], rec["id"], rec["score"]) == (
        "coverage", "deletion", "tiny", "a", None)
    assert rec["error"] and isinstance(rec["raw"], str)
    got = evasion(store.rows(), "sa", "deletion", quality=quality.rows())
    assert got["coverage_unscored"] == 1 and "esr_at_coverage" not in got and "mean_coverage" not in got
    assert "mean_coverage" not in evasion(store.rows(), "sa", "none", quality=quality.rows())
    assert coverage_family(store, ResultStore(tmp_path / "quality.jsonl"), "m", "sa", client, attempts=1) == 1


@pytest.mark.slow
def test_perplexity_prefers_fluent_text(smollm2):
    from icw.bench.quality import perplexities

    model, tok = smollm2
    words = TEXT.split()
    shuffled = " ".join(words[i] for i in sorted(range(len(words)), key=lambda i: (i * 7919) % len(words)))
    fluent, scrambled, empty = perplexities(model, tok, ["How is honey made?"] * 3, [TEXT, shuffled, ""])
    assert 1.0 < fluent < scrambled and empty is None


_STARTS = {"A": "Apples grow on trees", "B": "Bees visit the flowers", "C": "Clouds drift over hills",
           "D": "Dogs bark at night", "E": "Every river meets the sea", "F": "Farmers plant seeds",
           "G": "Grass turns green in spring", "H": "Horses run across fields", "I": "Ice melts in the sun",
           "L": "Leaves fall in autumn", "M": "Mountains rise above valleys", "N": "Nights are long in winter",
           "O": "Owls hunt small mice", "P": "People walk to markets", "R": "Rain feeds the crops",
           "S": "Snow covers the roofs", "T": "Trees give shade", "U": "Umbrellas keep us dry",
           "W": "Wind moves the sails", "Y": "Yellow flowers open early"}


def test_report_tables_evasion_at_utility_for_every_attack(tmp_path):
    """ESR = positives with exact p > 0.01 after the attack; at a utility constraint, evaded *and*
    chrF >= c, over all attacked positives. Checked against the records and sacrebleu's own chrF."""
    from sacrebleu import sentence_chrf

    from icw.bench.report import report
    from icw.bench.runner import load_records

    store = ResultStore(tmp_path / "responses.jsonl")
    rows = []
    for i in range(6):
        key = ICWKey.create("sa", 100 + i)
        acrostic = " ".join(_STARTS[c] + "." for c in key.secret_string)
        plain = " ".join(_STARTS[c] + "." for c in "TTTTTTTTTTTTTTTTTT"[: 8 + i])
        for role, text in (("positive", acrostic), ("negative", plain)):
            rows.append({"model": "m", "family": "sa", "id": f"sa-{i}", "role": role, "attack": "none",
                         "key": key.to_string(), "query": "q", "response": text})
    from icw.bench.scoring import score_texts

    for row, score in zip(rows, score_texts([r["response"] for r in rows], [r["key"] for r in rows]), strict=True):
        row.update(score)
    store.append(rows)
    attack_family(store, "m", "sa", [make_attack("deletion"), make_attack("synonym")])
    # a crude "rewrite": every other answer replaced by an unrelated plain text (evades, keeps little)
    positives = [r for r in rows if r["role"] == "positive"]
    swapped = [plain if i % 2 == 0 else r["response"]
               for i, (r, plain) in enumerate(zip(positives, [r["response"] for r in rows if r["role"] == "negative"],
                                                  strict=True))]
    store.append([{**r, "attack": "rewrite", "response": text, "source_response": r["response"], **score}
                  for r, text, score in zip(positives, swapped, score_texts(swapped, [r["key"] for r in positives]),
                                            strict=True)])
    # Coverage of the rewrites by two judges (scores of one answer are averaged); sa-3 failed, sa-5 was never asked
    coverage = {"sa-0": [5, 4], "sa-1": [4.5], "sa-2": [2], "sa-3": [None], "sa-4": [3.5]}
    quality = ResultStore(tmp_path / "quality.jsonl")
    quality.append([{"model": "m", "family": "sa", "id": i, "role": "positive", "attack": f"coverage:rewrite:j{n}",
                     "metric": "coverage", "scored_attack": "rewrite", "judge": f"j{n}", "score": score,
                     **({"error": "no score", "raw": "Nice."} if score is None else {"raw": str(score)})}
                    for i, scores in coverage.items() for n, score in enumerate(scores)])
    result = report(tmp_path, num_bootstrap=20, figures=False)
    evasion = result["families"]["sa"]["evasion"]
    assert set(evasion) == {"none", "deletion", "synonym", "rewrite"}
    rewrite, means = evasion["rewrite"], {"sa-0": 4.5, "sa-1": 4.5, "sa-2": 2.0, "sa-4": 3.5}
    rewritten = {r["id"]: r for r in load_records(tmp_path) if r["attack"] == "rewrite"}
    assert rewrite["mean_coverage"] == pytest.approx(3.625) and rewrite["coverage_unscored"] == 2
    assert rewrite["coverage_judges"] == ["j0", "j1"]
    for c, value in rewrite["esr_at_coverage"].items():
        hits = [i for i, r in rewritten.items() if r["p_value"] > 0.01 and means.get(i, 0) >= float(c)]
        assert value == pytest.approx(len(hits) / 6)
    assert rewrite["esr_at_coverage"] == pytest.approx({"2": 0.5, "3": 2 / 6, "4": 1 / 6, "4.5": 1 / 6})
    assert evasion["none"]["mean_coverage"] == 5.0 and set(evasion["none"]["esr_at_coverage"].values()) == {0.0}
    assert not any(k.startswith(("esr_at_coverage", "mean_coverage", "coverage")) for k in evasion["deletion"])
    records = load_records(tmp_path)
    for attack, got in evasion.items():
        attacked = [r for r in records if r["role"] == "positive" and r["attack"] == attack]
        evaded = [r["p_value"] > 0.01 for r in attacked]
        chrf = [1.0 if attack == "none" else sentence_chrf(r["response"], [r["source_response"]]).score / 100
                for r in attacked]
        assert got["num_attacked"] == len(attacked) == 6
        assert got["esr"] == pytest.approx(sum(evaded) / 6)
        assert got["mean_utility"] == pytest.approx(sum(chrf) / 6)
        for c, value in got["esr_at_utility"].items():
            assert value == pytest.approx(sum(e and u >= float(c) for e, u in zip(evaded, chrf, strict=True)) / 6)
    assert evasion["none"]["esr"] == 0.0  # the acrostics are detected before any attack
    assert evasion["deletion"]["mean_utility"] < 1.0
    assert evasion["rewrite"]["esr"] == 0.5 and evasion["rewrite"]["esr_at_utility"]["0.9"] == 0.0
    md = (tmp_path / "report.md").read_text()
    assert "## Evasion at utility constraints" in md
    assert "| SA | rewrite | 6 | " in md and "| SA | deletion | 6 |" in md and "| SA | synonym | 6 |" in md and "ESR @ utility >= 0.9" in md
    rows = {line.split(" | ")[1]: line for line in md.splitlines() if line.startswith("| SA | ")}
    assert rows["rewrite"].endswith("| 3.62 | 0.500 | 0.333 | 0.167 | 0.167 | 2 |")
    assert rows["deletion"].endswith("| - | - | - | - | - | - |")  # no judge scored the deletions
    assert rows["none"].endswith("| 5.00 | 0.000 | 0.000 | 0.000 | 0.000 | 0 |")
    assert "ESR @ coverage >= 4.5 | unscored |" in md and "coverage 5 by definition" in md
