"""Concurrent schedule rounds on one cluster never double-allocate or oversubscribe.

Four app instances (four engines, four connection pools) each fire four rounds at once: 16
concurrent rounds against the same database. On Postgres they race on the cluster row lock; on
SQLite on ``BEGIN IMMEDIATE`` across engines and the per-process lock within one.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter, defaultdict

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.factories import cluster_body


async def _round(client: httpx.AsyncClient, cid: str, now: float) -> dict:
    r = await client.post(f"/v1/clusters/{cid}/schedule", json={"now": now})
    assert r.status_code == 200, r.text
    return dict(r.json())


@pytest.mark.parametrize("apps", [4])
async def test_sixteen_concurrent_rounds(database_url: str, cid: str, apps: int) -> None:
    rng = random.Random(20261130)
    settings = Settings(DATABASE_URL=database_url, DEFAULT_DEADLINE_MS=5_000)
    instances = [create_app(settings) for _ in range(apps)]
    async with contextlib_group(instances) as clients:
        c0 = clients[0]
        assert (await c0.put(f"/v1/clusters/{cid}", json=cluster_body())).status_code == 201
        nodes = [{"id": f"n{i}", "capacity": {"cpu": 16, "memory_gb": 64}} for i in range(6)]
        assert (await c0.put(f"/v1/clusters/{cid}/nodes", json={"nodes": nodes})).status_code == 200
        jobs = [
            {
                "id": f"j{i:03d}",
                "tasks": rng.randint(1, 3),
                "per_task": {"cpu": rng.choice([1, 2, 4, 8]), "memory_gb": rng.choice([1, 8, 16])},
                "walltime_s": rng.uniform(10, 1000),
                "submit_time": float(i),
            }
            for i in range(150)
        ]
        r = await c0.post(f"/v1/clusters/{cid}/jobs/batch", json={"jobs": jobs})
        assert r.status_code == 201
        calls = [_round(clients[k % apps], cid, 1000.0 + k) for k in range(16)]
        decisions = await asyncio.gather(*calls)

        allocated = Counter(a["job_id"] for d in decisions for a in d["allocations"])
        assert allocated, "the rounds allocated nothing; the test proves nothing"
        assert max(allocated.values()) == 1, [j for j, n in allocated.items() if n > 1]

        spec = {j["id"]: j for j in jobs}
        use: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for d in decisions:
            for a in d["allocations"]:
                for p in a["placements"]:
                    for name, v in spec[a["job_id"]]["per_task"].items():
                        use[p["node_id"]][name] += v * p["tasks"]
        for node_id, u in use.items():
            assert u["cpu"] <= 16 + 1e-9, (node_id, u)
            assert u["memory_gb"] <= 64 + 1e-9, (node_id, u)

        running = (
            await c0.get(f"/v1/clusters/{cid}/jobs", params={"state": "running", "limit": 500})
        ).json()["items"]
        assert {j["id"] for j in running} == set(allocated)
        by_decision = {d["id"]: {a["job_id"] for a in d["allocations"]} for d in decisions}
        for job in running:
            assert job["id"] in by_decision[job["decision_id"]]
        stored = (await c0.get(f"/v1/clusters/{cid}/nodes", params={"limit": 500})).json()["items"]
        for node in stored:
            for name in ("cpu", "memory_gb"):
                assert node["allocated"].get(name, 0.0) == pytest.approx(use[node["id"]][name])
                assert node["allocated"].get(name, 0.0) <= node["capacity"][name] + 1e-9


class contextlib_group:  # noqa: N801 - reads like a context manager function at the call site
    """Open every app's lifespan and an ASGI client for each."""

    def __init__(self, apps: list) -> None:
        self.apps = apps
        self.stack: list = []

    async def __aenter__(self) -> list[httpx.AsyncClient]:
        from contextlib import AsyncExitStack

        self._exit = AsyncExitStack()
        clients = []
        for app in self.apps:
            await self._exit.enter_async_context(app.router.lifespan_context(app))
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://kairos.test"
            )
            clients.append(await self._exit.enter_async_context(client))
        return clients

    async def __aexit__(self, *exc: object) -> None:
        await self._exit.aclose()
