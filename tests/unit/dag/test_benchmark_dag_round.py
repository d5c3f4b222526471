"""``python -m benchmarks.dag_round`` on small sizes: it runs, the learned policy decides every
row, and the split graph's decision equals the whole graph's (the run fails otherwise)."""

from __future__ import annotations

import pytest

from benchmarks import dag_round


def test_the_benchmark_runs_and_the_split_decides_as_the_whole_graph(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert dag_round.main(["--sizes", "4x16,12x60", "--whole-max", "100"]) == 0
    out = capsys.readouterr().out
    assert "dag-v1 split" in out
    assert "dag-v1 whole" in out
    assert "(fallback)" not in out
    assert "decided differently" not in out
