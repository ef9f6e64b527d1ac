"""Bridges to third-party frameworks, each behind its own optional extra (importing ``icw`` imports none).

* :mod:`icw.integrations.datatrove`: ICW detection as datatrove pipeline steps (``pip install icw[datatrove]``).

The package is named after the frameworks it serves, like ``transformers.integrations``; its modules
import the framework by absolute import, so ``icw.integrations.datatrove`` never shadows ``datatrove``.
"""
