"""Render a model card from ICWBench results: ``python model_cards/generate.py RESULTS_JSON --out DIR``.

Same as ``icw hub model-card``; the card is built from ``src/icw/model_cards/template.md`` by
:func:`icw.cards.model_card` and written with its ``.eval_results/*.yaml``.
"""

import sys

from icw.cli import main

if __name__ == "__main__":
    sys.exit(main(["hub", "model-card", *sys.argv[1:]]))
