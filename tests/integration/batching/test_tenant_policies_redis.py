"""A tenant's upload decided by a ``kairos worker`` through Redis (ADR 0088): the API sends the
registry's qualified spec, which the worker resolves from the shared ``MODELS_DIR`` without
knowing tenants; another tenant cannot name it at all."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
import redis

from tests.fixtures import onnx_models as m
from tests.integration.batching.harness import RedisServer, Service, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def _body(policy: str) -> dict[str, Any]:
    return {
        "now": 100_000.0,
        "nodes": [{"id": f"n{k}", "capacity": {"cpu": 16}} for k in range(2)],
        "pending": [
            {"id": f"j{i}", "per_task": {"cpu": 1 + i % 5}, "walltime_s": 60.0 * (1 + i)}
            for i in range(8)
        ],
        "policy": policy,
        "deadline_ms": 20_000,
    }


def test_a_tenants_upload_is_decided_by_a_worker_for_that_tenant_alone(
    service: Service, redis_server: RedisServer
) -> None:
    run = uuid.uuid4().hex[:8]
    service.env["KAIROS_API_KEYS"] = f"acme-{run}:kA,globex-{run}:kB"
    service.start_worker("w1")  # started before the upload: it has never seen the model
    service.start_api()
    url = service.base_url
    wait_until(
        lambda: httpx.get(f"{url}/readyz", timeout=5).json()["queue"] == "ok", 30, "worker alive"
    )
    a, b = {"Authorization": "Bearer kA"}, {"Authorization": "Bearer kB"}
    files = {
        "model": ("policy.onnx", m.kernel_model(seed=5), "application/octet-stream"),
        "card": ("card.json", json.dumps(m.card(name="mine", version="1")).encode(), "a/json"),
    }
    created = httpx.post(f"{url}/v1/policies", headers=b, files=files, timeout=30)
    assert created.status_code == 201, created.text

    for _ in range(3):
        answer = httpx.post(f"{url}/v1/decide", headers=b, json=_body("mine"), timeout=30)
        assert answer.status_code == 200, answer.text
        assert answer.json()["policy"] == {"name": "mine", "version": "1", "kind": "onnx"}
        assert answer.json()["fallback"] == {"used": False, "reason": None}
    refused = httpx.post(f"{url}/v1/decide", headers=a, json=_body("mine"), timeout=30)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["details"][0]["field"] == "body.policy"

    client = redis.Redis(port=redis_server.port)
    try:
        delivered = len(client.keys("kairos:done:*"))
    finally:
        client.close()
    assert delivered == 3, f"decided in-process, not by the worker: {service.log('api')[-2000:]}"
