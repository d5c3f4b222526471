"""Concurrent rounds and events on one dag cluster: over four app instances on PostgreSQL (four
engines and pools, like four replicas), and concurrent requests to one app on SQLite. Rounds
serialise on the cluster lock, so their grants never add up to more slots than exist."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.integration.api.dag_helpers import (
    NOW,
    all_dags,
    check_invariants,
    make_dag_cluster,
    wide_dag,
)

APPS = 4
ROUNDS = 12


@pytest.fixture
async def pg_clients(pg_url: str) -> AsyncIterator[list[httpx.AsyncClient]]:
    settings = Settings(DATABASE_URL=pg_url, DEFAULT_DEADLINE_MS=5_000)
    async with AsyncExitStack() as stack:
        out = []
        for _ in range(APPS):
            app = create_app(settings)
            await stack.enter_async_context(app.router.lifespan_context(app))
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://kairos.test"
            )
            out.append(await stack.enter_async_context(client))
        yield out


async def _concurrent_rounds(clients: list[httpx.AsyncClient], cid: str) -> None:
    await make_dag_cluster(clients[0], cid, nodes=2, cpu=4)
    for i in range(3):
        r = await clients[0].post(f"/v1/clusters/{cid}/dags", json=wide_dag(f"d{i}", 10, NOW + i))
        assert r.status_code == 201, r.text
    answers = await asyncio.gather(
        *(
            clients[k % len(clients)].post(f"/v1/clusters/{cid}/schedule", json={"now": NOW + 5})
            for k in range(ROUNDS)
        )
    )
    assert [a.status_code for a in answers] == [200] * ROUNDS, [a.text for a in answers]
    decisions: list[dict[str, Any]] = [a.json() for a in answers]
    granted = sum(p["tasks"] for d in decisions for a in d["allocations"] for p in a["placements"])
    assert granted == 8  # every slot exactly once: work-conserving, never over-allocated
    dags = await all_dags(clients[0], cid)
    assert sum(d["running_slots"] for d in dags) == 8
    for d in decisions:
        await check_invariants(clients[0], cid, d, slots_per_node=4)
    # rounds racing with task events keep every invariant
    jobs = [f"d{i}:only" for i in range(3)]
    calls = []
    for k in range(ROUNDS):
        c = clients[k % len(clients)]
        calls.append(c.post(f"/v1/clusters/{cid}/schedule", json={"now": NOW + 10 + k}))
        calls.append(
            c.post(
                f"/v1/clusters/{cid}/jobs/{jobs[k % 3]}/events",
                json={"type": "task_finished", "at": NOW + 10 + k},
            )
        )
    answers = await asyncio.gather(*calls)
    assert {a.status_code for a in answers} <= {200, 409}, [a.text for a in answers]
    await check_invariants(clients[0], cid, {"allocations": []}, slots_per_node=4)


@pytest.mark.postgres
async def test_concurrent_rounds_over_four_apps_on_postgres(
    pg_clients: list[httpx.AsyncClient], cid: str
) -> None:
    await _concurrent_rounds(pg_clients, cid)


async def test_concurrent_rounds_on_sqlite(migrated_sqlite_url: str, cid: str) -> None:
    app = create_app(Settings(DATABASE_URL=migrated_sqlite_url, DEFAULT_DEADLINE_MS=5_000))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://kairos.test") as client,
    ):
        await _concurrent_rounds([client], cid)
