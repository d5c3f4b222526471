"""``python -m benchmarks.scale --given``'s row on a small cluster (embedded SQLite): the round
whose decision is handed back for free answers exactly the decision the policy made, through the
same storing and applying, and the pipeline's own decider is put back afterwards."""

from __future__ import annotations

import app.policy.deciders as deciders
import app.policy.pipeline as pipeline
from benchmarks.scale import run_cell


def test_the_given_round_replays_the_policys_decision_through_the_service() -> None:
    out = run_cell(16, 64, None, None, False, "hpc", True)
    real, given = out["stateful"], out["given"]
    assert real["policy"].startswith("hpc-kernel@"), real["policy"]
    assert given["policy"] == real["policy"]
    assert given["allocations"] == real["allocations"] > 0
    assert min(given["load_s"], given["decide_s"], given["persist_s"]) > 0
    assert getattr(pipeline, "decide_requests") is deciders.decide_requests  # noqa: B009
