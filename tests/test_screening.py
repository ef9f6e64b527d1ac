"""Key screening against the multi-domain reference corpus (icw.screening, icw key new's per-domain FPR)."""

import json
import re
import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest

from icw import ICWKey, ICWKeyError, verify
from icw.screening import (
    SCREENS,
    _corpus_sha,
    _labels,
    acceptance_rate,
    clopper_pearson,
    new_key,
    passes,
    reference_calibration,
    reference_corpus,
    reference_domains,
    reference_fires,
    screen,
)

LICENCES = {"encyclopedia": "CC BY-SA 3.0", "technical": "PSF-2.0", "legal": "verbatim licence text",
            "fiction": "public domain", "dictionary": "public domain"}


# ----------------------------------------------------------------------------------- corpus
def test_reference_corpus_records_provenance_licence_and_split():
    corpus = reference_corpus()
    assert len({p.id for p in corpus}) == len(corpus)
    assert _corpus_sha().startswith(SCREENS["ref1"].corpus_sha256)  # a rebuilt corpus needs a new screen id
    assert set(reference_domains()) == set(LICENCES)  # five domains of human English
    halves: dict[tuple[str, str], int] = defaultdict(int)
    group_split: dict[tuple[str, str], set[str]] = defaultdict(set)
    for p in corpus:
        assert p.split in ("screen", "audit") and p.source.strip() and p.text.strip()
        assert p.licence.startswith(LICENCES[p.domain]), (p.id, p.licence)
        assert 100 <= len(p.text.split()) <= 400, p.id
        halves[p.domain, p.split] += 1
        group_split[p.domain, p.group].add(p.split)
    assert all(len(splits) == 1 for splits in group_split.values())  # a document never straddles the halves
    assert all(halves[d, s] >= 150 for d in LICENCES for s in ("screen", "audit")), dict(halves)
    fiction = next(p for p in corpus if p.domain == "fiction")
    assert "Jane Austen" in fiction.source and "r-cran-janeaustenr" in fiction.source


# ------------------------------------------------------------------------------ round trips
OLD_KEYS = {  # key strings written before screening existed: they must load and verify exactly as before
    "icw:wip:seed=1,num_letters=13,tokenizer=qwen3,vocab=38c4c4a8ba02": "CEFGIJLMTUWXY",
    "icw:sa:seed=1,length=18": "YNTSLUFOOECUAGYMBL",
    "icw:tsp:seed=1,gamma=0.2,tokenizer=qwen3,vocab=38c4c4a8ba02": None,
}
TEXTS = [p.text for p in reference_corpus()[::500]] + ["Bright blue birds began building big nests."]


@pytest.mark.parametrize("string", sorted(OLD_KEYS))
def test_old_keys_load_and_verify_as_before(string, qwen3):
    key = ICWKey.from_string(string)
    assert key.to_string() == string and key.draw == 0 and key.screen is None
    fresh = ICWKey.create(key.family, 1, qwen3 if key.family != "sa" else None)
    assert fresh == key and fresh.to_string() == string
    if OLD_KEYS[string]:
        assert (key.green_letters if key.family == "wip" else key.secret_string) == OLD_KEYS[string]
    else:
        assert key.token_set(qwen3)[:5].tolist() == [35, 37, 38, 46, 47]  # the golden TSP draw
    tok = qwen3 if key.family != "sa" else None
    assert [r.to_dict() for r in verify(TEXTS, string, tok)] == [r.to_dict() for r in verify(TEXTS, fresh, tok)]
    assert "screen" not in verify(TEXTS[0], string, tok).null_hypothesis


def test_redraws_and_the_screen_record_round_trip(qwen3):
    base = ICWKey.create("wip", 5, qwen3)
    redrawn = ICWKey(**{**base.to_dict(), "draw": 3, "screen": "ref1"})
    assert redrawn.to_string() == base.to_string() + ",draw=3,screen=ref1"  # the record comes last
    assert ICWKey.from_string(redrawn.to_string()) == redrawn == ICWKey.from_string(redrawn.to_json())
    assert redrawn.green_letters != base.green_letters  # another draw of the seed's stream
    sa = ICWKey.create("sa", 5)
    assert ICWKey(**{**sa.to_dict(), "draw": 1}).secret_string != sa.secret_string
    tsp = ICWKey.create("tsp", 5, qwen3, pool_size=400)
    other = ICWKey(**{**tsp.to_dict(), "draw": 2})
    assert other.token_set(qwen3).tolist() != tsp.token_set(qwen3).tolist()
    for bad, message in (({"draw": -1}, "draw must be between"), ({"screen": "Not An Id"}, "screen id"),
                         ({"family": "sa", "secret": "HELLO", "draw": 1}, "explicit material")):
        with pytest.raises(ICWKeyError, match=message):
            ICWKey(**{"family": "sa", "seed": 1, **bad})


# ---------------------------------------------------------------------------- decisions
@pytest.mark.parametrize(("family", "params"), [("wip", {}), ("tsp", {}), ("sa", {}), ("wip", {"num_letters": 7}),
                                               ("tsp", {"pool_size": 300, "gamma": 0.25}), ("sa", {"length": 12})])
def test_reference_decisions_are_the_verifiers(family, params, qwen3):
    tok = qwen3 if family != "sa" else None
    texts = [p.text for p in reference_corpus()]
    rng = np.random.default_rng(0)
    for key in (ICWKey.create(family, 12, tok, **params),
                ICWKey(**{**ICWKey.create(family, 13, tok, **params).to_dict(), "draw": 2})):
        fast = reference_fires(key, tok)
        picked = np.union1d(np.flatnonzero(fast)[:60], rng.choice(len(texts), 120, replace=False))
        slow = np.array([r.is_watermarked for r in verify([texts[i] for i in picked], key, tok)])
        assert (fast[picked] == slow).all() and (slow.any() or family == "sa" or params)


# ------------------------------------------------------------------------------ screening
@pytest.mark.parametrize("family", ["wip", "tsp", "sa"])
def test_a_screened_key_records_its_screen_and_draw(family, qwen3):
    tok = qwen3 if family != "sa" else None
    spec = SCREENS["ref1"]
    for seed in (5_000_001, 5_000_002, 5_000_003):
        result = screen(family, seed, tok)
        key = result.key
        assert (key.seed, key.screen, key.draw, result.rejected) == (seed, "ref1", len(result.rejected),
                                                                      list(range(key.draw)))
        assert passes(reference_fires(key, tok), spec)
        for draw in result.rejected:  # every earlier draw fails the screen
            assert not passes(reference_fires(ICWKey(**{**key.to_dict(), "draw": draw}), tok), spec)
        assert new_key(family, seed, tok) == key and new_key(family, seed, tok, screen=None) == ICWKey.create(
            family, seed, tok)
        assert all(c.fpr <= spec.max_fpr for c in result.screen_calibration)
        assert "passed screen ref1" in verify(TEXTS[0], key, tok).null_hypothesis


def test_screening_refuses_what_it_cannot_screen(qwen3):
    with pytest.raises(ICWKeyError, match="only seeded keys"):
        screen("sa", 1, secret="HELLO")
    with pytest.raises(ICWKeyError, match="unknown screen"):
        new_key("sa", 1, screen="ref9")
    passed, tried = acceptance_rate("sa", num_keys=20)
    assert tried == 20 and passed >= 15  # SA keys rarely fire on human text


def test_reference_calibration_counts_per_domain(qwen3):
    key = ICWKey.create("tsp", 12, qwen3)  # a key that fires often on some domains
    fires = reference_fires(key, qwen3)
    labels, screening_half = _labels()
    cals = reference_calibration(key, qwen3)
    assert [c.domain for c in cals] == list(reference_domains())
    for d, cal in enumerate(cals):
        mask = (labels == d) & ~screening_half
        assert (cal.num_texts, cal.num_false_positives) == (mask.sum(), fires[mask].sum())
        assert cal.ci == clopper_pearson(cal.num_false_positives, cal.num_texts)
        assert cal.ci[0] <= cal.fpr <= cal.ci[1]
    from scipy.stats import binomtest

    ci = binomtest(7, 198).proportion_ci(method="exact")
    assert clopper_pearson(7, 198) == pytest.approx((ci.low, ci.high), abs=1e-12)


# ----------------------------------------------------------------------------------- CLI
def run(*args):
    return subprocess.run([sys.executable, "-m", "icw.cli", *args], capture_output=True, text=True, timeout=600)


LINE = re.compile(r"icw: note:   (\w+) +(\d+\.\d\d)% \[(\d+\.\d\d)%, (\d+\.\d\d)%\]  (\d+) of (\d+)$")


@pytest.mark.parametrize(("family", "extra"), [("wip", ["--tokenizer", "qwen3"]), ("sa", []),
                                               ("tsp", ["--tokenizer", "qwen3", "--no-screen"])])
def test_key_new_prints_the_keys_calibrated_fpr_per_domain(family, extra, qwen3):
    out = run("key", "new", "--family", family, "--seed", "12", *extra)
    assert out.returncode == 0, out.stderr
    key = ICWKey.from_string(out.stdout)
    assert key.screen == (None if "--no-screen" in extra else "ref1")
    rows = [LINE.match(line).groups() for line in out.stderr.splitlines() if LINE.match(line)]
    cals = reference_calibration(key, qwen3 if family != "sa" else None)
    assert [r[0] for r in rows] == [c.domain for c in cals]
    for row, cal in zip(rows, cals, strict=True):
        assert (int(row[4]), int(row[5])) == (cal.num_false_positives, cal.num_texts)
        assert [float(v) for v in row[1:4]] == pytest.approx([100 * cal.fpr, 100 * cal.ci[0], 100 * cal.ci[1]], abs=0.006)
    assert "Clopper-Pearson" in out.stderr and ("kept" in out.stderr) == (key.screen is not None)
    calibrated = run("key", "calibrate", out.stdout.strip(), "--reference")
    assert calibrated.returncode == 0, calibrated.stderr
    assert [json.loads(line)["num_false_positives"] for line in calibrated.stdout.splitlines()] == [
        c.num_false_positives for c in cals]


def test_key_new_screen_errors_are_one_line():
    for args, message in ((["--screen", "nope"], "unknown screen 'nope'"),
                          (["--screen", "ref1", "--length", "99"], "length")):
        out = run("key", "new", "--family", "sa", "--seed", "1", *args)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr, out.stderr
    out = run("key", "calibrate", "icw:sa:seed=1", "--reference", "--corpus", "x.txt")
    assert out.returncode == 2 and "not both" in out.stderr


def test_key_screening_benchmark_runs(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "key_screening.py"
    spec = importlib.util.spec_from_file_location("key_screening_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--num-keys", "3", "--families", "sa"])
    out = capsys.readouterr().out
    for row in ("| SA | after | fiction (audit half) | 3 |", "| SA | before | forum (held out of the corpus) | 3 |",
                "| SA | after, screened without it | legal (all passages) | 3 |", "SA: acceptance rate r = "):
        assert row in out, out[-2000:]
