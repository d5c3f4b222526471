"""Run-time estimates through HTTP: optional on gpu clusters, required on hpc clusters.

A gpu job may be submitted without ``walltime_s``: it is stored and read back with
``walltime_s: null``, sent to the domain as ``estimate_s: None`` (also in the stored decision's
input, which replays through ``/v1/decide``), and decided by every policy: the default ones never
read it, ``sjf``/``srtf``/``srsf`` order estimate-less jobs after the estimated ones, ``optimus``
sizes them on unit work. On an hpc cluster a job without ``walltime_s`` is a 422 naming the
field, and a batch holding one stores nothing.
"""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from kairos_client import AsyncClient

from tests.factories import job_spec, make_cluster
from tests.integration.api.test_gpu_rounds import (
    T0,
    gpu_cluster,
    jobs,
    round_checked,
    started,
)


async def submit(
    client: httpx.AsyncClient, cid: str, job_id: str, gpus: int, at: float, **extra: Any
) -> dict[str, Any]:
    """A GPU job with no ``walltime_s`` unless ``extra`` gives one."""
    body = {"id": job_id, "tasks": gpus, "per_task": {"gpu": 1}, "submit_time": at, **extra}
    r = await client.post(f"/v1/clusters/{cid}/jobs", json=body)
    assert r.status_code == 201, r.text
    job: dict[str, Any] = r.json()
    return job


async def replays(client: httpx.AsyncClient, d: dict[str, Any]) -> dict[str, Any]:
    """The stored input of decision ``d`` decided again through ``/v1/decide`` gives ``d``;
    returns the input."""
    detail = (await client.get(f"/v1/decisions/{d['id']}")).json()
    again = await client.post("/v1/decide", json=detail["input"])
    assert again.status_code == 200, again.text
    for key in ("allocations", "resizes", "preemptions", "policy", "fallback", "queue_length"):
        assert again.json()[key] == d[key], key
    stored: dict[str, Any] = detail["input"]
    return stored


async def test_a_gpu_job_without_an_estimate_is_stored_and_read_without_one(
    client: httpx.AsyncClient, cid: str
) -> None:
    await gpu_cluster(client, cid, policy="tiresias-2dlas")
    job = await submit(client, cid, "a", 4, T0)
    assert job["walltime_s"] is None
    assert (await client.get(f"/v1/clusters/{cid}/jobs/a")).json()["walltime_s"] is None
    estimated = await submit(client, cid, "b", 2, T0 + 1, walltime_s=600.0)
    assert estimated["walltime_s"] == 600.0

    # resubmitting the same body is idempotent; one that adds an estimate is another job
    url = f"/v1/clusters/{cid}/jobs"
    same = {"id": "a", "tasks": 4, "per_task": {"gpu": 1}, "submit_time": T0}
    r = await client.post(url, json=same)
    assert r.status_code == 200, r.text
    r = await client.post(url, json={**same, "walltime_s": 60.0})
    assert r.status_code == 409, r.text
    assert [d["field"] for d in r.json()["error"]["details"]] == ["body.id", "body.walltime_s"]

    d, after = await round_checked(client, cid, T0 + 5)
    assert sorted(started(d)) == ["a", "b"]
    assert d["fallback"]["used"] is False
    assert after["a"]["walltime_s"] is None
    stored = await replays(client, d)
    estimates = {j["id"]: j["estimate_s"] for j in stored["jobs"]}
    assert estimates == {"a": None, "b": 600.0}


async def test_estimate_aware_policies_order_jobs_without_an_estimate_last(
    client: httpx.AsyncClient, cid: str
) -> None:
    """Two nodes of 4 GPUs, three 4-GPU jobs: the estimate-less one arrived first."""
    await gpu_cluster(client, cid, policy="sjf")
    await submit(client, cid, "unknown", 4, T0)
    await submit(client, cid, "long", 4, T0 + 1, walltime_s=7200.0)
    await submit(client, cid, "short", 4, T0 + 2, walltime_s=60.0)
    d, after = await round_checked(client, cid, T0 + 5)
    assert sorted(started(d)) == ["long", "short"]
    assert d["explain"]["jobs"]["unknown"].startswith("waiting")
    assert d["explain"]["jobs"]["unknown"].endswith("no run-time estimate, so sjf orders it last")
    assert "estimate" not in d["explain"]["jobs"]["long"]
    assert after["unknown"]["state"] == "pending"
    await replays(client, d)

    # srtf is preemptive: a new estimated job displaces the longest remaining, never the
    # estimate-less job's turn
    await submit(client, cid, "tiny", 4, T0 + 100, walltime_s=10.0)
    d, after = await round_checked(client, cid, T0 + 110, policy="srtf")
    assert d["policy"]["name"] == "srtf"
    assert d["preemptions"] == ["long"]
    assert started(d) == ["tiny"]
    assert after["unknown"]["state"] == "pending"
    await replays(client, d)

    # srsf likewise; once the estimated jobs are done the estimate-less one runs
    for job_id in ("short", "tiny"):
        r = await client.post(
            f"/v1/clusters/{cid}/jobs/{job_id}/events", json={"type": "finished", "at": T0 + 200}
        )
        assert r.status_code == 200, r.text
    d, after = await round_checked(client, cid, T0 + 210, policy="srsf")
    assert sorted(started(d)) == ["long", "unknown"]
    assert after["unknown"]["state"] == "running"
    await replays(client, d)


async def test_optimus_sizes_elastic_jobs_without_estimates(
    client: httpx.AsyncClient, cid: str
) -> None:
    await gpu_cluster(client, cid, policy="optimus")
    await submit(client, cid, "e1", 1, T0, min_tasks=1, max_tasks=8)
    await submit(client, cid, "e2", 2, T0 + 1, min_tasks=2, max_tasks=6)
    await submit(client, cid, "r", 2, T0 + 2)
    d, after = await round_checked(client, cid, T0 + 5)
    assert sorted(started(d)) == ["e1", "e2", "r"]
    assert d["fallback"]["used"] is False
    held = {j: sum(p["tasks"] for p in after[j]["placements"]) for j in ("e1", "e2", "r")}
    assert held["r"] == 2
    assert sum(held.values()) == 8  # every GPU handed out: gains are positive on unit work
    await replays(client, d)


@pytest.mark.parametrize("policy", [None, "tiresias-2dlas", "srsf"])
async def test_many_rounds_of_jobs_without_estimates(
    client: httpx.AsyncClient, cid: str, policy: str | None
) -> None:
    """Arrivals, ends, preemptions over 30 rounds, half the jobs without an estimate; the
    invariants after every round; the last round replays. ``None``: the cluster's default
    policy (the shipped ``gpu-v1`` model)."""
    await gpu_cluster(client, cid, **({} if policy is None else {"policy": policy}))
    rng = random.Random(20)
    now = T0
    made = 0
    d: dict[str, Any] = {}
    for _ in range(30):
        for _ in range(rng.randint(0, 3)):
            extra: dict[str, Any] = {}
            if rng.random() < 0.5:
                extra["walltime_s"] = float(rng.choice([60, 600, 3600]))
            if rng.random() < 0.3:
                extra.update(min_tasks=1, max_tasks=4)
            await submit(client, cid, f"j{made}", rng.choice([1, 2, 4]), now, **extra)
            made += 1
        now += 60.0
        d, after = await round_checked(client, cid, now)
        assert d["fallback"]["used"] is False, d["fallback"]
        running = [j for j, v in after.items() if v["state"] == "running"]
        for job_id in running:
            if rng.random() < 0.2:
                r = await client.post(
                    f"/v1/clusters/{cid}/jobs/{job_id}/events",
                    json={"type": "finished", "at": now + 1},
                )
                assert r.status_code == 200, r.text
    final = await jobs(client, cid)
    ran = [j for j in final.values() if j["state"] in ("running", "finished")]
    assert any(j["walltime_s"] is None for j in ran)
    assert any(j["walltime_s"] is not None for j in ran)
    stored = await replays(client, d)
    assert stored["jobs"]
    for j in stored["jobs"]:
        assert j["estimate_s"] == final[j["id"]]["walltime_s"], j["id"]


async def test_hpc_job_without_walltime_is_422_naming_it_and_not_stored(
    client: httpx.AsyncClient, cid: str
) -> None:
    await make_cluster(client, cid)
    url = f"/v1/clusters/{cid}/jobs"
    bare = {k: v for k, v in job_spec("a").items() if k != "walltime_s"}
    for body in (bare, {**bare, "walltime_s": None}):
        r = await client.post(url, json=body)
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["code"] == "validation_error"
        (detail,) = error["details"]
        assert detail["field"] == "body.walltime_s"
        assert detail["type"] == "missing"
        assert "required on hpc clusters" in detail["message"]
    assert (await client.get(f"{url}/a")).status_code == 404
    assert (await client.get(url)).json()["items"] == []


async def test_hpc_batch_with_a_job_without_walltime_stores_nothing(
    client: httpx.AsyncClient, cid: str
) -> None:
    await make_cluster(client, cid)
    url = f"/v1/clusters/{cid}/jobs"
    batch = [
        job_spec("a"),
        {k: v for k, v in job_spec("b").items() if k != "walltime_s"},
        job_spec("c"),
        job_spec("d", walltime_s=None),
    ]
    r = await client.post(f"{url}/batch", json={"jobs": batch})
    assert r.status_code == 422, r.text
    fields = [d["field"] for d in r.json()["error"]["details"]]
    assert fields == ["body.jobs[1].walltime_s", "body.jobs[3].walltime_s"]
    assert (await client.get(url)).json()["items"] == []
    # the good jobs alone go through: the refusal was about the two without a walltime
    r = await client.post(f"{url}/batch", json={"jobs": [batch[0], batch[2]]})
    assert r.status_code == 201, r.text
    assert [j["walltime_s"] for j in r.json()["jobs"]] == [600.0, 600.0]


async def test_hpc_snapshot_job_without_walltime_is_422(client: httpx.AsyncClient) -> None:
    body = {
        "now": T0,
        "nodes": [{"id": "n1", "capacity": {"cpu": 8}}],
        "pending": [{"id": "p", "per_task": {"cpu": 1}}],
        "running": [
            {
                "job": {"id": "r", "per_task": {"cpu": 1}},
                "placements": [{"node_id": "n1", "tasks": 1}],
                "start_time": T0 - 10,
            }
        ],
    }
    r = await client.post("/v1/decide", json=body)
    assert r.status_code == 422, r.text
    fields = sorted(d["field"] for d in r.json()["error"]["details"])
    assert fields == ["body.pending[0].walltime_s", "body.running[0].job.walltime_s"]


async def test_sdk_submits_gpu_jobs_without_an_estimate(app: FastAPI, cid: str) -> None:
    async with app.router.lifespan_context(app):
        sdk = AsyncClient(
            base_url="http://kairos.test", transport=httpx.ASGITransport(app=app), max_retries=0
        )
        async with sdk:
            await sdk.clusters.upsert(cid, resources=["gpu"], domain="gpu", policy="las")
            await sdk.nodes.upsert_many(cid, [{"id": "n0", "capacity": {"gpu": 4}}])
            job = await sdk.jobs.submit(cid, id="a", tasks=2, per_task={"gpu": 1}, submit_time=T0)
            assert job.walltime_s is None
            many = await sdk.jobs.submit_many(
                cid,
                [
                    {"id": "b", "tasks": 2, "per_task": {"gpu": 1}, "submit_time": T0 + 1},
                    {"id": "c", "per_task": {"gpu": 1}, "walltime_s": 60.0, "submit_time": T0},
                ],
            )
            assert [j.walltime_s for j in many] == [None, 60.0]
            d = await sdk.clusters.schedule(cid, now=T0 + 5)
            assert sorted(d.allocated_job_ids()) == ["a", "c"]
            assert (await sdk.jobs.retrieve(cid, "a")).walltime_s is None
