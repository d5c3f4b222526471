"""``GET /v1/clusters/{id}/history`` (SWF export) and the tune requests that start nothing or
only fail: too little history, another tune running, a replica that stopped mid-tune."""

from __future__ import annotations

import uuid

import httpx
from fastapi import FastAPI
from sqlalchemy import select

from app.db.orm import ClusterRecord, TuneRecord
from app.db.session import Database
from app.domains.hpc.swf import parse_swf
from app.kernel.clock import epoch_now
from app.main import create_app
from app.settings import Settings
from tests.conftest import open_client
from tests.integration.api.tune_helpers import T0, audit, record, setup_cluster, workload


async def test_history_is_the_recorded_jobs_as_swf(client: httpx.AsyncClient, cid: str) -> None:
    await setup_cluster(client, cid, nodes=2, cpu=4, backfill="none")
    jobs = workload(12, seed=1, gap_s=30, max_tasks=6)
    ran = await record(client, cid, jobs)
    # one job that never ran and one that was cancelled are not history
    extra = {"id": "later", "per_task": {"cpu": 1}, "walltime_s": 9.0, "submit_time": T0}
    assert (await client.post(f"/v1/clusters/{cid}/jobs", json=extra)).status_code == 201

    r = await client.get(f"/v1/clusters/{cid}/history")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    assert r.headers["x-kairos-history-jobs"] == "12"
    lines = r.text.splitlines(keepends=True)
    assert "; Version: 2.2\n" in lines
    assert f"; UnixStartTime: {int(min(j.submit for j in jobs))}\n" in lines
    trace = parse_swf(lines)
    assert (trace.max_nodes, trace.max_procs) == (8, 8)  # 2 nodes x 4 one-cpu tasks
    order = sorted(jobs, key=lambda j: (j.submit, j.id))
    t0 = int(order[0].submit)
    assert trace.job_id.tolist() == list(range(1, 13))
    assert trace.submit_time.tolist() == [int(j.submit) - t0 for j in order]
    assert trace.run_time.tolist() == [round(ran[j.id].end - ran[j.id].start) for j in order]
    assert trace.processors.tolist() == [j.tasks for j in order]
    assert trace.request_time.tolist() == [round(j.walltime) for j in order]
    body = [line.split() for line in lines if not line.startswith(";")]
    waits = [int(f[2]) for f in body]
    assert waits == [round(ran[j.id].start - j.submit) for j in order]
    assert any(w > 0 for w in waits)  # the cluster was contended: the history has queueing
    assert {f[10] for f in body} == {"1"}  # status: completed

    since = order[5].submit
    r = await client.get(f"/v1/clusters/{cid}/history", params={"since": since, "limit": 3})
    assert r.status_code == 200
    part = parse_swf(r.text.splitlines())
    assert part.n_jobs == 3
    assert part.request_time.tolist() == [round(j.walltime) for j in order[5:8]]


async def test_history_of_a_cluster_without_jobs_and_bad_queries(
    client: httpx.AsyncClient, cid: str
) -> None:
    await setup_cluster(client, cid, nodes=1, cpu=2)
    r = await client.get(f"/v1/clusters/{cid}/history")
    assert r.status_code == 200
    assert parse_swf(r.text.splitlines()).n_jobs == 0
    r = await client.get(f"/v1/clusters/{cid}/history", params={"limit": 0})
    assert r.status_code == 422
    assert r.json()["error"]["details"][0]["field"] == "query.limit"
    assert (await client.get("/v1/clusters/nope-x/history")).status_code == 404


async def test_too_little_history_is_refused_and_changes_nothing(
    client: httpx.AsyncClient, cid: str
) -> None:
    await setup_cluster(client, cid, nodes=2, cpu=4, backfill="none")
    await record(client, cid, workload(10, seed=2, gap_s=30, max_tasks=4))
    before = (await client.get(f"/v1/clusters/{cid}")).json()

    r = await client.post(f"/v1/clusters/{cid}/tune", json={"window_length": 8})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "too_little_history"
    assert "10 finished jobs" in error["message"]
    assert "16" in error["message"]
    assert error["details"][0]["field"] == "body.window_length"
    r = await client.post(f"/v1/clusters/{cid}/tune", json={"window_length": 8, "min_history": 20})
    assert r.status_code == 422
    assert r.json()["error"]["details"][0]["field"] == "body.min_history"
    for bad in ({"time_budget_s": 601}, {"time_budget_s": 0}, {"window_length": 4}):
        r = await client.post(f"/v1/clusters/{cid}/tune", json=bad)
        assert r.status_code == 422, bad

    after = (await client.get(f"/v1/clusters/{cid}")).json()
    assert (after["policy"], after["shadow_policy"]) == (before["policy"], before["shadow_policy"])
    assert (await client.get(f"/v1/clusters/{cid}/tunes")).json()["items"] == []
    assert await audit(client, cid) == []


async def _insert_tune(app: FastAPI, cid: str, *, state: str, lease_until: float) -> str:
    database: Database = app.state.database
    tune_id = f"tune_{uuid.uuid4().hex}"
    async with database.transaction(write=True) as session:
        cluster = (
            await session.execute(select(ClusterRecord).where(ClusterRecord.id == cid))
        ).scalar_one()
        session.add(
            TuneRecord(
                id=tune_id,
                tenant=cluster.tenant,
                cluster_pk=cluster.pk,
                cluster_id=cid,
                state=state,
                phase="none",
                params={"backfill": "none", "time_budget_s": 60.0},
                baseline_policy=cluster.policy,
                owner="replica-that-stopped",
                lease_until=lease_until,
                started_at=epoch_now() - 100.0,
            )
        )
    return tune_id


async def test_a_tune_whose_replica_stopped_fails_and_cannot_be_promoted(
    app: FastAPI, client: httpx.AsyncClient, cid: str
) -> None:
    await setup_cluster(client, cid, nodes=1, cpu=2, backfill="none")
    stale = await _insert_tune(app, cid, state="running", lease_until=epoch_now() - 1.0)
    live = await _insert_tune(app, cid, state="running", lease_until=epoch_now() + 600.0)

    r = await client.get(f"/v1/clusters/{cid}/tunes/{stale}")
    assert r.status_code == 200
    body = r.json()
    assert body["state"] == "failed"
    assert body["error"]["code"] == "lease_expired"
    assert "replica-that-stopped" in body["error"]["message"]
    listed = (await client.get(f"/v1/clusters/{cid}/tunes")).json()["items"]
    assert [t["id"] for t in listed] == [live, stale]
    assert [t["state"] for t in listed] == ["running", "failed"]

    r = await client.post(f"/v1/clusters/{cid}/tunes/{live}/promote", json={"force": True})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "tune_not_finished"
    r = await client.post(f"/v1/clusters/{cid}/tunes/{stale}/promote", json={"force": True})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "tune_failed"
    r = await client.post(f"/v1/clusters/{cid}/tune", json={})
    assert r.status_code == 409  # the live one still holds the cluster
    assert r.json()["error"]["code"] == "tune_in_progress"

    cluster = (await client.get(f"/v1/clusters/{cid}")).json()
    assert (cluster["policy"], cluster["shadow_policy"]) == ("hpc-kernel-none", None)
    events = await audit(client, cid)
    assert [(e["action"], e["details"].get("code")) for e in events] == [
        ("tune.promote_refused", "tune_failed"),
        ("tune.promote_refused", "tune_not_finished"),
        ("tune.fail", "lease_expired"),
    ]
    assert (await client.get(f"/v1/clusters/{cid}/tunes/tune_{'0' * 32}")).status_code == 404

    page = await client.get(f"/ui/clusters/{cid}")
    assert page.status_code == 200
    assert 'data-testid="tunes"' in page.text
    assert f'data-tune="{stale}"' in page.text
    assert f'data-tune="{live}"' in page.text
    assert "lease_expired" in page.text


async def test_another_tenant_sees_neither_the_history_nor_the_tunes(
    settings: Settings, cid: str
) -> None:
    run = uuid.uuid4().hex[:8]
    keyed = settings.model_copy(update={"API_KEYS": f"acme-{run}:kA,globex-{run}:kB"})
    a, b = {"Authorization": "Bearer kA"}, {"Authorization": "Bearer kB"}
    async for api in open_client(create_app(keyed)):
        api.headers.update(a)
        await setup_cluster(api, cid, nodes=1, cpu=2)
        assert (await api.get(f"/v1/clusters/{cid}/history")).status_code == 200
        assert (await api.get(f"/v1/clusters/{cid}/tunes")).status_code == 200
        api.headers.update(b)
        for path in ("history", "tunes", f"tunes/tune_{'0' * 32}"):
            r = await api.get(f"/v1/clusters/{cid}/{path}")
            assert r.status_code == 404, (path, r.text)
        r = await api.post(f"/v1/clusters/{cid}/tune", json={"window_length": 8})
        assert r.status_code == 404
        r = await api.post(f"/v1/clusters/{cid}/tunes/tune_{'0' * 32}/promote", json={})
        assert r.status_code == 404
        api.headers.pop("Authorization")
        assert (await api.get(f"/v1/clusters/{cid}/tunes")).status_code == 401
