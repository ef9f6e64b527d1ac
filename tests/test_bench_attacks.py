"""Attacks and quality measures: deletion, WordNet synonyms, endpoint rewrites, judge parsing, perplexity."""

from __future__ import annotations

import socket

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
from icw.bench.quality import judge_one, parse_judge
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


@pytest.mark.slow
def test_perplexity_prefers_fluent_text(smollm2):
    from icw.bench.quality import perplexities

    model, tok = smollm2
    words = TEXT.split()
    shuffled = " ".join(words[i] for i in sorted(range(len(words)), key=lambda i: (i * 7919) % len(words)))
    fluent, scrambled, empty = perplexities(model, tok, ["How is honey made?"] * 3, [TEXT, shuffled, ""])
    assert 1.0 < fluent < scrambled and empty is None
