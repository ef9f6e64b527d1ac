import numpy as np
import pytest

from icw.detection import detection_report, tpr_at_fpr


def brute_tpr(pos, neg, fpr):
    best = 0.0
    for t in np.unique(np.r_[pos, neg, np.inf]):
        if np.mean(neg >= t) <= fpr + 1e-12:
            best = max(best, float(np.mean(pos >= t)))
    return best


def test_tpr_at_fpr_with_ties_matches_brute_force():
    pos = np.array([1, 1, 2, 2, 3, 3, 5.0])
    neg = np.array([1, 2, 3, 0, 0, 0, 0, 0, 0, 0.0])
    labels = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    assert tpr_at_fpr(labels, np.r_[pos, neg], 0.1) == pytest.approx(brute_tpr(pos, neg, 0.1))
    rng = np.random.default_rng(0)
    for _ in range(200):
        p, n = rng.integers(0, 6, rng.integers(1, 30)).astype(float), rng.integers(0, 4, rng.integers(1, 60)).astype(float)
        for fpr in (0.01, 0.1, 0.3):
            got = tpr_at_fpr(np.r_[np.ones(len(p)), np.zeros(len(n))], np.r_[p, n], fpr)
            assert got == pytest.approx(brute_tpr(p, n, fpr))


def test_report_and_bad_input():
    rng = np.random.default_rng(1)
    r = detection_report(rng.normal(3, 1, 80), rng.normal(0, 1, 80), num_bootstrap=200)
    assert r.roc_auc_ci[0] <= r.roc_auc <= r.roc_auc_ci[1] and r.tpr_at_fpr_ci[0] <= r.tpr_at_fpr <= r.tpr_at_fpr_ci[1]
    with pytest.raises(ValueError, match="at least one positive and one negative"):
        detection_report([], [1.0])
    with pytest.raises(ValueError, match="finite"):
        detection_report([np.nan], [1.0])
