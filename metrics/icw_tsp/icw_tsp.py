"""evaluate metric icw_tsp: verify texts against Token-Set Preference (ICW) keys.

The numbers are those of ``icw detect``; the implementation is
``icw.evaluate_metrics.VerificationMetric``.
"""

# A module import, not `from ... import`: evaluate takes the first metric class it finds in this file.
import icw.evaluate_metrics


class IcwTsp(icw.evaluate_metrics.VerificationMetric):
    """The ``icw_tsp`` metric: verification of texts against Token-Set Preference (TSP) keys."""

    family = "tsp"
