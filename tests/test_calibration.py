"""Per-key calibration on human text and key screening (icw key calibrate, icw key new --max-fpr)."""

import json
import subprocess
import sys

import numpy as np
import pytest
from scipy.stats import binomtest

from icw import ICWKey, verify
from icw.calibration import calibrate_keys, default_corpus, read_corpus, screen_key
from icw.reference import reference_corpus

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


def test_screening_rejects_keys_above_the_bound(qwen3):
    # at alpha 0.3, keys with many A-M letters fire on every skewed text (seed 1's first draw does), others on none
    key, cal, rejected = screen_key("wip", seed=1, tokenizer=qwen3, max_fpr=0.2, alpha=0.3, corpus=SKEWED)
    assert cal.fpr <= 0.2 and all(r.fpr > 0.2 for r in rejected) and len(rejected) >= 1
    # redrawn within seed 1's stream, as the default screen does: no other seed's key is handed out
    assert [ICWKey.from_string(r.key).draw for r in rejected] == list(range(key.draw)) and key.seed == 1
    assert ICWKey.from_string(key.to_string()) == key and key.screen is None
    assert np.isclose(calibrate_keys(key, SKEWED, qwen3, alpha=0.3)[0].fpr, cal.fpr)


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
    assert "draw 0 of seed 1 rejected" in out.stderr and f"draw {key.draw} of seed 1 kept" in out.stderr
    assert (key.seed, key.draw > 0) == (1, True)
    for args, message in ((["key", "calibrate", "icw:sa:seed=4", "--corpus", str(tmp_path / "no.txt")], "no such corpus"),
                          (["key", "calibrate", "nonsense"], "malformed key"),
                          (["key", "new", "--family", "sa", "--seed", "1", "--max-fpr", "0"], "max_fpr must lie")):
        out = run(*args)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr, out.stderr
