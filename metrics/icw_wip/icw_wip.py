"""evaluate metric icw_wip: verify texts against Word-Initial Preference (ICW) keys.

The numbers are those of ``icw detect``; the implementation is
``icw.evaluate_metrics.VerificationMetric``.
"""

# A module import, not `from ... import`: evaluate takes the first metric class it finds in this file.
import icw.evaluate_metrics


class IcwWip(icw.evaluate_metrics.VerificationMetric):
    """The ``icw_wip`` metric: verification of texts against Word-Initial Preference (WIP) keys."""

    family = "wip"
