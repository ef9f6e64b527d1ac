"""evaluate metric icw_sa: verify texts against Sentence Acrostic (ICW) keys.

The numbers are those of ``icw detect``; the implementation is
``icw.evaluate_metrics.VerificationMetric``.
"""

# A module import, not `from ... import`: evaluate takes the first metric class it finds in this file.
import icw.evaluate_metrics


class IcwSa(icw.evaluate_metrics.VerificationMetric):
    """The ``icw_sa`` metric: verification of texts against Sentence Acrostic (SA) keys."""

    family = "sa"
