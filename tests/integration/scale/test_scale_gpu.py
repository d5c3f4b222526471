"""``python -m benchmarks.scale --domain gpu``'s cell on a small cluster (embedded SQLite): the
timed round sees running and pending jobs, ``gpu-v1`` decides both the stateful round and its
``/v1/decide`` replay without fallback, and every split is filled."""

from __future__ import annotations

from benchmarks.scale import run_cell


def test_the_gpu_cell_times_a_learned_round_over_running_and_pending_jobs() -> None:
    out = run_cell(10, 80, None, None, True, "gpu")
    assert 0 < out["running"] < 80
    for kind in ("stateful", "decide"):
        row = out[kind]
        assert row["policy"].startswith("gpu-v1@"), row["policy"]
        assert "fallback" not in row["policy"]
        assert min(row["load_s"], row["decide_s"], row["persist_s"]) > 0
    assert out["core_s"] > 0
    assert out["raw_s"] > 0
