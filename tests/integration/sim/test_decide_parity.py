"""The simulator decides exactly like the service: same snapshot, same allocations.

Decision points recorded while the kairos-semantics simulator replays a Lublin-1 sequence are
sent to ``POST /v1/decide`` (the real app, SQLite settings, through ``httpx.ASGITransport``);
the service's allocations and reservation must equal the simulator's decision step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from app.domains.hpc.decision import DecisionConfig
from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.simulate import KairosSimulator, workload_from_trace
from app.domains.hpc.swf import load_swf
from app.domains.hpc.types import Backfill, ClusterState, Decision, Job, PlacementStrategy
from app.main import create_app
from app.settings import Settings

DATA = Path(__file__).resolve().parents[3] / "data"
PER_CASE = 12


def _job(job: Job) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": job.id,
        "tasks": job.tasks,
        "per_task": dict(job.per_task),
        "walltime_s": job.walltime_s,
        "submit_time": job.submit_time,
    }
    if job.user is not None:
        body["user"] = job.user
    return body


def _request(state: ClusterState, policy: str, backfill: Backfill) -> dict[str, Any]:
    return {
        "now": state.now,
        "nodes": [
            {"id": n.id, "capacity": dict(n.capacity), "allocated": dict(n.allocated)}
            for n in state.nodes
        ],
        "running": [
            {
                "job": _job(r.job),
                "placements": [{"node_id": p.node_id, "tasks": p.tasks} for p in r.placements],
                "start_time": r.start_time,
            }
            for r in state.running
        ],
        "pending": [_job(j) for j in state.pending],
        "policy": policy,
        "backfill": backfill.value,
        "placement": PlacementStrategy.FIRST_FIT.value,
        # a loaded CI machine must not turn this into a deadline fallback
        "deadline_ms": 60_000,
    }


def _expected(decision: Decision) -> tuple[list[Any], list[Any]]:
    allocations = [
        {
            "job_id": a.job_id,
            "placements": [{"node_id": p.node_id, "tasks": p.tasks} for p in a.placements],
        }
        for a in decision.allocations
    ]
    reservations = [{"job_id": r.job_id, "start_at": r.start_at} for r in decision.reservations]
    return allocations, reservations


def _recorded(policy: str, backfill: Backfill) -> list[tuple[ClusterState, Decision]]:
    trace = load_swf(DATA / "lublin_256.swf.gz")
    sim = KairosSimulator(
        workload_from_trace(trace, 1981, 120),
        config=DecisionConfig(backfill=backfill, placement=PlacementStrategy.FIRST_FIT),
        record=True,
    )
    sim.run(get_heuristic(policy))
    # the most informative rounds: several pending jobs, some running, something decided
    rounds = [
        (r.state, r.decision)
        for r in sim.decisions
        if len(r.state.pending) >= 2 and r.state.running and (r.decision.allocations or
                                                               r.decision.reservations)
    ]  # fmt: skip
    step = max(1, len(rounds) // PER_CASE)
    return rounds[::step][:PER_CASE]


@pytest.fixture
async def client(tmp_path: Path):
    app = create_app(Settings(DATABASE_URL=f"sqlite:///{tmp_path / 'kairos.db'}"))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kairos.test") as c:
            yield c


@pytest.mark.parametrize("backfill", [Backfill.EASY, Backfill.NONE])
@pytest.mark.parametrize("policy", ["fcfs", "sjf", "wfp3", "f1"])
async def test_service_decides_like_the_simulator(client, policy, backfill):
    rounds = _recorded(policy, backfill)
    assert len(rounds) >= 5
    for state, decision in rounds:
        r = await client.post("/v1/decide", json=_request(state, policy, backfill))
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["policy"]["name"] == policy
        assert body["fallback"]["used"] is False, body["fallback"]
        allocations, reservations = _expected(decision)
        assert body["allocations"] == allocations
        assert body["reservations"] == reservations
