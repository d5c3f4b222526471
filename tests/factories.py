"""Request bodies and records for tests, with sensible defaults and keyword overrides."""

from __future__ import annotations

from typing import Any


def cluster_body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "test cluster", "resources": ["cpu", "memory_gb", "gpu"]}
    body.update(over)
    return body


def node_body(
    cpu: float = 32, memory_gb: float = 128, gpu: float = 0, **over: Any
) -> dict[str, Any]:
    capacity = {"cpu": cpu, "memory_gb": memory_gb}
    if gpu:
        capacity["gpu"] = gpu
    body: dict[str, Any] = {"capacity": capacity}
    body.update(over)
    return body


def nodes_body(count: int, prefix: str = "n", **kw: Any) -> dict[str, Any]:
    return {"nodes": [{"id": f"{prefix}{i}", **node_body(**kw)} for i in range(count)]}


def job_spec(
    job_id: str, cpu: float = 4, tasks: int = 1, walltime_s: float = 600, **over: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": job_id,
        "tasks": tasks,
        "per_task": {"cpu": cpu},
        "walltime_s": walltime_s,
        "submit_time": 1_700_000_000.0,
    }
    body.update(over)
    return body


async def make_cluster(
    client: Any, cid: str, nodes: int = 2, cluster: dict[str, Any] | None = None, **node_kw: Any
) -> None:
    r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(**(cluster or {})))
    assert r.status_code == 201, r.text
    if nodes:
        r = await client.put(f"/v1/clusters/{cid}/nodes", json=nodes_body(nodes, **node_kw))
        assert r.status_code == 200, r.text
