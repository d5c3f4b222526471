"""Uploads of gpu and dag models (``POST /v1/policies``): the card's ``domain`` picks the checks a
model of that domain gets at discovery; an accepted upload is its tenant's alone, is listed with
its domain and decides that tenant's clusters of that domain (no fallback); a broken one is
refused with the reason and the field, as an hpc upload is. A heuristic card lists as kind
``heuristic`` naming the heuristic it decides as. Two tenants: ``acme-*`` (key ``kA``) and
``globex-*`` (key ``kB``), new in each test."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from app.domains.gpu.encoding import NUM_FEATURES
from app.main import create_app
from app.settings import Settings
from tests.conftest import open_client
from tests.factories import cluster_body
from tests.integration.api.dag_helpers import NOW, wide_dag

SHIPPED_MODELS = Path(__file__).resolve().parents[3] / "models"
GPU_MODEL = SHIPPED_MODELS / "gpu-v1" / "2"
DAG_MODEL = SHIPPED_MODELS / "dag-v1" / "1"
A = {"Authorization": "Bearer kA"}
B = {"Authorization": "Bearer kB"}
T0 = 1_767_225_600.0
#: a heuristic card (``kairos tune``'s output when a heuristic won) shipped in MODELS_DIR
TUNED = {
    "name": "tuned-sjf",
    "version": "1",
    "domain": "hpc",
    "kind": "heuristic",
    "recommendation": "sjf",
    "tuning": {"windows": 2},
}


@pytest.fixture
async def api(settings: Settings, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    models = tmp_path / "models"
    shutil.copytree(SHIPPED_MODELS, models)
    tuned = models / "tuned-sjf" / "1"
    tuned.mkdir(parents=True)
    (tuned / "card.json").write_text(json.dumps(TUNED))
    unknown = models / "tuned-nope" / "1"
    unknown.mkdir(parents=True)
    (unknown / "card.json").write_text(json.dumps({**TUNED, "recommendation": "nope"}))
    run = uuid.uuid4().hex[:8]  # the PostgreSQL database outlives the test: fresh tenants
    tenants = settings.model_copy(
        update={
            "API_KEYS": f"acme-{run}:kA,globex-{run}:kB",
            "MODELS_DIR": str(models),
            "MAX_BODY_BYTES": 1 << 22,
            "DEFAULT_DEADLINE_MS": 5_000,
        }
    )
    async for c in open_client(create_app(tenants)):
        yield c


def _graph(*, features: int = NUM_FEATURES, output: str = "logits") -> bytes:
    """A well-formed ONNX graph ``obs float32[B, K, features]``, ``mask bool[B, K]`` -> ``output
    float32[B, K]`` (minus feature 0 where masked in), with no schema metadata."""
    inits = [
        numpy_helper.from_array(np.array(0, dtype=np.int64), "idx"),
        numpy_helper.from_array(np.array(-1e9, dtype=np.float32), "masked"),
    ]
    nodes = [
        helper.make_node("Gather", ["obs", "idx"], ["col"], axis=2),
        helper.make_node("Neg", ["col"], ["score"]),
        helper.make_node("Where", ["mask", "score", "masked"], [output]),
    ]
    graph = helper.make_graph(
        nodes,
        "upload-test",
        [
            helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["B", "K", features]),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, ["B", "K"]),
        ],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["B", "K"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _card(source: Path, name: str, **change: Any) -> dict[str, Any]:
    card: dict[str, Any] = json.loads((source / "card.json").read_text())
    card.update(name=name, **change)
    return card


def _files(model: bytes, card: dict[str, Any]) -> dict[str, tuple[str, bytes, str]]:
    return {
        "model": ("policy.onnx", model, "application/octet-stream"),
        "card": ("card.json", json.dumps(card).encode(), "application/json"),
    }


async def _upload(
    api: httpx.AsyncClient, who: dict[str, str], model: bytes, card: dict[str, Any]
) -> httpx.Response:
    return await api.post("/v1/policies", headers=who, files=_files(model, card))


def _name() -> str:
    return f"own-{uuid.uuid4().hex[:8]}"


def _refusal(r: httpx.Response) -> tuple[str, str, str]:
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    (detail,) = error["details"]
    return error["code"], detail["field"], detail["message"]


async def _listed(api: httpx.AsyncClient, who: dict[str, str]) -> dict[str, dict[str, Any]]:
    r = await api.get("/v1/policies", headers=who)
    assert r.status_code == 200, r.text
    return {p["name"]: p for p in r.json()}


async def _gpu_cluster(
    api: httpx.AsyncClient, who: dict[str, str], cid: str, policy: str
) -> httpx.Response:
    body = cluster_body(domain="gpu", resources=["gpu"], policy=policy, fallback="fifo")
    r = await api.put(f"/v1/clusters/{cid}", headers=who, json=body)
    if r.status_code != 201:
        return r
    nodes = [{"id": "n0", "capacity": {"gpu": 4}}, {"id": "n1", "capacity": {"gpu": 4}}]
    put = await api.put(f"/v1/clusters/{cid}/nodes", headers=who, json={"nodes": nodes})
    assert put.status_code == 200, put.text
    for job_id, at in (("a", T0), ("b", T0 + 1), ("c", T0 + 2)):
        job = {"id": job_id, "tasks": 4, "per_task": {"gpu": 1}, "walltime_s": 60.0}
        posted = await api.post(
            f"/v1/clusters/{cid}/jobs", headers=who, json={**job, "submit_time": at}
        )
        assert posted.status_code == 201, posted.text
    return r


async def _dag_cluster(
    api: httpx.AsyncClient, who: dict[str, str], cid: str, policy: str
) -> httpx.Response:
    body = {
        "name": "dag test",
        "domain": "dag",
        "resources": ["cpu", "memory_gb"],
        "policy": policy,
    }
    r = await api.put(f"/v1/clusters/{cid}", headers=who, json=body)
    if r.status_code != 201:
        return r
    nodes = [{"id": f"n{i}", "capacity": {"cpu": 3, "memory_gb": 16}} for i in range(2)]
    put = await api.put(f"/v1/clusters/{cid}/nodes", headers=who, json={"nodes": nodes})
    assert put.status_code == 200, put.text
    for dag_id, at in (("a", NOW), ("b", NOW + 1)):
        posted = await api.post(
            f"/v1/clusters/{cid}/dags", headers=who, json=wide_dag(dag_id, 4, at)
        )
        assert posted.status_code == 201, posted.text
    return r


async def _upload_events(api: httpx.AsyncClient, who: dict[str, str]) -> list[dict[str, Any]]:
    page = await api.get("/v1/audit", headers=who)
    assert page.status_code == 200, page.text
    return [e for e in page.json()["items"] if e["action"] == "policy.upload"]


class TestGpuUploads:
    async def test_an_upload_decides_its_tenants_gpu_rounds_and_no_one_elses(
        self, api: httpx.AsyncClient
    ) -> None:
        name, model = _name(), (GPU_MODEL / "policy.onnx").read_bytes()
        r = await _upload(api, A, model, _card(GPU_MODEL, name))
        assert r.status_code == 201, r.text
        created = r.json()
        assert (created["name"], created["version"]) == (name, "2")
        assert (created["kind"], created["domain"], created["scope"]) == ("onnx", "gpu", "tenant")
        assert created["loaded"] is True
        listed = await _listed(api, A)
        assert (listed[name]["domain"], listed[name]["kind"]) == ("gpu", "onnx")
        assert listed["gpu-v1"]["domain"] == "gpu"
        assert listed["dag-v1"]["domain"] == "dag"
        assert listed["hpc-kernel"]["domain"] == "hpc"
        assert name not in await _listed(api, B)
        assert (await api.get(f"/v1/policies/{name}", headers=B)).status_code == 404

        cid = f"c-{uuid.uuid4().hex[:12]}"
        assert (await _gpu_cluster(api, A, cid, name)).status_code == 201
        started = 0
        for now in (T0 + 3, T0 + 30):
            d = await api.post(f"/v1/clusters/{cid}/schedule", headers=A, json={"now": now})
            assert d.status_code == 200, d.text
            decision = d.json()
            assert decision["policy"] == {"name": name, "version": "2", "kind": "onnx"}
            assert decision["fallback"] == {"used": False, "reason": None}
            started += len(decision["allocations"])
        assert started >= 2  # 8 GPUs, three 4-GPU jobs: the model starts two of them

        events = await _upload_events(api, A)
        assert [(e["subject"], e["details"]["domain"]) for e in events] == [(f"{name}@2", "gpu")]
        assert events[0]["details"]["sha256"] == created["sha256"]
        assert await _upload_events(api, B) == []

    async def test_another_tenants_gpu_cluster_and_an_hpc_cluster_refuse_it(
        self, api: httpx.AsyncClient
    ) -> None:
        name = _name()
        r = await _upload(api, A, (GPU_MODEL / "policy.onnx").read_bytes(), _card(GPU_MODEL, name))
        assert r.status_code == 201, r.text
        theirs = await _gpu_cluster(api, B, f"c-{uuid.uuid4().hex[:12]}", name)
        assert theirs.status_code == 422, theirs.text
        assert theirs.json()["error"]["details"][0]["field"] == "body.policy"
        hpc = await api.put(
            f"/v1/clusters/c-{uuid.uuid4().hex[:12]}", headers=A, json=cluster_body(policy=name)
        )
        assert hpc.status_code == 422, hpc.text
        (detail,) = hpc.json()["error"]["details"]
        assert (detail["field"], detail["type"]) == ("body.policy", "domain")
        assert "gpu" in detail["message"]

    async def test_a_broken_gpu_upload_is_refused_naming_why(self, api: httpx.AsyncClient) -> None:
        name = _name()
        # the graph is sound, and the card's: a graph missing the logits output is refused
        assert (await _upload(api, B, _graph(), _card(GPU_MODEL, _name()))).status_code == 201
        no_logits = _graph(output="scores")
        code, field, message = _refusal(await _upload(api, A, no_logits, _card(GPU_MODEL, name)))
        assert (code, field) == ("signature_mismatch", "body.model")
        assert "none is 'logits'" in message
        narrow = _graph(features=NUM_FEATURES - 1)
        code, field, message = _refusal(await _upload(api, A, narrow, _card(GPU_MODEL, name)))
        assert (code, field) == ("signature_mismatch", "body.model")
        assert "features" in message
        code, field, _ = _refusal(await _upload(api, A, b"not onnx", _card(GPU_MODEL, name)))
        assert (code, field) == ("corrupt_model", "body.model")
        gpu_graph = (GPU_MODEL / "policy.onnx").read_bytes()
        code, field, message = _refusal(
            await _upload(api, A, gpu_graph, _card(GPU_MODEL, name, window=0))
        )
        assert (code, field) == ("invalid_card", "body.card")
        assert "window" in message
        stale = _card(GPU_MODEL, name, feature_schema_version="kairos-gpu-v0")
        code, field, _ = _refusal(await _upload(api, A, gpu_graph, stale))
        assert (code, field) == ("schema_version_mismatch", "body.card")
        assert name not in await _listed(api, A)
        assert await _upload_events(api, A) == []

    async def test_a_shipped_gpu_name_is_reserved(self, api: httpx.AsyncClient) -> None:
        model = (GPU_MODEL / "policy.onnx").read_bytes()
        code, field, _ = _refusal(await _upload(api, A, model, _card(GPU_MODEL, "GPU-v1")))
        assert (code, field) == ("reserved_policy_name", "body.card")


class TestDagUploads:
    async def test_an_upload_decides_its_tenants_dag_rounds_and_no_one_elses(
        self, api: httpx.AsyncClient
    ) -> None:
        name, model = _name(), (DAG_MODEL / "policy.onnx").read_bytes()
        r = await _upload(api, A, model, _card(DAG_MODEL, name))
        assert r.status_code == 201, r.text
        created = r.json()
        assert (created["kind"], created["domain"], created["scope"]) == ("onnx", "dag", "tenant")
        assert (await _listed(api, A))[name]["domain"] == "dag"
        assert name not in await _listed(api, B)

        cid = f"c-{uuid.uuid4().hex[:12]}"
        assert (await _dag_cluster(api, A, cid, name)).status_code == 201
        d = await api.post(f"/v1/clusters/{cid}/schedule", headers=A, json={"now": NOW + 2})
        assert d.status_code == 200, d.text
        decision = d.json()
        assert decision["policy"] == {"name": name, "version": "1", "kind": "onnx"}
        assert decision["fallback"] == {"used": False, "reason": None}
        assert decision["allocations"]

        theirs = await _dag_cluster(api, B, f"c-{uuid.uuid4().hex[:12]}", name)
        assert theirs.status_code == 422, theirs.text
        assert theirs.json()["error"]["details"][0]["field"] == "body.policy"
        gpu = await _gpu_cluster(api, A, f"c-{uuid.uuid4().hex[:12]}", name)
        assert gpu.status_code == 422, gpu.text
        events = await _upload_events(api, A)
        assert [(e["subject"], e["details"]["domain"]) for e in events] == [(f"{name}@1", "dag")]

    async def test_a_broken_dag_upload_is_refused_naming_why(self, api: httpx.AsyncClient) -> None:
        name = _name()
        # a gpu-shaped graph (obs, mask) under a dag card
        code, field, message = _refusal(await _upload(api, A, _graph(), _card(DAG_MODEL, name)))
        assert (code, field) == ("signature_mismatch", "body.model")
        assert "inputs are ['mask', 'obs']" in message
        dag_graph = (DAG_MODEL / "policy.onnx").read_bytes()
        bad_mode = _card(DAG_MODEL, name, decoding={"mode": "beam"})
        code, field, message = _refusal(await _upload(api, A, dag_graph, bad_mode))
        assert (code, field) == ("invalid_card", "body.card")
        assert "decoding.mode" in message
        assert name not in await _listed(api, A)
        assert await _upload_events(api, A) == []


class TestHeuristicCards:
    async def test_a_heuristic_card_lists_as_its_heuristic(self, api: httpx.AsyncClient) -> None:
        tuned = (await _listed(api, A))["tuned-sjf"]
        assert (tuned["kind"], tuned["domain"], tuned["loaded"]) == ("heuristic", "hpc", True)
        assert "'sjf'" in tuned["description"]
        assert tuned["card"]["recommendation"] == "sjf"
        refused = (await _listed(api, A))["tuned-nope"]
        assert (refused["kind"], refused["loaded"]) == ("heuristic", False)
        assert "invalid_card" in refused["description"]
        one = await api.get("/v1/policies/tuned-sjf", headers=A)
        assert one.status_code == 200, one.text
        assert one.json()["kind"] == "heuristic"

    async def test_an_hpc_cluster_decides_with_a_heuristic_card(
        self, api: httpx.AsyncClient, cid: str
    ) -> None:
        r = await api.put(f"/v1/clusters/{cid}", headers=A, json=cluster_body(policy="tuned-sjf"))
        assert r.status_code == 201, r.text
        gpu = await _gpu_cluster(api, A, f"c-{uuid.uuid4().hex[:12]}", "tuned-sjf")
        assert gpu.status_code == 422, gpu.text
        (detail,) = gpu.json()["error"]["details"]
        assert (detail["field"], detail["type"]) == ("body.policy", "domain")
        fallback = await api.put(
            f"/v1/clusters/c-{uuid.uuid4().hex[:12]}",
            headers=A,
            json=cluster_body(fallback="tuned-sjf"),
        )
        assert fallback.status_code == 422, fallback.text
        assert fallback.json()["error"]["details"][0]["field"] == "body.fallback"

    async def test_a_heuristic_card_is_not_uploaded(self, api: httpx.AsyncClient) -> None:
        card = {**TUNED, "name": _name()}
        code, field, _ = _refusal(await _upload(api, A, b"", card))
        assert (code, field) == ("invalid_card", "body.card")
