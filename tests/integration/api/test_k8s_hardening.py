"""The extender against schedule rounds on PostgreSQL: one cluster lock, no spec change of a job
that is not pending, allocations that always match the running jobs, and ids checked whole.

The interleavings are driven deterministically: a transaction of the test's own holds a lock
the request under test must wait for, and the test watches ``pg_stat_activity`` until that
request is either finished or waiting on a lock before it lets go.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import asyncpg
import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.conftest import _asyncpg_dsn, open_client
from tests.factories import cluster_body

pytestmark = [pytest.mark.postgres]


@pytest.fixture
async def api(pg_url: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(DATABASE_URL=pg_url, DEFAULT_DEADLINE_MS=5_000)
    async for client in open_client(create_app(settings)):
        yield client


@pytest.fixture
async def pg(pg_url: str) -> AsyncIterator[asyncpg.Connection]:
    """The test's own connection, for the transactions that hold locks."""
    conn = await asyncpg.connect(_asyncpg_dsn(pg_url))
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def watch(pg_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection that only reads ``pg_stat_activity``, never inside a transaction (one keeps
    the first snapshot it read of it)."""
    conn = await asyncpg.connect(_asyncpg_dsn(pg_url))
    try:
        yield conn
    finally:
        await conn.close()


def _pod(uid: str, cpu: float) -> dict[str, Any]:
    return {
        "metadata": {"name": f"pod-{uid}", "namespace": "ml", "uid": uid},
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": str(cpu)}}}]},
    }


def _filter(uid: str, cpu: float) -> dict[str, Any]:
    return {"Pod": _pod(uid, cpu), "NodeNames": ["n1"]}


def _bind(uid: str, node: str = "n1") -> dict[str, Any]:
    return {"PodName": f"pod-{uid}", "PodNamespace": "ml", "PodUID": uid, "Node": node}


async def _cluster(api: httpx.AsyncClient, cid: str, cpu: float = 64) -> None:
    r = await api.put(f"/v1/clusters/{cid}", json=cluster_body(resources=["cpu"], policy="fcfs"))
    assert r.status_code == 201, r.text
    r = await api.put(f"/v1/clusters/{cid}/nodes/n1", json={"capacity": {"cpu": cpu}})
    assert r.status_code == 201, r.text


async def _served(api: httpx.AsyncClient, url: str, body: dict[str, Any]) -> httpx.Response:
    """POST as an orchestrator does: a 503 ``backend_unavailable`` (the pool was exhausted while
    51 requests queued on one cluster's lock on a loaded host) is retried, a bounded number of
    times; every other answer is returned as it is."""
    for _ in range(20):
        r = await api.post(url, json=body)
        if r.status_code != 503 or r.json()["error"]["code"] != "backend_unavailable":
            return r
        await asyncio.sleep(0.2)
    return r


async def _lock_waiters(pg: asyncpg.Connection) -> int:
    n = await pg.fetchval(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    return int(n)


async def _finished_or_waiting(
    pg: asyncpg.Connection, task: asyncio.Task[Any], waiters: int
) -> None:
    """Return once ``task`` is done or ``waiters`` backends wait on a lock."""
    while not task.done() and await _lock_waiters(pg) < waiters:  # noqa: ASYNC110 - polls the server
        await asyncio.sleep(0.01)


async def _assert_accounting(api: httpx.AsyncClient, cid: str) -> None:
    """Every node's ``allocated`` is what its running jobs' placements hold."""
    jobs = await api.get(f"/v1/clusters/{cid}/jobs", params={"state": "running", "limit": 500})
    held: dict[str, dict[str, float]] = {}
    for job in jobs.json()["items"]:
        for p in job["placements"]:
            use = held.setdefault(p["node_id"], {})
            for name, v in job["per_task"].items():
                use[name] = use.get(name, 0.0) + v * p["tasks"]
    nodes = (await api.get(f"/v1/clusters/{cid}/nodes", params={"limit": 500})).json()["items"]
    for node in nodes:
        want = held.get(node["id"], {})
        for name in {*want, *node["allocated"]}:
            got = node["allocated"].get(name, 0.0)
            assert got == pytest.approx(want.get(name, 0.0)), (node["id"], node["allocated"], want)


async def test_a_filter_during_a_round_cannot_respec_the_job_the_round_starts(
    api: httpx.AsyncClient, pg: asyncpg.Connection, watch: asyncpg.Connection, cid: str
) -> None:
    """Finding 2: the round reads the job at cpu 1; a filter re-specs it to cpu 3 before the round
    writes. The round's decision insert is held on a request id the test's own transaction
    holds, so the round waits after reading its snapshot."""
    await _cluster(api, cid)
    assert (await api.post(f"/v1/k8s/{cid}/filter", json=_filter("pod-a", 1))).status_code == 200

    holder = pg.transaction()
    await holder.start()
    await pg.execute(
        "INSERT INTO decisions (id, request_id, tenant, created_at, policy_name, policy_version,"
        " policy_kind, fallback_used, allocations, reservations, queue_length, latency_ms,"
        " dry_run, input_snapshot) VALUES ($1, $2, 'default', now(), 'x', '1', 'heuristic',"
        " false, '[]', '[]', 0, 0, true, '{}')",
        f"dec-hold-{cid}",
        f"req-hold-{cid}",
    )
    round_ = asyncio.create_task(
        api.post(
            f"/v1/clusters/{cid}/schedule",
            json={"now": 1000.0},
            headers={"X-Request-ID": f"req-hold-{cid}"},
        )
    )
    await _finished_or_waiting(watch, round_, 1)
    assert not round_.done(), round_.result().text  # waiting on our request id, snapshot read
    refilter = asyncio.create_task(api.post(f"/v1/k8s/{cid}/filter", json=_filter("pod-a", 3)))
    await _finished_or_waiting(watch, refilter, 2)
    await holder.rollback()  # the round stores its decision and applies it

    r = await round_
    assert r.status_code == 200, r.text
    assert [a["job_id"] for a in r.json()["allocations"]] == ["pod-a"]
    assert (await refilter).status_code == 200
    job = (await api.get(f"/v1/clusters/{cid}/jobs/pod-a")).json()
    assert job["state"] == "running"
    assert job["per_task"] == {"cpu": 1.0}  # the spec the round placed, not the filter's
    await _assert_accounting(api, cid)
    assert (await api.post(f"/v1/clusters/{cid}/schedule", json={"now": 1001.0})).status_code == 200


@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind"])
async def test_every_extender_verb_waits_for_the_cluster_lock(
    api: httpx.AsyncClient,
    pg: asyncpg.Connection,
    watch: asyncpg.Connection,
    cid: str,
    verb: str,
) -> None:
    """Finding 2: filter, prioritize and bind take the lock schedule rounds take."""
    await _cluster(api, cid)
    assert (await api.post(f"/v1/k8s/{cid}/filter", json=_filter("pod-b", 2))).status_code == 200
    body = _bind("pod-b") if verb == "bind" else _filter("pod-b", 2)

    holder = pg.transaction()
    await holder.start()
    await pg.execute(
        "SELECT 1 FROM clusters WHERE tenant = 'default' AND id = $1 FOR NO KEY UPDATE", cid
    )
    call = asyncio.create_task(api.post(f"/v1/k8s/{cid}/{verb}", json=body))
    await _finished_or_waiting(watch, call, 1)
    done_under_lock = call.done()
    await holder.rollback()
    r = await call
    assert r.status_code == 200, r.text
    assert not done_under_lock, f"{verb} answered while a round held the cluster lock"


async def test_concurrent_refilters_and_rounds_keep_allocations_exact(
    api: httpx.AsyncClient, cid: str
) -> None:
    """Finding 2 at load: pods filtered at cpu 1, then re-filtered at cpu 3 while rounds run."""
    await _cluster(api, cid, cpu=64)
    uids = [f"pod-{i:03d}" for i in range(48)]
    for uid in uids:
        assert (await api.post(f"/v1/k8s/{cid}/filter", json=_filter(uid, 1))).status_code == 200
    calls: list[Coroutine[Any, Any, httpx.Response]] = [
        _served(api, f"/v1/k8s/{cid}/filter", _filter(uid, 3)) for uid in uids
    ]
    for k in range(3):
        calls.insert(16 * k + 8, _served(api, f"/v1/clusters/{cid}/schedule", {"now": 1000.0 + k}))
    answers = await asyncio.gather(*calls)
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers if r.is_error]
    await _assert_accounting(api, cid)
    # a big pod filtered and bound on what is left still fits, and rounds keep working
    nodes = (await api.get(f"/v1/clusters/{cid}/nodes")).json()["items"]
    free = nodes[0]["capacity"]["cpu"] - nodes[0]["allocated"].get("cpu", 0.0)
    assert (await api.post(f"/v1/k8s/{cid}/filter", json=_filter("big", free + 1))).json()[
        "NodeNames"
    ] == []
    assert (await api.post(f"/v1/k8s/{cid}/bind", json=_bind("big"))).json()["Error"]
    assert (await api.post(f"/v1/clusters/{cid}/schedule", json={"now": 2000.0})).status_code == 200
    await _assert_accounting(api, cid)


async def test_a_round_is_not_wedged_by_allocations_that_drifted(
    api: httpx.AsyncClient, pg: asyncpg.Connection, cid: str
) -> None:
    """Finding 2, the aftermath: stored allocations that disagree with the running jobs (as the
    race left them) neither wedge the cluster (422 ``invalid_snapshot`` forever) nor hide the
    capacity in use; the round stores what the running jobs hold."""
    await _cluster(api, cid, cpu=64)
    for uid, cpu in (("run-a", 3), ("run-b", 55)):
        assert (await api.post(f"/v1/k8s/{cid}/filter", json=_filter(uid, cpu))).status_code == 200
        assert (await api.post(f"/v1/k8s/{cid}/bind", json=_bind(uid))).json() == {"Error": ""}
    # what the race left: run-a accounted at 1 cpu, its spec at 30 (running demand 85 > 64)
    cluster_pk = await pg.fetchval(
        "SELECT pk FROM clusters WHERE tenant = 'default' AND id = $1", cid
    )
    spec = json.loads(
        await pg.fetchval(
            "SELECT spec FROM jobs WHERE cluster_pk = $1 AND id = 'run-a'", cluster_pk
        )
    )
    spec["per_task"] = {"cpu": 30.0}
    await pg.execute(
        "UPDATE jobs SET spec = $2::json WHERE cluster_pk = $1 AND id = 'run-a'",
        cluster_pk,
        json.dumps(spec),
    )
    await pg.execute(
        "UPDATE nodes SET allocated = '{\"cpu\": 56.0}' WHERE cluster_pk = $1", cluster_pk
    )
    r = await api.post(
        f"/v1/clusters/{cid}/jobs",
        json={"id": "small", "per_task": {"cpu": 4}, "walltime_s": 60, "submit_time": 1.0},
    )
    assert r.status_code == 201, r.text

    r = await api.post(f"/v1/clusters/{cid}/schedule", json={"now": 1000.0})
    assert r.status_code == 200, r.text
    assert r.json()["allocations"] == []  # 85 cpu run on the node already: nothing more fits
    await _assert_accounting(api, cid)
    assert (await api.post(f"/v1/clusters/{cid}/schedule", json={"now": 1001.0})).status_code == 200

    # once they end, the node is whole again
    for uid in ("run-a", "run-b"):
        r = await api.post(f"/v1/clusters/{cid}/jobs/{uid}/events", json={"type": "finished"})
        assert r.status_code == 200, r.text
    r = await api.post(f"/v1/clusters/{cid}/schedule", json={"now": 1002.0})
    assert [a["job_id"] for a in r.json()["allocations"]] == ["small"]
    await _assert_accounting(api, cid)


async def test_an_overcounted_allocation_neither_leaks_nor_lends_capacity(
    api: httpx.AsyncClient, pg: asyncpg.Connection, cid: str
) -> None:
    """Finding 2, the other drift: ``allocated`` above what the running jobs hold. The round sees
    the node's real capacity and what runs on it: 54 of 64 cpu free, not 0 and not 70."""
    await _cluster(api, cid, cpu=64)
    assert (await api.post(f"/v1/k8s/{cid}/filter", json=_filter("run", 10))).status_code == 200
    assert (await api.post(f"/v1/k8s/{cid}/bind", json=_bind("run"))).json() == {"Error": ""}
    cluster_pk = await pg.fetchval(
        "SELECT pk FROM clusters WHERE tenant = 'default' AND id = $1", cid
    )
    await pg.execute(
        "UPDATE nodes SET allocated = '{\"cpu\": 80.0}' WHERE cluster_pk = $1", cluster_pk
    )
    jobs = f"/v1/clusters/{cid}/jobs"
    too_big = {"id": "too-big", "per_task": {"cpu": 60}, "walltime_s": 60, "submit_time": 1.0}
    assert (await api.post(jobs, json=too_big)).status_code == 201
    r = await api.post(f"/v1/clusters/{cid}/schedule", json={"now": 1000.0, "dry_run": True})
    assert r.status_code == 200, r.text
    assert r.json()["allocations"] == []
    assert (await api.delete(f"{jobs}/too-big")).status_code == 204
    fits = {"id": "fits", "per_task": {"cpu": 50}, "walltime_s": 60, "submit_time": 2.0}
    assert (await api.post(jobs, json=fits)).status_code == 201
    r = await api.post(f"/v1/clusters/{cid}/schedule", json={"now": 1001.0})
    assert [a["job_id"] for a in r.json()["allocations"]] == ["fits"]
    await _assert_accounting(api, cid)


async def test_a_pod_uid_with_a_trailing_newline_is_refused(
    api: httpx.AsyncClient, cid: str
) -> None:
    """Finding 3: ``re.match``'s ``$`` accepted ``"pod-nl\\n"``; nothing may be recorded."""
    await _cluster(api, cid)
    for verb in ("filter", "prioritize"):
        r = await api.post(f"/v1/k8s/{cid}/{verb}", json=_filter("pod-nl\n", 4))
        assert r.status_code == 422, r.text
        assert r.json()["error"]["details"][0]["field"] == "body.Pod.metadata.uid"
    bind = await api.post(f"/v1/k8s/{cid}/bind", json=_bind("pod-nl\n"))
    assert bind.status_code == 200
    assert bind.json()["Error"]
    jobs = (await api.get(f"/v1/clusters/{cid}/jobs")).json()["items"]
    assert jobs == []
    node = (await api.get(f"/v1/clusters/{cid}/nodes")).json()["items"][0]
    assert node["allocated"].get("cpu", 0.0) == 0.0


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/clusters/{c}%0A"),
        ("PUT", "/v1/clusters/{c}%0A"),
        ("DELETE", "/v1/clusters/{c}%0A"),
        ("GET", "/v1/clusters/{c}%0A/shadow-report"),
        ("GET", "/v1/clusters/{c}%0A/nodes"),
        ("PUT", "/v1/clusters/{c}%0A/nodes"),
        ("PUT", "/v1/clusters/{c}/nodes/n1%0A"),
        ("GET", "/v1/clusters/{c}%0A/jobs"),
        ("POST", "/v1/clusters/{c}%0A/jobs"),
        ("POST", "/v1/clusters/{c}%0A/jobs/batch"),
        ("GET", "/v1/clusters/{c}/jobs/j1%0A"),
        ("DELETE", "/v1/clusters/{c}/jobs/j1%0A"),
        ("POST", "/v1/clusters/{c}/jobs/j1%0A/events"),
        ("POST", "/v1/clusters/{c}%0A/schedule"),
        ("GET", "/v1/clusters/{c}%0A/decisions"),
        ("GET", "/v1/decisions/dec_1%0A"),
        ("GET", "/v1/policies/fcfs%0A"),
        ("POST", "/v1/k8s/{c}%0A/filter"),
        ("POST", "/v1/k8s/{c}%0A/prioritize"),
        ("POST", "/v1/k8s/{c}%0A/bind"),
    ],
)
async def test_path_ids_with_a_trailing_newline_are_refused_everywhere(
    api: httpx.AsyncClient, cid: str, method: str, path: str
) -> None:
    """Finding 3: every route family refuses a path id ending in ``\\n`` with a 422 naming it."""
    await _cluster(api, cid)
    r = await api.request(method, path.format(c=cid), json={})
    assert r.status_code == 422, r.text
    fields = {d["field"] for d in r.json()["error"]["details"]}
    assert any(f.startswith("path.") for f in fields), fields


async def test_openapi_requires_the_pod_uid(api: httpx.AsyncClient) -> None:
    """Finding 9 (part): the server refuses a pod without ``metadata.uid``; so does the schema."""
    schemas = (await api.get("/openapi.json")).json()["components"]["schemas"]
    meta = schemas["ObjectMeta"]
    assert "uid" in meta["required"]
    assert "default" not in meta["properties"]["uid"]
    assert "metadata" in schemas["Pod"]["required"]
    assert "Pod" in schemas["ExtenderArgs"]["required"]  # the wire names stay kube-scheduler's
    assert set(schemas["ExtenderArgs"]["properties"]) == {"Pod", "Nodes", "NodeNames"}
