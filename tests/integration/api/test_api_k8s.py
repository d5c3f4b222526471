"""The Kubernetes scheduler extender: filter -> prioritize -> bind on a Kairos cluster."""

from __future__ import annotations

import httpx
import pytest

from app.schemas.k8s import Pod
from app.services.k8s import parse_quantity, pod_requests, to_cluster_resources
from tests.factories import cluster_body


def _pod(uid: str, cpu: str = "2", memory: str = "4G", gpu: str | None = None) -> dict:
    requests = {"cpu": cpu, "memory": memory}
    if gpu:
        requests["nvidia.com/gpu"] = gpu
    return {
        "metadata": {"name": f"pod-{uid}", "namespace": "ml", "uid": uid},
        "spec": {
            "containers": [{"name": "main", "resources": {"requests": requests}}],
            "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "3"}}}],
        },
    }


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", 0.5), ("2", 2.0), ("1Gi", 2.0**30), ("1.5G", 1.5e9), (3, 3.0), ("1e3", 1000.0)],
)
def test_parse_quantity(text: object, value: float) -> None:
    assert parse_quantity(text) == pytest.approx(value)


def test_bad_quantity() -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity("lots")


def test_pod_requests_and_mapping() -> None:
    req = pod_requests(Pod.model_validate(_pod("u", cpu="1", memory="2G", gpu="1")))
    assert req == {"cpu": 3.0, "memory": 2e9, "nvidia.com/gpu": 1.0}  # init container dominates cpu
    mapped = to_cluster_resources(req, ["cpu", "memory_gb", "gpu"])
    assert mapped == {"cpu": 3.0, "memory_gb": 2.0, "gpu": 1.0}


async def test_filter_prioritize_bind(client: httpx.AsyncClient, cid: str) -> None:
    assert (await client.put(f"/v1/clusters/{cid}", json=cluster_body())).status_code == 201
    nodes = {
        "nodes": [
            {"id": "small", "capacity": {"cpu": 4, "memory_gb": 8}},
            {"id": "big", "capacity": {"cpu": 64, "memory_gb": 256}},
            {"id": "gone", "capacity": {"cpu": 64, "memory_gb": 256}, "state": "down"},
        ]
    }
    assert (await client.put(f"/v1/clusters/{cid}/nodes", json=nodes)).status_code == 200
    pod = _pod("uid-1", cpu="4", memory="4G")
    args = {"Pod": pod, "NodeNames": ["small", "big", "gone", "ghost"]}
    r = await client.post(f"/v1/k8s/{cid}/filter", json=args)
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["NodeNames"] == ["small", "big"]
    assert set(result["FailedNodes"]) == {"gone", "ghost"}
    assert result["Error"] == ""
    job = (await client.get(f"/v1/clusters/{cid}/jobs/uid-1")).json()
    assert job["state"] == "pending"
    assert job["per_task"] == {"cpu": 4.0, "memory_gb": 4.0}

    scores = (await client.post(f"/v1/k8s/{cid}/prioritize", json=args)).json()
    by_host = {s["Host"]: s["Score"] for s in scores}
    assert by_host["small"] > by_host["big"]  # bin-packing: fill the small node
    assert by_host["gone"] == by_host["ghost"] == 0
    assert all(0 <= s <= 10 for s in by_host.values())

    bind = {"PodName": "pod-uid-1", "PodNamespace": "ml", "PodUID": "uid-1", "Node": "small"}
    assert (await client.post(f"/v1/k8s/{cid}/bind", json=bind)).json() == {"Error": ""}
    assert (await client.post(f"/v1/k8s/{cid}/bind", json=bind)).json() == {"Error": ""}
    job = (await client.get(f"/v1/clusters/{cid}/jobs/uid-1")).json()
    assert job["state"] == "running"
    assert job["placements"] == [{"node_id": "small", "tasks": 1}]

    # the small node is now full: a second pod is filtered out of it and cannot bind there
    args2 = {"Pod": _pod("uid-2", cpu="4"), "NodeNames": ["small", "big"]}
    result = (await client.post(f"/v1/k8s/{cid}/filter", json=args2)).json()
    assert result["NodeNames"] == ["big"]
    assert "insufficient cpu" in result["FailedNodes"]["small"]
    bind2 = {**bind, "PodUID": "uid-2", "PodName": "pod-uid-2"}
    assert "insufficient" in (await client.post(f"/v1/k8s/{cid}/bind", json=bind2)).json()["Error"]
    unknown = {**bind, "PodUID": "never-filtered"}
    assert (await client.post(f"/v1/k8s/{cid}/bind", json=unknown)).json()["Error"]


async def test_bad_pods_are_422(client: httpx.AsyncClient, cid: str) -> None:
    await client.put(f"/v1/clusters/{cid}", json=cluster_body())
    no_uid = {"Pod": {"metadata": {"name": "x"}}, "NodeNames": []}
    assert (await client.post(f"/v1/k8s/{cid}/filter", json=no_uid)).status_code == 422
    bad_qty = {"Pod": _pod("u3", cpu="lots"), "NodeNames": []}
    r = await client.post(f"/v1/k8s/{cid}/filter", json=bad_qty)
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "validation_error"
    assert (await client.post("/v1/k8s/nope/filter", json={"Pod": _pod("u4")})).status_code == 404
    wrong_types = {"Pod": {"metadata": "x", "spec": {"containers": {"a": 1}}}, "NodeNames": []}
    r = await client.post(f"/v1/k8s/{cid}/filter", json=wrong_types)
    assert r.status_code == 422
    fields = {d["field"] for d in r.json()["error"]["details"]}
    assert {"body.Pod.metadata", "body.Pod.spec.containers"} <= fields
    huge = {"Pod": _pod("u5", cpu="1e30"), "NodeNames": []}
    assert (await client.post(f"/v1/k8s/{cid}/filter", json=huge)).status_code == 422
