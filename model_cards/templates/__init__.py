"""The model card template(s) behind :func:`icw.cards.model_card`.

This folder is their only copy. The wheel carries it as the data package ``icw._card_templates``
(``package-dir`` in ``pyproject.toml``), and :func:`icw.cards.model_card_template` finds it in a
checkout (editable install) and in an installed wheel alike.
"""
