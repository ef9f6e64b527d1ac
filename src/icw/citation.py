"""The paper that icw implements, cited the same way everywhere.

:data:`BIBTEX` is the one BibTeX entry: the ``evaluate`` metrics, the ICWBench dataset card and the
model cards use it, and the static metric READMEs (``metrics/*/README.md``) are checked against it
by the tests.

Example:
    >>> print(BIBTEX.splitlines()[2])
      author={Liu, Yepeng and Chen, Tianyi and Zhao, Xuandong and Song, Dawn and Bu, Yuheng},
"""

PAPER_TITLE = "Learning to Follow In-Context Watermark Instructions via Self-Distillation"
PAPER_AUTHORS = "Yepeng Liu, Tianyi Chen, Xuandong Zhao, Dawn Song, Yuheng Bu"
PAPER_YEAR = 2026


def _bibtex_author(name: str) -> str:
    first, _, last = name.rpartition(" ")
    return f"{last}, {first}"


#: The BibTeX entry (authors as ``Last, First``, joined with ``and``), without a trailing newline.
BIBTEX = (
    "@article{liu2026icwsd,\n"
    f"  title={{{PAPER_TITLE}}},\n"
    f"  author={{{' and '.join(_bibtex_author(a) for a in PAPER_AUTHORS.split(', '))}}},\n"
    f"  year={{{PAPER_YEAR}}}\n"
    "}"
)
