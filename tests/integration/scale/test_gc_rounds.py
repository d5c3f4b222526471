"""``python -m benchmarks.gc_rounds`` on a small cluster: every threshold gets its rounds, each
decided by the learned policy, and the process's own thresholds are put back."""

from __future__ import annotations

import asyncio
import gc

from benchmarks.gc_rounds import _rounds


def test_each_threshold_gets_its_rounds_and_the_thresholds_are_put_back() -> None:
    before = gc.get_threshold()
    out = asyncio.run(_rounds(16, 64, [700, 50_000], 2))
    assert sorted(out) == [700, 50_000]
    for cell in out.values():
        assert len(cell["s"]) == 2
        assert min(cell["s"]) > 0
        assert len(cell["full"]) == 2
    assert gc.get_threshold() == before
