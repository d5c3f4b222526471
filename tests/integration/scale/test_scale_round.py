"""A schedule round at 5,000 nodes x 10,000 pending gangs (the user's workload of
``benchmarks.scale``) is decided by the shipped learned policy and keeps the invariants; the
default deadline grows with the snapshot; the stored input is the HPC codec's form and is still
answered (old rows too) in ``/v1/decide`` shape. No timing is asserted."""

from __future__ import annotations

import contextlib
import json
import uuid
import zlib
from collections import defaultdict
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import httpx
import pytest
from sqlalchemy import text

from app.db.engine import make_engine
from app.main import create_app
from app.services.decisions import SNAPSHOT_CODEC
from app.settings import Settings
from benchmarks.scale import NOW, build_cluster, workload
from tests.conftest import open_client
from tests.factories import job_spec, make_cluster


@contextlib.asynccontextmanager
async def _client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a new app on ``settings``, its lifespan closed however the test ends."""
    clients = cast(AsyncGenerator[httpx.AsyncClient, None], open_client(create_app(settings)))
    try:
        yield await anext(clients)
    finally:
        await clients.aclose()


def _settings(database_url: str, **over: Any) -> Settings:
    return Settings(DATABASE_URL=database_url, MAX_BODY_BYTES=16 * 1024 * 1024, **over)


def _check_invariants(nodes: int, jobs: int, decision: dict[str, Any]) -> None:
    node_bodies, job_bodies = workload(nodes, jobs)
    capacity = {n["id"]: n["capacity"] for n in node_bodies}
    spec = {j["id"]: j for j in job_bodies}
    used: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    seen: set[str] = set()
    for alloc in decision["allocations"]:
        job = spec[alloc["job_id"]]
        assert alloc["job_id"] not in seen
        seen.add(alloc["job_id"])
        # a gang starts whole or not at all
        assert sum(p["tasks"] for p in alloc["placements"]) == job["tasks"]
        for p in alloc["placements"]:
            for name, amount in job["per_task"].items():
                used[p["node_id"]][name] += amount * p["tasks"]
    for node_id, held in used.items():
        for name, amount in held.items():
            assert amount <= capacity[node_id].get(name, 0) + 1e-9, (node_id, name)


@pytest.mark.slow
async def test_5000_nodes_10000_gangs_decided_by_the_learned_policy(database_url: str) -> None:
    nodes, jobs = 5_000, 10_000
    cid = f"scale-{uuid.uuid4().hex[:8]}"
    async with _client(_settings(database_url)) as client:
        await build_cluster(client, cid, nodes, jobs)
        # the deadline is the API's ceiling: this test is about who decides, not how fast
        r = await client.post(
            f"/v1/clusters/{cid}/schedule", json={"now": NOW, "deadline_ms": 60_000}
        )
        assert r.status_code == 200, r.text[:500]
        d = r.json()
        assert d["policy"] == {"name": "hpc-kernel", "version": "3", "kind": "onnx"}, d["fallback"]
        assert d["fallback"] == {"used": False, "reason": None}
        assert d["allocations"]
        _check_invariants(nodes, jobs, d)
        cluster = (await client.get(f"/v1/clusters/{cid}")).json()
        assert cluster["running_jobs"] == len(d["allocations"])
        assert cluster["pending_jobs"] == jobs - len(d["allocations"])
        # the stored allocations are the decision's: node totals equal what the gangs hold
        specs = {j["id"]: j for j in workload(nodes, jobs)[1]}
        cpu = sum(
            specs[a["job_id"]]["per_task"]["cpu"] * specs[a["job_id"]]["tasks"]
            for a in d["allocations"]
        )
        assert cluster["allocated"]["cpu"] == pytest.approx(cpu)
        detail = (await client.get(f"/v1/decisions/{d['id']}")).json()
        assert len(detail["input"]["pending"]) == jobs
        assert len(detail["input"]["nodes"]) == nodes


async def test_the_default_deadline_grows_with_the_snapshot(database_url: str) -> None:
    """A 1 us base deadline alone sends every model round to the fallback; the per-item growth
    gives the same round the time to be decided by the learned policy."""
    answers = []
    for per_1k in (0.0, 600_000.0):
        settings = _settings(
            database_url, DEFAULT_DEADLINE_MS=0.001, DEADLINE_MS_PER_1K_ITEMS=per_1k
        )
        cid = f"dl-{uuid.uuid4().hex[:8]}"
        async with _client(settings) as client:
            await make_cluster(client, cid, nodes=4, cpu=8)
            r = await client.post(
                f"/v1/clusters/{cid}/jobs/batch",
                json={"jobs": [job_spec(f"j{i}", cpu=2, submit_time=float(i)) for i in range(8)]},
            )
            assert r.status_code == 201, r.text
            r = await client.post(f"/v1/clusters/{cid}/schedule", json={"now": 100.0})
            assert r.status_code == 200, r.text
            answers.append(r.json())
    assert answers[0]["fallback"] == {"used": True, "reason": "deadline_exceeded"}
    assert answers[1]["fallback"] == {"used": False, "reason": None}
    assert answers[1]["policy"]["kind"] == "onnx"
    assert Settings().default_deadline_ms(15_000) == pytest.approx(1_550.0)


async def test_stored_input_is_the_codec_form_and_replays(
    client: httpx.AsyncClient, cid: str, settings: Settings
) -> None:
    await make_cluster(client, cid, nodes=2, cluster={"policy": "f1"}, cpu=8)
    r = await client.post(
        f"/v1/clusters/{cid}/jobs/batch",
        json={"jobs": [job_spec("a", cpu=8, submit_time=1.0), job_spec("b", submit_time=2.0)]},
    )
    assert r.status_code == 201, r.text
    first = (await client.post(f"/v1/clusters/{cid}/schedule", json={"now": 10.0})).json()
    r = await client.post(
        f"/v1/clusters/{cid}/jobs/batch", json={"jobs": [job_spec("c", submit_time=3.0)]}
    )
    second = (await client.post(f"/v1/clusters/{cid}/schedule", json={"now": 20.0})).json()
    engine = make_engine(settings.DATABASE_URL)
    try:
        async with engine.connect() as conn:
            old_column, blob = (
                await conn.execute(
                    text("SELECT input_snapshot, input_blob FROM decisions WHERE id = :id"),
                    {"id": second["id"]},
                )
            ).one()
    finally:
        await engine.dispose()
    # the input is stored compressed, beside the decision; the JSON column is for older rows
    assert old_column is None
    stored = json.loads(zlib.decompress(blob))
    assert stored["codec"] == SNAPSHOT_CODEC
    running = stored["state"]["running"]
    assert {r["job"]["id"] for r in running} == {a["job_id"] for a in first["allocations"]}
    assert all("start" in r and isinstance(r["placements"][0], list) for r in running)
    # answered in /v1/decide shape, and replays to the same decision
    snapshot = (await client.get(f"/v1/decisions/{second['id']}")).json()["input"]
    assert snapshot["running"][0]["start_time"] == 10.0
    assert set(snapshot["running"][0]["placements"][0]) == {"node_id", "tasks"}
    replay = (await client.post("/v1/decide", json=snapshot)).json()
    assert replay["allocations"] == second["allocations"]
    assert replay["reservations"] == second["reservations"]


def test_an_old_stored_input_is_answered_as_it_was() -> None:
    from app.services.decisions import replayable_input

    old = {
        "now": 5.0,
        "nodes": [{"id": "n1", "capacity": {"cpu": 4.0}, "allocated": {}, "state": "up"}],
        "running": [
            {
                "job": {"id": "r", "per_task": {"cpu": 1.0}, "walltime_s": 9.0},
                "placements": [{"node_id": "n1", "tasks": 1}],
                "start_time": 1.0,
            }
        ],
        "pending": [],
        "finished": [],
        "policy": "f1",
    }
    assert replayable_input(old) == old
