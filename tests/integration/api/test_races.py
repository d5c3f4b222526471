"""Create-if-absent under concurrency on PostgreSQL: 16 requests at once for one new id, spread
over four app instances (four engines, four connection pools, like four replicas). No answer is a
5xx, the losers get the winner's answer (or a 409 when their body differs), and exactly one
record exists afterwards.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AsyncExitStack
from typing import Any

import asyncpg
import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.conftest import _asyncpg_dsn
from tests.factories import cluster_body, job_spec

pytestmark = [pytest.mark.postgres]

APPS = 4
CONCURRENCY = 16
#: fresh ids per test: a race is a matter of luck, so each test runs it several times
ROUNDS = 3

Call = Callable[[httpx.AsyncClient, int], Coroutine[Any, Any, httpx.Response]]


@pytest.fixture
async def clients(pg_url: str) -> AsyncIterator[list[httpx.AsyncClient]]:
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


@pytest.fixture
async def pg(pg_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(_asyncpg_dsn(pg_url))
    try:
        yield conn
    finally:
        await conn.close()


async def _race(clients: list[httpx.AsyncClient], call: Call) -> list[httpx.Response]:
    answers = await asyncio.gather(
        *(call(clients[k % len(clients)], k) for k in range(CONCURRENCY))
    )
    errors = [(r.status_code, r.text) for r in answers if r.status_code >= 500]
    assert not errors, errors
    return list(answers)


def _new(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def _cluster(client: httpx.AsyncClient) -> str:
    cid = _new("c")
    r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(resources=["cpu"]))
    assert r.status_code == 201, r.text
    r = await client.put(f"/v1/clusters/{cid}/nodes/n1", json={"capacity": {"cpu": 64}})
    assert r.status_code == 201, r.text
    return cid


async def _count(pg: asyncpg.Connection, sql: str, *args: object) -> int:
    return int(await pg.fetchval(sql, *args))


async def test_concurrent_puts_of_a_new_cluster(
    clients: list[httpx.AsyncClient], pg: asyncpg.Connection
) -> None:
    """Finding 4: lock-then-add let two PUTs insert the same (tenant, id): UniqueViolation, 500."""
    for _ in range(ROUNDS):
        cid = _new("c")

        async def put(c: httpx.AsyncClient, k: int, cid: str = cid) -> httpx.Response:
            return await c.put(f"/v1/clusters/{cid}", json=cluster_body(labels={"k": str(k)}))

        answers = await _race(clients, put)
        assert Counter(r.status_code for r in answers) == {201: 1, 200: CONCURRENCY - 1}
        assert {r.json()["id"] for r in answers} == {cid}
        assert await _count(pg, "SELECT count(*) FROM clusters WHERE id = $1", cid) == 1
        final = (await clients[0].get(f"/v1/clusters/{cid}")).json()
        assert final["labels"]["k"] in {str(k) for k in range(CONCURRENCY)}


async def test_concurrent_upserts_of_a_new_node(
    clients: list[httpx.AsyncClient], pg: asyncpg.Connection
) -> None:
    """Finding 4 (checked): node upserts, one by one and in bulk."""
    cid = await _cluster(clients[0])
    for _ in range(ROUNDS):
        nid = _new("n")

        async def put(c: httpx.AsyncClient, k: int, nid: str = nid) -> httpx.Response:
            return await c.put(f"/v1/clusters/{cid}/nodes/{nid}", json={"capacity": {"cpu": 1 + k}})

        answers = await _race(clients, put)
        assert Counter(r.status_code for r in answers) == {201: 1, 200: CONCURRENCY - 1}

        bulk_ids = [_new("b") for _ in range(4)]

        async def bulk(c: httpx.AsyncClient, k: int, ids: list[str] = bulk_ids) -> httpx.Response:
            nodes = [{"id": i, "capacity": {"cpu": 1 + k}} for i in ids]
            return await c.put(f"/v1/clusters/{cid}/nodes", json={"nodes": nodes})

        answers = await _race(clients, bulk)
        assert {r.status_code for r in answers} == {200}
        for i in [nid, *bulk_ids]:
            n = await _count(pg, "SELECT count(*) FROM nodes WHERE id = $1", i)
            assert n == 1, i


async def test_concurrent_submissions_of_a_new_job(
    clients: list[httpx.AsyncClient], pg: asyncpg.Connection
) -> None:
    """Finding 4: the same job at once answers one 201 and the same job (200) to the others."""
    cid = await _cluster(clients[0])
    for _ in range(ROUNDS):
        jid = _new("j")
        body = job_spec(jid, cpu=2)

        async def post(c: httpx.AsyncClient, k: int, body: dict[str, Any] = body) -> httpx.Response:
            return await c.post(f"/v1/clusters/{cid}/jobs", json=body)

        answers = await _race(clients, post)
        assert Counter(r.status_code for r in answers) == {201: 1, 200: CONCURRENCY - 1}
        assert len({r.text for r in answers}) == 1  # the winner's job, to every caller
        assert await _count(pg, "SELECT count(*) FROM jobs WHERE id = $1", jid) == 1


async def test_concurrent_submissions_with_different_bodies(
    clients: list[httpx.AsyncClient], pg: asyncpg.Connection
) -> None:
    """Finding 4: one body wins; the others are 409 ``job_conflict`` naming the id."""
    cid = await _cluster(clients[0])
    for _ in range(ROUNDS):
        jid = _new("j")

        async def post(c: httpx.AsyncClient, k: int, jid: str = jid) -> httpx.Response:
            return await c.post(f"/v1/clusters/{cid}/jobs", json=job_spec(jid, cpu=1 + k))

        answers = await _race(clients, post)
        assert Counter(r.status_code for r in answers) == {201: 1, 409: CONCURRENCY - 1}
        for r in answers:
            if r.status_code == 409:
                assert r.json()["error"]["code"] == "job_conflict"
                assert r.json()["error"]["details"][0]["field"] == "body.id"
        stored = (await clients[0].get(f"/v1/clusters/{cid}/jobs/{jid}")).json()
        (winner,) = [r.json() for r in answers if r.status_code == 201]
        assert stored["per_task"] == winner["per_task"]
        assert await _count(pg, "SELECT count(*) FROM jobs WHERE id = $1", jid) == 1


async def test_concurrent_overlapping_batches(
    clients: list[httpx.AsyncClient], pg: asyncpg.Connection
) -> None:
    """Finding 4: batches sharing ids (same specs) all succeed; each id is stored once."""
    cid = await _cluster(clients[0])
    ids = [_new("j") for _ in range(CONCURRENCY + 4)]

    async def batch(c: httpx.AsyncClient, k: int) -> httpx.Response:
        jobs = [job_spec(i, cpu=1) for i in ids[k : k + 5]]
        return await c.post(f"/v1/clusters/{cid}/jobs/batch", json={"jobs": jobs})

    answers = await _race(clients, batch)
    assert {r.status_code for r in answers} <= {200, 201}, [r.text for r in answers]
    by_id: dict[str, set[str]] = {}
    for r in answers:
        for job in r.json()["jobs"]:
            by_id.setdefault(job["id"], set()).add(str(job["submit_time"]))
    assert set(by_id) == set(ids)
    for i in ids:
        assert await _count(pg, "SELECT count(*) FROM jobs WHERE id = $1", i) == 1


async def test_concurrent_filters_of_a_new_pod(
    clients: list[httpx.AsyncClient], pg: asyncpg.Connection
) -> None:
    """Finding 4: 16 filters of one new pod uid record one job and all answer the same."""
    cid = await _cluster(clients[0])
    for _ in range(ROUNDS):
        uid = _new("pod")
        pod = {
            "metadata": {"name": "p", "namespace": "ml", "uid": uid},
            "spec": {"containers": [{"resources": {"requests": {"cpu": "2"}}}]},
        }

        async def flt(c: httpx.AsyncClient, k: int, pod: dict[str, Any] = pod) -> httpx.Response:
            return await c.post(f"/v1/k8s/{cid}/filter", json={"Pod": pod, "NodeNames": ["n1"]})

        answers = await _race(clients, flt)
        assert {r.status_code for r in answers} == {200}
        assert {r.json()["NodeNames"][0] for r in answers} == {"n1"}
        assert await _count(pg, "SELECT count(*) FROM jobs WHERE id = $1", uid) == 1


async def test_concurrent_requests_with_one_idempotency_key(
    clients: list[httpx.AsyncClient], pg: asyncpg.Connection
) -> None:
    """Finding 4 (checked): one request with the key runs; the others replay it or are 409 while
    it runs; one job, one key row."""
    cid = await _cluster(clients[0])
    for _ in range(ROUNDS):
        key = _new("key")
        jid = _new("j")

        async def post(
            c: httpx.AsyncClient, k: int, key: str = key, jid: str = jid
        ) -> httpx.Response:
            return await c.post(
                f"/v1/clusters/{cid}/jobs",
                json=job_spec(jid, cpu=1),
                headers={"Idempotency-Key": key},
            )

        answers = await _race(clients, post)
        codes = Counter(r.status_code for r in answers)
        assert set(codes) <= {201, 409}, codes
        assert len({r.text for r in answers if r.status_code == 201}) == 1  # run once, replayed
        for r in answers:
            if r.status_code == 409:
                assert r.json()["error"]["code"] == "idempotency_key_in_progress"
        assert await _count(pg, "SELECT count(*) FROM jobs WHERE id = $1", jid) == 1
        assert await _count(pg, "SELECT count(*) FROM idempotency_keys WHERE key = $1", key) == 1
