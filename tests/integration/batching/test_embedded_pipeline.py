"""The embedded pipeline through the API (create_app on Postgres, no Redis): ONNX models loaded or
refused at start, per-request fallback reasons, uploads, in-process batching, shadow mode."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.fixtures import onnx_models as m

pytestmark = [pytest.mark.postgres]

NOW = 100_000.0


@pytest.fixture
def embedded_models(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    m.write_model(root, "hpc-good", "1", m.kernel_model(seed=1))
    m.write_model(root, "hpc-nan", "1", m.nan_model())
    m.write_model(root, "hpc-badshape", "1", m.kernel_model(features=8))
    schema = m.card(name="hpc-schema", version="1", feature_schema_version="kairos-hpc-v0")
    m.write_model(root, "hpc-schema", "1", m.kernel_model(), schema)
    m.write_model(root, "hpc-corrupt", "1", b"\x00not an onnx file")
    m.write_model(root, "hpc-nanfresh", "1", m.nan_when_fresh_model())
    m.write_model(root, "hpc-raises", "1", m.raises_when_long_model(limit=6))
    return root


@pytest.fixture
async def api(pg_url: str, embedded_models: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        DATABASE_URL=pg_url,
        MODELS_DIR=str(embedded_models),
        SHIPPED_MODELS=False,  # only the models above (ADR 0089)
        DEFAULT_POLICY="hpc-kernel",  # not shipped here: the fallback must take over
        BATCH_MAX_WAIT_MS=5.0,
        # a deadline no decision here misses however busy the host: the one fallback for a
        # missed deadline comes from the request that asks for an impossible one
        DEFAULT_DEADLINE_MS=600_000.0,
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kairos.test") as c:
            yield c


def body(policy: str | None, *, jobs: int = 8, fresh: bool = False, **extra: Any) -> dict[str, Any]:
    pending = [
        {
            "id": f"j{i}",
            "per_task": {"cpu": 1 + i % 5},
            "walltime_s": 60.0 * (1 + i % 7),
            "submit_time": NOW - 500 + i,
        }
        for i in range(jobs)
    ]
    if fresh:
        pending.append({"id": "fresh", "per_task": {"cpu": 1}, "walltime_s": 30.0})
    out: dict[str, Any] = {
        "now": NOW,
        "nodes": [{"id": "n1", "capacity": {"cpu": 8}}, {"id": "n2", "capacity": {"cpu": 8}}],
        "pending": pending,
        **extra,
    }
    if policy is not None:
        out["policy"] = policy
    return out


async def test_models_are_listed_loaded_or_refused(api: httpx.AsyncClient) -> None:
    listed = {(p["name"], p["version"]): p for p in (await api.get("/v1/policies")).json()}
    assert listed[("f1", "1")]["kind"] == "heuristic"
    good = listed[("hpc-good", "1")]
    assert (good["kind"], good["loaded"], good["domain"]) == ("onnx", True, "hpc")
    assert re.fullmatch(r"[0-9a-f]{64}", good["sha256"])
    assert good["card"]["feature_schema_version"] == "kairos-hpc-v1"
    for name in ("hpc-nan", "hpc-badshape", "hpc-schema", "hpc-corrupt"):
        assert listed[(name, "1")]["loaded"] is False
    one = await api.get("/v1/policies/hpc-good")
    assert one.status_code == 200
    assert one.json()["card"]["seeds"] == [0]


@pytest.mark.parametrize(
    ("policy", "extra", "reason"),
    [
        ("hpc-good", {}, None),
        ("hpc-nan", {}, "model_refused"),
        ("hpc-badshape", {}, "model_refused"),
        ("hpc-schema", {}, "model_refused"),
        ("hpc-corrupt", {}, "model_refused"),
        ("hpc-nanfresh", {"fresh": True}, "non_finite_output"),
        ("hpc-raises", {"jobs": 10}, "inference_error"),
        ("hpc-good", {"deadline_ms": 0.001}, "deadline_exceeded"),
        (None, {}, "model_missing"),  # the default policy is not installed
    ],
)
async def test_fallback_reasons_through_the_api(
    api: httpx.AsyncClient, policy: str | None, extra: dict[str, Any], reason: str | None
) -> None:
    options = {k: extra[k] for k in ("jobs", "fresh") if k in extra}
    payload = body(policy, **options, **{k: v for k, v in extra.items() if k not in options})
    response = await api.post("/v1/decide", json=payload)
    assert response.status_code == 200, response.text
    decision = response.json()
    assert decision["fallback"] == {"used": reason is not None, "reason": reason}
    metrics = (await api.get("/metrics")).text
    if reason is None:
        assert decision["policy"] == {"name": "hpc-good", "version": "1", "kind": "onnx"}
        assert "kairos_fallback_total{" not in metrics
    else:
        assert decision["policy"]["name"] == "f1"
        assert f'kairos_fallback_total{{reason="{reason}"}} 1.0' in metrics
    assert decision["allocations"]  # the service keeps serving


async def test_concurrent_requests_share_in_process_batches(api: httpx.AsyncClient) -> None:
    answers = await asyncio.gather(
        *(
            api.post("/v1/decide", json=body("hpc-good", jobs=6 + i % 5, deadline_ms=10_000))
            for i in range(48)
        )
    )
    assert all(r.status_code == 200 for r in answers)
    assert all(r.json()["policy"]["kind"] == "onnx" for r in answers)
    text = (await api.get("/metrics")).text
    total = float(re.search(r"^kairos_batch_size_sum (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
    count = float(re.search(r"^kairos_batch_size_count (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
    assert total >= 48
    assert total / count > 1.0
    assert re.search(r'^kairos_decision_latency_seconds_count\{kind="onnx"\} ', text, re.M)
    assert "kairos_queue_depth 0.0" in text
    ready = (await api.get("/readyz")).json()
    assert ready["queue"] == "ok"


async def test_upload(api: httpx.AsyncClient) -> None:
    def files(model: bytes, **card: Any) -> dict[str, tuple[str, bytes, str]]:
        return {
            "model": ("policy.onnx", model, "application/octet-stream"),
            "card": ("card.json", json.dumps(m.card(**card)).encode(), "application/json"),
        }

    created = await api.post("/v1/policies", files=files(m.kernel_model(seed=4), name="hpc-up"))
    assert created.status_code == 201, created.text
    assert (created.json()["name"], created.json()["loaded"]) == ("hpc-up", True)
    decided = (await api.post("/v1/decide", json=body("hpc-up"))).json()
    assert decided["policy"]["name"] == "hpc-up"
    assert not decided["fallback"]["used"]
    again = await api.post("/v1/policies", files=files(m.kernel_model(seed=4), name="hpc-up"))
    assert again.status_code == 409
    for model, card, code in [
        (m.nan_model(), {"name": "hpc-x1"}, "non_finite_probe"),
        (b"garbage", {"name": "hpc-x2"}, "corrupt_model"),
        (m.kernel_model(features=5), {"name": "hpc-x3"}, "signature_mismatch"),
        (
            m.kernel_model(),
            {"name": "hpc-x4", "feature_schema_version": "v0"},
            "schema_version_mismatch",
        ),
    ]:
        refused = await api.post("/v1/policies", files=files(model, **card))
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == code
    names = {p["name"] for p in (await api.get("/v1/policies")).json()}
    assert "hpc-up" in names
    assert not names & {"hpc-x1", "hpc-x2", "hpc-x3", "hpc-x4"}


async def test_shadow_mode(api: httpx.AsyncClient) -> None:
    cid = f"shadow-{uuid.uuid4().hex[:12]}"
    put = await api.put(
        f"/v1/clusters/{cid}",
        json={"resources": ["cpu"], "policy": "hpc-good", "shadow_policy": "sjf"},
    )
    assert put.status_code in (200, 201), put.text
    nodes = [{"id": f"n{k}", "capacity": {"cpu": 8}} for k in range(2)]
    assert (await api.put(f"/v1/clusters/{cid}/nodes", json={"nodes": nodes})).status_code == 200
    jobs = body(None, jobs=10)["pending"]
    assert (await api.post(f"/v1/clusters/{cid}/jobs/batch", json={"jobs": jobs})).status_code in (
        200,
        201,
    )
    for _ in range(2):
        decision = (
            await api.post(f"/v1/clusters/{cid}/schedule", json={"dry_run": True, "now": NOW})
        ).json()
        assert decision["policy"]["kind"] == "onnx"
        assert decision["shadow"]["policy"] == "sjf"
    listed = (await api.get(f"/v1/clusters/{cid}/decisions")).json()["items"]
    assert all(d["shadow"] is not None for d in listed)
    report = (await api.get(f"/v1/clusters/{cid}/shadow-report")).json()
    assert report["shadow_policy"] == "sjf"
    assert report["compared"] == 2
    agreed = sum(
        {a["job_id"] for a in d["allocations"]} == {a["job_id"] for a in d["shadow"]["allocations"]}
        for d in listed
    )
    assert report["agreed"] == agreed
    assert (await api.get("/v1/clusters/nope/shadow-report")).status_code == 404
