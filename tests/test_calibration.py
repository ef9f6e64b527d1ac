"""Per-key calibration on human text (icw key calibrate) and screening on your own corpus (icw key new --max-fpr):
a screen of icw.screening over your passages, whose id the key records."""

import json
import re
import subprocess
import sys
import warnings

import pytest
from scipy.stats import binomtest

from icw import ICWKey, verify
from icw.calibration import calibrate_keys, default_corpus, read_corpus
from icw.reference import reference_corpus
from icw.screening import acceptance_rate, corpus_screen, p_value_bound, screen

# texts whose words all start with A-M: a WIP key of mostly A-M letters "fires" on every one
SKEWED = [" ".join(w for w in ("apple bird cat dog egg fig gum hat ink jam kite lamp moon " * 3).split()[i:] + ["and"])
          for i in range(25)]


def test_calibration_counts_the_verifier_verdicts(qwen3):
    corpus = list(default_corpus()[:80])
    # the default corpus is the reference corpus' audit half: passages whose licence is recorded
    audit = [p for p in reference_corpus() if p.split == "audit"]
    assert default_corpus() == tuple(p.text for p in audit) and all(p.licence for p in audit)
    assert set(default_corpus("screen")).isdisjoint(default_corpus())
    keys = [ICWKey.create("wip", seed=s, tokenizer=qwen3) for s in range(3)] + [ICWKey.create("wip", tokenizer=qwen3,
                                                                                              letters="ABCDEFGHIJKLM")]
    for key, cal in zip(keys, calibrate_keys(keys, corpus + SKEWED, qwen3, alpha=0.05), strict=True):
        fires = sum(r.p_value <= 0.05 for r in verify(corpus + SKEWED, key, qwen3, alpha=0.05))
        ci = binomtest(fires, len(corpus) + 25).proportion_ci(method="exact")
        assert (cal.num_false_positives, cal.num_texts) == (fires, 105)
        assert cal.ci == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert cal.num_false_positives >= 25  # the A-M key fires on every skewed text


def test_screening_on_your_corpus_is_a_screen_the_key_records(qwen3):
    spec = corpus_screen(SKEWED, max_fpr=0.2, alpha=0.3)
    assert re.fullmatch(r"corpus-[0-9a-f]{12}", spec.id) and (spec.split, len(spec.texts)) == ("all", 25)
    assert corpus_screen(list(SKEWED), max_fpr=0.2, alpha=0.3).id == spec.id  # the same corpus and bounds: one id
    assert len({spec.id, corpus_screen(SKEWED[1:], max_fpr=0.2, alpha=0.3).id,
                corpus_screen(SKEWED, max_fpr=0.25, alpha=0.3).id, corpus_screen(SKEWED, max_fpr=0.2).id}) == 4
    # at alpha 0.3, keys with many A-M letters fire on every skewed text (seed 1's first draw does), others on none
    result = screen("wip", 1, qwen3, screen=spec)
    key, (cal,) = result.key, result.screen_calibration
    assert (key.seed, key.screen, key.draw) == (1, spec.id, len(result.rejected)) and result.rejected == list(range(key.draw))
    assert key.draw >= 1 and cal.fpr <= 0.2 and all(c.fpr > 0.2 for (c,) in result.rejected_calibration)
    assert ICWKey.from_string(key.to_string()) == key and key.to_string().endswith(f",draw={key.draw},screen={spec.id}")
    assert calibrate_keys(key, SKEWED, qwen3, alpha=0.3)[0].num_false_positives == cal.num_false_positives
    assert "passed screen corpus-" in verify(SKEWED[0], key, qwen3).null_hypothesis
    # the acceptance rate: the share of uniform keys (seeds 3e9 + i, draw 0) within the bound on the corpus
    uniform = [ICWKey.create("wip", 3_000_000_000 + i, qwen3) for i in range(40)]
    passed, tried = acceptance_rate("wip", qwen3, screen=spec, num_keys=40)
    assert (passed, tried) == (sum(c.fpr <= 0.2 for c in calibrate_keys(uniform, SKEWED, qwen3, alpha=0.3)), 40)
    assert 0 < passed < 40  # the skewed corpus rejects some keys, not all
    line = p_value_bound(spec, passed, tried)
    assert f"r = {passed / tried:.2f}" in line and f"min(1, {tried / passed:.2f} p)" in line
    assert "accepted none" in p_value_bound(spec, 0, 40)
    with pytest.raises(ValueError, match="max_fpr must lie"):
        corpus_screen(SKEWED, max_fpr=0)


def test_the_old_call_and_old_key_strings_work_for_one_release(qwen3):
    with pytest.warns(DeprecationWarning, match="screen_key is deprecated"):
        from icw.calibration import screen_key

        key, cal, rejected = screen_key("wip", seed=1, tokenizer=qwen3, max_fpr=0.2, alpha=0.3, corpus=SKEWED)
    new = screen("wip", 1, qwen3, screen=corpus_screen(SKEWED, max_fpr=0.2, alpha=0.3)).key
    assert key == new and cal.fpr <= 0.2 and [ICWKey.from_string(r.key).draw for r in rejected] == list(range(key.draw))
    assert all(r.fpr > 0.2 and r.num_texts == 25 for r in rejected)
    # a key string the old call printed: the same draw, no screen; it loads and verifies as before, with a warning
    old = key.to_string().rsplit(",screen=", 1)[0]
    with pytest.warns(DeprecationWarning, match="a draw but no screen"):
        loaded = ICWKey.from_string(old)
    assert (loaded.draw, loaded.screen) == (key.draw, None) and loaded.green_letters == key.green_letters
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert [r.p_value for r in verify(SKEWED, old, qwen3)] == [r.p_value for r in verify(SKEWED, key, qwen3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ICWKey.from_string(key.to_string())  # screened keys and draw-0 keys load silently
        ICWKey.from_string("icw:sa:seed=4,length=18")


def run(*args):
    return subprocess.run([sys.executable, "-m", "icw.cli", *args], capture_output=True, text=True, timeout=300)


def test_cli_calibrate_and_screen(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(SKEWED) + "\n")
    assert read_corpus(corpus) == SKEWED
    out = run("key", "calibrate", "icw:sa:seed=4,length=18", "--corpus", str(corpus))
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout)
    assert row["num_texts"] == 25 and row["ci"][0] <= row["fpr"] <= row["ci"][1] and row["alpha"] == 0.01
    out = run("key", "new", "--family", "wip", "--seed", "1", "--max-fpr", "0.2", "--alpha", "0.3", "--corpus", str(corpus))
    assert out.returncode == 0, out.stderr
    key = ICWKey.from_string(out.stdout)
    spec = corpus_screen(SKEWED, max_fpr=0.2, alpha=0.3)
    assert key.screen == spec.id and (key.seed, key.draw > 0) == (1, True)  # the file's passages, digested
    assert "draw 0 of seed 1 rejected: empirical FPR 100.00% (25 of 25)" in out.stderr
    assert f"draw {key.draw} of seed 1 kept" in out.stderr and f"on the 25 passages of {corpus}" in out.stderr
    passed, tried = acceptance_rate("wip", "qwen3", screen=spec, num_keys=100)
    assert f"icw: note: {p_value_bound(spec, passed, tried)}\n" in out.stderr
    for args, message in ((["key", "calibrate", "icw:sa:seed=4", "--corpus", str(tmp_path / "no.txt")], "no such corpus"),
                          (["key", "calibrate", "nonsense"], "malformed key"),
                          (["key", "new", "--family", "sa", "--seed", "1", "--max-fpr", "0"], "max_fpr must lie"),
                          (["key", "new", "--family", "sa", "--seed", "1", "--corpus", str(corpus)], "give both")):
        out = run(*args)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr, out.stderr
