"""Shared pieces of the DAG API tests: a dag cluster, DAG bodies, a simulated orchestrator and
the invariants every applied decision must keep."""

from __future__ import annotations

from typing import Any

import httpx

NOW = 1_767_225_600.0


def stage(
    stage_id: str, tasks: int, deps: tuple[str, ...] = (), cpu: float = 1, **over: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": stage_id,
        "tasks": tasks,
        "per_task": {"cpu": cpu},
        "task_duration_s": 2.0,
        "depends_on": list(deps),
    }
    body.update(over)
    return body


def join_dag(dag_id: str, submit: float = NOW) -> dict[str, Any]:
    """scan(5) and filter(3) feed join(2, at most 1 slot at once)."""
    return {
        "id": dag_id,
        "submit_time": submit,
        "stages": [
            stage("scan", 5),
            stage("filter", 3),
            stage("join", 2, ("scan", "filter"), max_parallelism=1),
        ],
    }


def chain_dag(dag_id: str, submit: float = NOW) -> dict[str, Any]:
    return {
        "id": dag_id,
        "submit_time": submit,
        "stages": [stage("a", 2), stage("b", 3, ("a",)), stage("c", 1, ("b",))],
    }


def wide_dag(dag_id: str, tasks: int = 4, submit: float = NOW) -> dict[str, Any]:
    return {"id": dag_id, "submit_time": submit, "stages": [stage("only", tasks)]}


async def make_dag_cluster(
    client: httpx.AsyncClient,
    cid: str,
    *,
    nodes: int = 2,
    cpu: float = 3,
    policy: str | None = "fair",
) -> None:
    body: dict[str, Any] = {"name": "dag test", "domain": "dag", "resources": ["cpu", "memory_gb"]}
    if policy is not None:
        body["policy"] = policy
    r = await client.put(f"/v1/clusters/{cid}", json=body)
    assert r.status_code == 201, r.text
    r = await client.put(
        f"/v1/clusters/{cid}/nodes",
        json={
            "nodes": [
                {"id": f"n{i}", "capacity": {"cpu": cpu, "memory_gb": 16}} for i in range(nodes)
            ]
        },
    )
    assert r.status_code == 200, r.text


async def all_dags(client: httpx.AsyncClient, cid: str) -> list[dict[str, Any]]:
    r = await client.get(f"/v1/clusters/{cid}/dags", params={"limit": 500})
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


async def check_invariants(
    client: httpx.AsyncClient,
    cid: str,
    decision: dict[str, Any],
    slots_per_node: int,
    *,
    dag_cap: bool = True,
) -> None:
    """After an applied decision: no node holds more slots than fit it (and its allocation is
    one slot's amount per held slot), no stage runs before its parents finished, no stage runs
    more slots than its ``max_parallelism``, every stage's counters are consistent, no grant
    exceeds its parallelism limit, and (``dag_cap``: the heuristics' limit is the DAG's cap) every
    DAG granted slots holds at most the grant's limit."""
    dags = await all_dags(client, cid)
    held: dict[str, int] = {}
    running_of: dict[str, int] = {}
    for dag in dags:
        finished = {s["id"] for s in dag["stages"] if s["state"] == "finished"}
        running_of[dag["id"]] = sum(s["running_slots"] for s in dag["stages"])
        for s in dag["stages"]:
            assert 0 <= s["finished"] <= s["launched"] <= s["tasks"], s
            assert s["running_slots"] == s["launched"] - s["finished"], s
            assert sum(p["tasks"] for p in s["placements"]) == s["running_slots"], s
            if s["launched"]:
                assert set(s["depends_on"]) <= finished, (dag["id"], s["id"], "before parents")
            if s["max_parallelism"] is not None:
                assert s["running_slots"] <= s["max_parallelism"], s
            for p in s["placements"]:
                held[p["node_id"]] = held.get(p["node_id"], 0) + p["tasks"]
    nodes = (await client.get(f"/v1/clusters/{cid}/nodes", params={"limit": 500})).json()
    for node in nodes["items"]:
        n = held.get(node["id"], 0)
        assert n <= slots_per_node, (node["id"], n)
        assert node["allocated"].get("cpu", 0.0) == float(n), node
    for alloc in decision["allocations"]:
        dag_id = alloc["job_id"].partition(":")[0]
        assert 1 <= sum(p["tasks"] for p in alloc["placements"]) <= alloc["parallelism_limit"]
        if dag_cap:
            assert running_of[dag_id] <= alloc["parallelism_limit"], (alloc, running_of[dag_id])
        stage_id = alloc["job_id"].partition(":")[2]
        dag = next(d for d in dags if d["id"] == dag_id)
        finished = {s["id"] for s in dag["stages"] if s["state"] == "finished"}
        st = next(s for s in dag["stages"] if s["id"] == stage_id)
        assert set(st["depends_on"]) <= finished, ("placed before parents finished", alloc)


async def finish_running_tasks(client: httpx.AsyncClient, cid: str, at: float) -> int:
    """Every running slot finishes its task (one event per stage); the tasks finished."""
    done = 0
    for dag in await all_dags(client, cid):
        for s in dag["stages"]:
            if s["running_slots"]:
                r = await client.post(
                    f"/v1/clusters/{cid}/jobs/{s['job_id']}/events",
                    json={"type": "task_finished", "count": s["running_slots"], "at": at},
                )
                assert r.status_code == 200, r.text
                done += s["running_slots"]
    return done
