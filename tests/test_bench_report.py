"""icw bench report: verdict-based TPR/FPR beside AUC and TPR@1%FPR, honest with few negatives."""

import json
import subprocess
import sys

import numpy as np
from scipy.stats import binomtest

from icw import ICWKey, verify


def write_run(path, num_pairs):
    """A run folder whose responses are really verified: positives are SA texts following the key,
    negatives are plain sentences (each with its own key)."""
    words = {c: w for c, w in zip("ABCDEFGHILMNOPRSTUWY", ("Apples", "Birds", "Cats", "Dogs", "Every", "Fish", "Good",
                                                           "Here", "It", "Lots", "Many", "Now", "Often", "People",
                                                           "Rain", "Some", "Then", "Under", "We", "You"), strict=True)}
    rows = []
    rng = np.random.default_rng(0)
    for i in range(num_pairs):
        key = ICWKey.create("sa", seed=i)
        secret = key.secret_string[: int(rng.integers(2, 18))]  # some positives follow only a few letters
        positive = " ".join(f"{words[c]} go on." for c in secret)
        negative = " ".join(f"{w} go on." for w in rng.choice(list(words.values()), 12))
        for role, text in (("positive", positive), ("negative", negative)):
            r = verify(text, key, num_permutations=50, num_null_keys=999)
            rows.append({"model": "m", "family": "sa", "id": str(i), "role": role, "attack": "none", "key": key.to_string(),
                         "response": text, "z_score": r.z_score, "p_value": r.p_value, "num_tokens_scored": 1})
    path.mkdir()
    (path / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def report(path):
    out = subprocess.run([sys.executable, "-m", "icw.cli", "bench", "report", str(path), "--no-figures",
                          "--num-bootstrap", "50"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout, json.loads((path / "results.json").read_text())["families"]["sa"]


def test_few_negatives_tpr_at_1fpr_not_estimable_and_verdict_rates_with_intervals(tmp_path):
    rows = write_run(tmp_path / "run", 40)
    md, sa = report(tmp_path / "run")
    assert sa["tpr_at_fpr"] is None and "not estimable" in sa["tpr_at_fpr_note"]
    assert "1.000 [1.000, 1.000]" not in md and "TPR@1%FPR is not estimable with fewer than 100 negatives" in md
    hits = sum(r["p_value"] <= 0.01 for r in rows if r["role"] == "positive")
    assert 0 < hits < 40 and sa["verdict_tpr"] == hits / 40
    ci = binomtest(hits, 40).proportion_ci(method="exact")
    assert sa["verdict_tpr_ci"] == [ci.low, ci.high]
    fp = sum(r["p_value"] <= 0.01 for r in rows if r["role"] == "negative")
    assert sa["verdict_fpr"] == fp / 40 and sa["verdict_fpr_ci"][1] > 0.05  # 40 negatives say little about the FPR
    assert f"{hits / 40:.3f} [{ci.low:.3f}, {ci.high:.3f}]" in md and "verdict TPR at p <= 0.01" in md


def test_enough_negatives_give_tpr_at_1fpr_with_its_interval(tmp_path):
    write_run(tmp_path / "run", 100)
    md, sa = report(tmp_path / "run")
    assert sa["tpr_at_fpr"] is not None and sa["tpr_at_fpr_ci"][0] <= sa["tpr_at_fpr"] <= sa["tpr_at_fpr_ci"][1]
    assert "not estimable" not in md
