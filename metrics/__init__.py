"""The ``evaluate`` metric folders, one per metric: ``<name>/<name>.py``, the metric card, a Space's app.

This folder is their only copy. The wheel carries it as the data package ``icw._bundled_metrics``
(``package-dir`` in ``pyproject.toml``), and :func:`icw.metric_paths.metric_path` finds it in a
checkout (editable install) and in an installed wheel alike.
"""
