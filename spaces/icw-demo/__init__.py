"""The demo Space: ``app.py`` (the page) and its rooms (``demo_*.py``).

This folder is its only copy. The wheel carries it as the data package ``icw._space`` (``package-dir``
in ``pyproject.toml``), and ``icw space`` (:mod:`icw.space`) runs its ``app.py`` from a checkout
(editable install) and from an installed wheel alike. On the Hub the folder is a Space's root, where
this file is inert.
"""
