"""TSP statistics: the exact tail of ``X = |U ∩ T|`` under the key-null.

``T`` is a uniform random ``|T|``-subset of the candidate pool ``P``, so for a text with ``n`` distinct
pool tokens ``X ~ Hypergeometric(|P|, |T|, n)`` exactly (:func:`hypergeom_tails`, batched over texts).

Example:
    >>> import numpy as np
    >>> float(hypergeom_tails(np.array([2]), np.array([10]), np.array([5]), np.array([2]))[0])  # C(5,2) / C(10,2)
    0.2222222222222222
"""

from __future__ import annotations

import numpy as np


def hypergeom_tails(x: np.ndarray, population: np.ndarray, successes: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """``P(X >= x)`` for ``X ~ Hypergeometric(population, successes, draws)``, element-wise.

    Sums the pmf over the upper tail in log space for all texts in one vectorized pass
    (scipy.stats.hypergeom.sf loops in Python per element, which dominated batch verification;
    tests check agreement with it).

    Args:
        x (`np.ndarray`): observed counts, one per text.
        population (`np.ndarray`): population sizes (``|V_en|`` for TSP).
        successes (`np.ndarray`): success states in the population (the green list size ``|T|``).
        draws (`np.ndarray`): sample sizes (the text's unique ``V_en`` tokens ``n``).
    """
    x, big, k, n = (np.asarray(a, dtype=np.int64) for a in (x, population, successes, draws))
    lo = np.maximum(x, 0)
    hi = np.minimum(n, k)
    counts = np.maximum(hi - lo + 1, 0)
    out = np.where(x <= np.maximum(0, n - (big - k)), 1.0, 0.0)  # x at or below the support: certain
    todo = (counts > 0) & (out == 0.0)
    if todo.any():
        reps = counts[todo]
        row = np.repeat(np.arange(len(reps)), reps)
        j = lo[todo][row] + np.arange(reps.sum()) - np.repeat(np.cumsum(reps) - reps, reps)
        kk, bb, nn = k[todo][row], big[todo][row], n[todo][row]
        logpmf = (_log_comb(kk, j) + _log_comb(bb - kk, nn - j) - _log_comb(bb, nn))
        out[todo] = np.minimum(np.add.reduceat(np.exp(logpmf), np.cumsum(reps) - reps), 1.0)
    return out


def _log_comb(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    from scipy.special import gammaln  # here, not at the top: scipy.special takes ~0.4 s to import

    return gammaln(a + 1.0) - gammaln(b + 1.0) - gammaln(a - b + 1.0)
