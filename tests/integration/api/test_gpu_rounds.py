"""A gpu cluster through HTTP: jobs through the jobs endpoints, rounds through
``POST .../schedule`` deciding with app.domains.gpu and applying preemptions, starts and resizes
atomically with the stored decision; attained service tracked by Kairos across rounds and kept
across preemption; the invariants checked after every round; a stored decision replayed."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings
from tests.conftest import open_client
from tests.factories import cluster_body

T0 = 1_767_225_600.0


async def gpu_cluster(
    client: httpx.AsyncClient, cid: str, *, nodes: int = 2, gpus: int = 4, **extra: Any
) -> None:
    body = cluster_body(domain="gpu", resources=["gpu"], **extra)
    r = await client.put(f"/v1/clusters/{cid}", json=body)
    assert r.status_code == 201, r.text
    r = await client.put(
        f"/v1/clusters/{cid}/nodes",
        json={"nodes": [{"id": f"n{i}", "capacity": {"gpu": gpus}} for i in range(nodes)]},
    )
    assert r.status_code == 200, r.text


async def submit(
    client: httpx.AsyncClient, cid: str, job_id: str, gpus: int, at: float, **extra: Any
) -> dict[str, Any]:
    body = {"id": job_id, "tasks": gpus, "per_task": {"gpu": 1}, "walltime_s": 3600.0}
    body.update(submit_time=at, **extra)
    r = await client.post(f"/v1/clusters/{cid}/jobs", json=body)
    assert r.status_code == 201, r.text
    job: dict[str, Any] = r.json()
    return job


async def jobs(client: httpx.AsyncClient, cid: str) -> dict[str, dict[str, Any]]:
    r = await client.get(f"/v1/clusters/{cid}/jobs", params={"limit": 500})
    assert r.status_code == 200, r.text
    return {j["id"]: j for j in r.json()["items"]}


async def check_invariants(
    client: httpx.AsyncClient, cid: str, before: dict[str, dict[str, Any]], d: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """No GPU over-allocated (nodes' allocations = what running jobs hold, within capacity),
    gangs all-or-nothing, elastic jobs within min..max, only running jobs preempted or
    resized, only pending ones allocated; returns the jobs after the round."""
    after = await jobs(client, cid)
    for jid in d["preemptions"]:
        assert before[jid]["state"] == "running", jid
        assert after[jid]["state"] == "pending", jid
    for a in d["resizes"]:
        assert before[a["job_id"]]["state"] == "running"
    for a in d["allocations"]:
        assert before[a["job_id"]]["state"] == "pending"
        assert after[a["job_id"]]["state"] == "running"
    named = [a["job_id"] for a in d["allocations"] + d["resizes"]] + d["preemptions"]
    assert len(named) == len(set(named))
    held: dict[str, int] = {}
    for j in after.values():
        if j["state"] != "running":
            assert j["placements"] == [] or j["state"] in ("finished", "failed")
            continue
        size = sum(p["tasks"] for p in j["placements"])
        low = j["min_tasks"] or j["tasks"]
        high = j["max_tasks"] or max(j["tasks"], low)
        assert low <= size <= high, (j["id"], size)
        for p in j["placements"]:
            held[p["node_id"]] = held.get(p["node_id"], 0) + p["tasks"]
    nodes = (await client.get(f"/v1/clusters/{cid}/nodes")).json()["items"]
    for n in nodes:
        used = n["allocated"].get("gpu", 0.0)
        assert used == held.get(n["id"], 0), n
        assert used <= n["capacity"]["gpu"], n
    return after


async def schedule(client: httpx.AsyncClient, cid: str, now: float, **extra: Any) -> dict[str, Any]:
    r = await client.post(f"/v1/clusters/{cid}/schedule", json={"now": now, **extra})
    assert r.status_code == 200, r.text
    decision: dict[str, Any] = r.json()
    return decision


async def round_checked(
    client: httpx.AsyncClient, cid: str, now: float, **extra: Any
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    before = await jobs(client, cid)
    d = await schedule(client, cid, now, explain=True, **extra)
    return d, await check_invariants(client, cid, before, d)


def started(d: dict[str, Any]) -> list[str]:
    return [a["job_id"] for a in d["allocations"]]


async def test_2dlas_demotes_long_jobs_and_service_survives_preemption(
    client: httpx.AsyncClient, cid: str
) -> None:
    await gpu_cluster(client, cid, policy="tiresias-2dlas")
    await submit(client, cid, "a", 4, T0)
    await submit(client, cid, "b", 4, T0 + 1)
    d, after = await round_checked(client, cid, T0 + 10)
    assert sorted(started(d)) == ["a", "b"]
    assert d["explain"]["jobs"]["a"].startswith("admitted")
    assert after["a"]["service"] == {
        "attained_gpu_s": 0.0,
        "executed_s": 0.0,
        "starts": 1,
        "preemptions": 0,
        "restart_left_s": 30.0,
        "accounted_at": T0 + 10,
    }

    # 1,000 s later both hold 4,000 GPU-s (above the first threshold, 3,250): a new job in the
    # first queue goes first, the later of the two demoted jobs is preempted
    await submit(client, cid, "c", 4, T0 + 1000)
    d, after = await round_checked(client, cid, T0 + 1010)
    assert d["preemptions"] == ["b"]
    assert started(d) == ["c"]
    assert d["explain"]["jobs"]["b"].startswith("preempted")
    assert d["explain"]["jobs"]["a"].startswith("kept")
    b = after["b"]["service"]
    assert (b["attained_gpu_s"], b["executed_s"], b["starts"], b["preemptions"]) == (
        4000.0,
        1000.0,
        1,
        1,
    )
    assert after["a"]["service"]["attained_gpu_s"] == 4000.0

    # "a" passes the second threshold (8,000 > 7,200): "b" (4,000, waiting) comes back ahead of
    # it; "b" kept its service while pending (nothing accrued) and starts again
    d, after = await round_checked(client, cid, T0 + 2010)
    assert d["preemptions"] == ["a"]
    assert started(d) == ["b"]
    assert after["b"]["service"]["attained_gpu_s"] == 4000.0
    assert after["b"]["service"]["starts"] == 2
    assert after["b"]["service"]["restart_left_s"] == 30.0
    assert after["a"]["service"]["attained_gpu_s"] == 8000.0
    assert after["a"]["service"]["preemptions"] == 1
    assert after["c"]["service"]["attained_gpu_s"] == 4000.0
    assert after["c"]["service"]["restart_left_s"] == 0.0

    # a job that finishes is accounted to its end
    r = await client.post(
        f"/v1/clusters/{cid}/jobs/c/events", json={"type": "finished", "at": T0 + 2110}
    )
    assert r.status_code == 200, r.text
    c = (await client.get(f"/v1/clusters/{cid}/jobs/c")).json()["service"]
    assert (c["attained_gpu_s"], c["executed_s"]) == (4400.0, 1100.0)
    d, _ = await round_checked(client, cid, T0 + 2120)
    assert started(d) == ["a"]


async def test_stored_round_replays_through_decide(client: httpx.AsyncClient, cid: str) -> None:
    await gpu_cluster(client, cid, policy="las")
    await submit(client, cid, "a", 4, T0)
    await submit(client, cid, "b", 8, T0 + 1)
    await round_checked(client, cid, T0 + 5)
    await submit(client, cid, "c", 2, T0 + 100)
    d, _ = await round_checked(client, cid, T0 + 200)
    detail = (await client.get(f"/v1/decisions/{d['id']}")).json()
    assert detail["input"]["domain"] == "gpu"
    assert {j["id"] for j in detail["input"]["jobs"]} == {"a", "b", "c"}
    again = await client.post("/v1/decide", json=detail["input"])
    assert again.status_code == 200, again.text
    for key in ("allocations", "resizes", "preemptions", "policy", "fallback", "queue_length"):
        assert again.json()[key] == d[key], key


async def test_elastic_job_is_resized_within_its_bounds(
    client: httpx.AsyncClient, cid: str
) -> None:
    await gpu_cluster(client, cid, policy="optimus", gpu={"restart_cost_s": 10})
    e = await submit(client, cid, "e", 2, T0, min_tasks=2, max_tasks=8)
    assert (e["min_tasks"], e["max_tasks"]) == (2, 8)
    d, after = await round_checked(client, cid, T0 + 1)
    assert started(d) == ["e"]
    assert sum(p["tasks"] for p in after["e"]["placements"]) == 8
    await submit(client, cid, "r", 4, T0 + 50)
    d, after = await round_checked(client, cid, T0 + 60)
    assert started(d) == ["r"]
    assert [a["job_id"] for a in d["resizes"]] == ["e"]
    assert sum(p["tasks"] for p in after["e"]["placements"]) == 4
    assert after["e"]["decision_id"] == d["id"]
    assert d["explain"]["jobs"]["e"].startswith("resized")
    s = after["e"]["service"]
    assert (s["attained_gpu_s"], s["starts"], s["preemptions"]) == (8 * 59.0, 1, 0)


async def test_dry_run_changes_nothing(client: httpx.AsyncClient, cid: str) -> None:
    await gpu_cluster(client, cid, policy="fifo")
    await submit(client, cid, "a", 4, T0)
    d = await schedule(client, cid, T0 + 1, dry_run=True)
    assert started(d) == ["a"]
    assert d["dry_run"]
    a = (await jobs(client, cid))["a"]
    assert a["state"] == "pending"
    assert a["service"]["starts"] == 0


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_concurrent_rounds_never_over_allocate(
    client: httpx.AsyncClient, settings: Settings, cid: str
) -> None:
    """16 rounds at once from 4 service instances on one PostgreSQL database: they run one at
    a time (the cluster lock), so the decision log, applied in order from the state before,
    never over-allocates a GPU and ends in the state the cluster is in."""
    await gpu_cluster(client, cid, nodes=3, gpus=4, policy="las")
    for i in range(12):
        await submit(client, cid, f"j{i}", 1 + i % 4, T0 + i)
    before = await jobs(client, cid)
    async with contextlib.AsyncExitStack() as stack:
        others = [
            await stack.enter_async_context(_instance(create_app(settings))) for _ in range(3)
        ]
        apps = [client, *others]
        answers = await asyncio.gather(
            *(
                apps[k % 4].post(f"/v1/clusters/{cid}/schedule", json={"now": T0 + 100 * (k + 1)})
                for k in range(16)
            )
        )
    assert [r.status_code for r in answers] == [200] * 16
    log = (await client.get(f"/v1/clusters/{cid}/decisions", params={"limit": 50})).json()
    decisions = list(reversed(log["items"]))  # oldest first: the order they were applied in
    assert len(decisions) == 16
    held: dict[str, list[dict[str, Any]]] = {j: [] for j in before}  # job -> placements
    for d in decisions:
        for jid in d["preemptions"]:
            assert held[jid], (d["id"], jid)
            held[jid] = []
        for a in d["allocations"]:
            assert not held[a["job_id"]], (d["id"], a["job_id"])
            held[a["job_id"]] = a["placements"]
        use: dict[str, int] = {}
        for ps in held.values():
            for p in ps:
                use[p["node_id"]] = use.get(p["node_id"], 0) + p["tasks"]
        assert all(v <= 4 for v in use.values()), (d["id"], use)
    assert any(d["preemptions"] for d in decisions)  # least attained first: jobs take turns
    nothing: dict[str, list[Any]] = {"allocations": [], "resizes": [], "preemptions": []}
    after = await check_invariants(client, cid, before, nothing)
    assert {j: job["placements"] for j, job in after.items()} == held


@contextlib.asynccontextmanager
async def _instance(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async for c in open_client(app):
        yield c


@pytest.mark.parametrize(
    ("domain", "job", "field"),
    [
        ("hpc", {"tasks": 2, "per_task": {"gpu": 1}, "min_tasks": 1}, "body.min_tasks"),
        ("gpu", {"tasks": 4, "per_task": {"gpu": 1}, "max_tasks": 2}, "body.max_tasks"),
        ("gpu", {"tasks": 16, "per_task": {"gpu": 1}}, "body.tasks"),
        (
            "gpu",
            {"tasks": 1, "per_task": {"gpu": 1}, "min_tasks": 9, "max_tasks": 9},
            "body.min_tasks",
        ),
        ("gpu", {"tasks": 2, "per_task": {"gpu": 2}}, "body.per_task"),
        ("gpu", {"tasks": 0, "per_task": {"gpu": 1}}, "body.tasks"),
    ],
)
async def test_bad_gpu_jobs_are_422_naming_the_field(
    client: httpx.AsyncClient, cid: str, domain: str, job: dict[str, Any], field: str
) -> None:
    if domain == "gpu":
        await gpu_cluster(client, cid)
    else:
        r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(resources=["gpu"]))
        assert r.status_code == 201
        await client.put(f"/v1/clusters/{cid}/nodes/n1", json={"capacity": {"gpu": 4}})
    r = await client.post(f"/v1/clusters/{cid}/jobs", json={"id": "j", "walltime_s": 60.0, **job})
    assert r.status_code == 422, r.text
    assert field in [d["field"] for d in r.json()["error"]["details"]]


async def test_gpu_settings_on_a_non_gpu_cluster_are_422(
    client: httpx.AsyncClient, cid: str
) -> None:
    r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(gpu={"restart_cost_s": 5}))
    assert r.status_code == 422
    assert r.json()["error"]["details"][0]["field"] == "body.gpu"
    r = await client.put(
        f"/v1/clusters/{cid}",
        json=cluster_body(domain="gpu", gpu={"las_thresholds_gpu_s": [10, 5]}),
    )
    assert r.status_code == 422
    assert r.json()["error"]["details"][0]["field"].startswith("body.gpu.las_thresholds_gpu_s")


async def test_gpu_cluster_reads_its_settings(client: httpx.AsyncClient, cid: str) -> None:
    await gpu_cluster(client, cid)
    got = (await client.get(f"/v1/clusters/{cid}")).json()
    assert got["gpu"] == {
        "restart_cost_s": 30.0,
        "las_thresholds_gpu_s": [3250.0, 7200.0],
        "placement": "consolidate",
    }
    assert got["fallback"] == "tiresias-2dlas"


async def test_unknown_round_policy_is_422(client: httpx.AsyncClient, cid: str) -> None:
    await gpu_cluster(client, cid)
    r = await client.post(f"/v1/clusters/{cid}/schedule", json={"policy": "f1"})
    assert r.status_code == 422
    assert r.json()["error"]["details"][0]["field"] == "body.policy"


async def test_a_new_gpu_cluster_is_decided_by_the_shipped_gpu_model(
    client: httpx.AsyncClient, cid: str
) -> None:
    await gpu_cluster(client, cid)
    assert (await client.get(f"/v1/clusters/{cid}")).json()["policy"] == "gpu-v1"
    await submit(client, cid, "a", 4, T0)
    await submit(client, cid, "b", 8, T0 + 1)
    d, after = await round_checked(client, cid, T0 + 5)
    assert (d["policy"]["name"], d["policy"]["kind"]) == ("gpu-v1", "onnx")
    assert d["fallback"] == {"used": False, "reason": None}
    assert set(d["explain"]["jobs"]) == {"a", "b"}
    assert sum(j["state"] == "running" for j in after.values()) == len(d["allocations"]) >= 1


@pytest.mark.parametrize("policy", ["las", "optimus"])
async def test_many_rounds_account_service_from_the_decisions(
    client: httpx.AsyncClient, cid: str, policy: str
) -> None:
    """Arrivals, ends, preemptions (las) and resizes (optimus) over many rounds: after every
    round the invariants hold and every job's attained service is what the decisions gave it
    (GPUs held after a round x the time to the next), whatever happened to it in between."""
    rng = random.Random(7)
    await gpu_cluster(client, cid, nodes=3, gpus=4, policy=policy)
    expected: dict[str, float] = {}
    held: dict[str, int] = {}
    now, n = T0, 0
    saw = {"preemptions": 0, "resizes": 0, "ends": 0}
    for _ in range(8):
        for _ in range(rng.randrange(3)):
            low = rng.choice([1, 2, 4])
            extra = {"max_tasks": low * 2} if rng.random() < 0.4 else {}
            await submit(client, cid, f"j{n}", low, now - 1, **extra)
            expected[f"j{n}"] = 0.0
            n += 1
        running = [j for j, g in held.items() if g]
        if running and rng.random() < 0.5:
            ended = rng.choice(running)
            event = {"type": "finished", "at": now}
            r = await client.post(f"/v1/clusters/{cid}/jobs/{ended}/events", json=event)
            assert r.status_code == 200, r.text
            held.pop(ended)
            saw["ends"] += 1
        d, after = await round_checked(client, cid, now)
        saw["preemptions"] += len(d["preemptions"])
        saw["resizes"] += len(d["resizes"])
        for jid, job in after.items():
            assert job["service"]["attained_gpu_s"] == pytest.approx(expected[jid]), jid
        held = {
            jid: sum(p["tasks"] for p in job["placements"])
            for jid, job in after.items()
            if job["state"] == "running"
        }
        dt = rng.choice([200.0, 600.0, 1500.0])
        for jid, g in held.items():
            expected[jid] += g * dt
        now += dt
    assert saw["ends"] > 0
    assert saw["preemptions" if policy == "las" else "resizes"] > 0


async def test_a_repeated_round_request_is_409_and_applies_once(
    client: httpx.AsyncClient, cid: str
) -> None:
    await gpu_cluster(client, cid, policy="las")
    await submit(client, cid, "a", 4, T0)
    headers = {"X-Request-ID": f"round-{cid}"}
    body = {"now": T0 + 1}
    first = await client.post(f"/v1/clusters/{cid}/schedule", json=body, headers=headers)
    assert first.status_code == 200, first.text
    await submit(client, cid, "b", 4, T0 + 2)
    again = await client.post(f"/v1/clusters/{cid}/schedule", json=body, headers=headers)
    assert again.status_code == 409
    after = await jobs(client, cid)
    assert (after["a"]["state"], after["b"]["state"]) == ("running", "pending")
    assert after["a"]["service"]["starts"] == 1
    # a cluster with tracked service deletes with its jobs
    assert (await client.delete(f"/v1/clusters/{cid}")).status_code == 204
    assert (await client.get(f"/v1/clusters/{cid}")).status_code == 404
