import pytest

from icw.cli import main
from icw.demo import DEMO_QUESTIONS


@pytest.mark.slow
def test_icw_demo_prints_a_table_per_family(capsys, smollm2):
    assert main(["demo", "--max-new-tokens", "60"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "family" not in line]
    assert len(rows) == 3 * len(DEMO_QUESTIONS)
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert {c[0] for c in cells} == {"tsp", "wip", "sa"}
    plain_z = [float(c[2]) for c in cells]
    bias_z = [float(c[4]) for c in cells]
    assert sum(b > p for b, p in zip(bias_z, plain_z, strict=True)) >= 7
    assert all(0 < float(c[3]) <= 1 and 0 < float(c[5]) <= 1 for c in cells)

