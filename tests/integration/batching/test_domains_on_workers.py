"""Every domain's decision goes through the one pipeline: with Redis, the GPU and DAG rounds of
``kairos serve`` are decided by a ``kairos worker`` (subprocesses, Postgres, our own
redis-server), with the shipped learned policies, and answered, stored and replayed as in the
embedded default; a DAG round's explanation and shadow policy travel back over the wire."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest
import redis

from app.schemas.dag import DAG_DECIDE_EXAMPLE
from app.schemas.gpu import GPU_DECIDE_EXAMPLE
from tests.integration.api.dag_helpers import NOW, wide_dag
from tests.integration.batching.harness import RedisServer, Service, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def _ready(base_url: str) -> bool:
    body: dict[str, Any] = httpx.get(f"{base_url}/readyz", timeout=5).json()
    return bool(body["queue"] == "ok")


def _decided_by_worker(client: redis.Redis, request_id: str) -> bool:
    """A worker delivered this request's reply (its done key); the API never writes one."""
    return bool(client.exists(f"kairos:done:{request_id}"))


def test_gpu_and_dag_decisions_are_made_by_a_worker(
    service: Service, redis_server: RedisServer
) -> None:
    service.start_worker("w1")
    service.start_api()
    wait_until(lambda: _ready(service.base_url), 30, "worker alive")
    client = redis.Redis(port=redis_server.port)
    with httpx.Client(base_url=service.base_url, timeout=60) as http:
        gpu = http.post("/v1/decide", json={**GPU_DECIDE_EXAMPLE, "policy": "gpu-v1"})
        assert gpu.status_code == 200, gpu.text
        g = gpu.json()
        assert (g["policy"]["name"], g["policy"]["kind"]) == ("gpu-v1", "onnx")
        assert g["fallback"] == {"used": False, "reason": None}
        assert _decided_by_worker(client, g["request_id"]), service.log("api")[-2000:]
        replay = http.post("/v1/decide", json=http.get(f"/v1/decisions/{g['id']}").json()["input"])
        assert replay.json()["allocations"] == g["allocations"]

        dag = http.post("/v1/decide", json={**DAG_DECIDE_EXAMPLE, "policy": "dag-v1"})
        assert dag.status_code == 200, dag.text
        d = dag.json()
        assert (d["policy"]["name"], d["policy"]["kind"]) == ("dag-v1", "onnx")
        assert d["fallback"] == {"used": False, "reason": None}
        assert d["allocations"]
        assert d["explain"]["steps"], "the explanation travels back from the worker"
        assert _decided_by_worker(client, d["request_id"])

        # a model that cannot answer in time gives way to the fallback, which says why
        late = copy.deepcopy(DAG_DECIDE_EXAMPLE)
        late.update(policy="dag-v1", deadline_ms=0.001)
        fair = http.post("/v1/decide", json=late).json()
        assert fair["policy"]["name"] == "fair"
        assert fair["fallback"] == {"used": True, "reason": "deadline_exceeded"}

        # a stateful DAG round with a shadow policy: both decided on the worker
        cid = "dag-on-worker"
        r = http.put(
            f"/v1/clusters/{cid}",
            json={
                "name": "dag",
                "domain": "dag",
                "resources": ["cpu", "memory_gb"],
                "policy": "fifo",
                "shadow_policy": "sjf_cp",
            },
        )
        assert r.status_code in (200, 201), r.text
        r = http.put(
            f"/v1/clusters/{cid}/nodes",
            json={"nodes": [{"id": "n0", "capacity": {"cpu": 2, "memory_gb": 8}}]},
        )
        assert r.status_code == 200, r.text
        for body in (wide_dag("big", 9, NOW), wide_dag("small", 1, NOW + 1)):
            assert http.post(f"/v1/clusters/{cid}/dags", json=body).status_code == 201
        rd = http.post(f"/v1/clusters/{cid}/schedule", json={"now": NOW + 2})
        assert rd.status_code == 200, rd.text
        round_ = rd.json()
        assert [a["job_id"] for a in round_["allocations"]] == ["big:only"]
        assert round_["shadow"]["policy"] == "sjf_cp"
        assert [a["job_id"] for a in round_["shadow"]["allocations"]] == [
            "small:only",
            "big:only",
        ]
        assert _decided_by_worker(client, round_["request_id"])
    client.close()
