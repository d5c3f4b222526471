"""A GPU round at the issue's scale through ``POST /v1/decide``: 1,000 nodes of 8 GPUs and 5,000
active jobs (about half running, some elastic) decided by the shipped ``gpu-v1`` (its window the
running jobs + 64, as the service passes it) without fallback, the answer keeping the decision
invariants on the snapshot it was given. No timing is asserted: the deadline is the largest a
request may ask (60 s)."""

from __future__ import annotations

import random
from typing import Any

from app.domains.gpu import codec
from app.domains.gpu.types import Allocation, GpuDecision, Placement, PolicyRef
from app.domains.gpu.validation import validate_decision
from app.main import create_app
from app.settings import Settings
from tests.conftest import open_client

NOW = 1_767_225_600.0


def scale_body(nodes: int = 1_000, jobs: int = 5_000, seed: int = 20) -> dict[str, Any]:
    """``nodes`` nodes of 8 GPUs; ``jobs`` gangs of 1-16 GPUs, a fifth elastic (max twice
    the min), about half running where their size fits (spanning nodes when it must) while at
    least one GPU per node stays free, so that pending jobs can start without preemptions."""
    rng = random.Random(seed)
    free = [8] * nodes
    free_total = 8 * nodes
    out: list[dict[str, Any]] = []
    for i in range(jobs):
        g = rng.choice([1, 1, 2, 4, 8, 16])
        job: dict[str, Any] = {
            "id": f"j{i:05d}",
            "arrival": NOW - 50_000 + 10 * i,
            "min_gpus": g,
            "max_gpus": 2 * g if rng.random() < 0.2 else g,
            "tenant": f"t{i % 7}",
            "attained_gpu_s": round(rng.uniform(0, 20_000), 3),
            "executed_s": round(rng.uniform(0, 2_000), 3),
            "preemptions": rng.randrange(3),
        }
        if rng.random() < 0.5 and free_total - g >= nodes:
            need, start = g, rng.randrange(nodes)
            placed: list[dict[str, Any]] = []
            rows: list[tuple[int, int]] = []
            for k in range(nodes):
                ix = (start + k) % nodes
                if need and free[ix]:
                    t = min(free[ix], need)
                    placed.append({"node_id": f"n{ix:04d}", "gpus": t})
                    rows.append((ix, t))
                    free[ix] -= t
                    need -= t
                if not need:
                    break
            if need == 0:
                job["allocation"] = placed
                job["starts"] = 1
                free_total -= g
            else:
                for ix, t in rows:
                    free[ix] += t
        out.append(job)
    return {
        "domain": "gpu",
        "now": NOW,
        "nodes": [{"id": f"n{i:04d}", "gpus": 8} for i in range(nodes)],
        "jobs": out,
    }


def _allocations(raw: list[dict[str, Any]]) -> tuple[Allocation, ...]:
    return tuple(
        Allocation(a["job_id"], tuple(Placement(p["node_id"], p["tasks"]) for p in a["placements"]))
        for a in raw
    )


async def test_a_round_of_1000_nodes_and_5000_jobs_is_decided_by_gpu_v1(
    settings: Settings,
) -> None:
    body = scale_body()
    running = sum(1 for j in body["jobs"] if "allocation" in j)
    assert 1_000 < running < 4_000  # the round both keeps/preempts and starts jobs
    big = settings.model_copy(update={"MAX_BODY_BYTES": 16 * 1024 * 1024})
    async for client in open_client(create_app(big)):
        r = await client.post(
            "/v1/decide", json={**body, "policy": "gpu-v1", "deadline_ms": 60_000}
        )
    assert r.status_code == 200, r.text[:500]
    d = r.json()
    assert d["policy"]["name"] == "gpu-v1", d["fallback"]
    assert d["fallback"]["used"] is False, d["fallback"]
    state = codec.state_from_json({k: body[k] for k in ("now", "nodes", "jobs")})
    decision = GpuDecision(
        policy=PolicyRef(**d["policy"]),
        allocations=_allocations(d["allocations"]),
        resizes=_allocations(d["resizes"]),
        preemptions=tuple(d["preemptions"]),
    )
    validate_decision(state, decision)
    assert decision.allocations  # free GPUs are left, so pending jobs start
    touched = {a.job_id for a in (*decision.allocations, *decision.resizes)}
    assert touched.isdisjoint(decision.preemptions)
