"""Learned GPU policies on gpu clusters through HTTP: a GPU model in MODELS_DIR decides a
cluster's rounds (kind onnx), is the default of a new gpu cluster when it is the configured
default, replays through ``/v1/decide``; a model whose output is non-finite gives way to the
cluster's fallback heuristic, and the decision says why."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from app.domains.gpu.encoding import FEATURE_NAMES, FEATURE_SCHEMA_VERSION
from app.main import create_app
from app.settings import Settings
from tests.conftest import open_client
from tests.factories import cluster_body

T0 = 1_767_225_600.0


def _model(feature: str, *, log_of_one_minus: bool = False) -> bytes:
    """``logits = -obs[..., feature]`` (or ``log(1 - obs[..., feature])``), masked."""
    inits = [
        numpy_helper.from_array(np.array(FEATURE_NAMES.index(feature), dtype=np.int64), "idx"),
        numpy_helper.from_array(np.array(-1e9, dtype=np.float32), "masked"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
    ]
    nodes = [helper.make_node("Gather", ["obs", "idx"], ["col"], axis=2)]
    if log_of_one_minus:
        nodes += [
            helper.make_node("Sub", ["one", "col"], ["rest"]),
            helper.make_node("Log", ["rest"], ["score"]),
        ]
    else:
        nodes.append(helper.make_node("Neg", ["col"], ["score"]))
    nodes.append(helper.make_node("Where", ["mask", "score", "masked"], ["logits"]))
    graph = helper.make_graph(
        nodes,
        "gpu-test",
        [
            helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["B", "K", len(FEATURE_NAMES)]),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, ["B", "K"]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", "K"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _install(models: Path, name: str, model: bytes) -> None:
    home = models / name / "1"
    home.mkdir(parents=True)
    (home / "policy.onnx").write_bytes(model)
    card: dict[str, Any] = {
        "name": name,
        "version": "1",
        "domain": "gpu",
        "feature_schema_version": FEATURE_SCHEMA_VERSION,
        "encoding": {},
        "window": 64,
    }
    (home / "card.json").write_text(json.dumps(card))


@pytest.fixture
async def learned(settings: Settings, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    models = tmp_path / "models"
    _install(models, "gpu-las", _model("attained"))
    _install(models, "gpu-nan", _model("running", log_of_one_minus=True))
    app = create_app(
        settings.model_copy(update={"MODELS_DIR": str(models), "DEFAULT_GPU_POLICY": "gpu-las"})
    )
    async for c in open_client(app):
        yield c


async def _cluster(c: httpx.AsyncClient, cid: str, **extra: Any) -> dict[str, Any]:
    r = await c.put(
        f"/v1/clusters/{cid}", json=cluster_body(domain="gpu", resources=["gpu"], **extra)
    )
    assert r.status_code == 201, r.text
    nodes = [{"id": "n0", "capacity": {"gpu": 4}}, {"id": "n1", "capacity": {"gpu": 4}}]
    assert (await c.put(f"/v1/clusters/{cid}/nodes", json={"nodes": nodes})).status_code == 200
    for job_id, at in (("a", T0), ("b", T0 + 1)):
        body = {"id": job_id, "tasks": 4, "per_task": {"gpu": 1}, "walltime_s": 60.0}
        r = await c.post(f"/v1/clusters/{cid}/jobs", json={**body, "submit_time": at})
        assert r.status_code == 201, r.text
    cluster: dict[str, Any] = r.json()
    return cluster


async def test_the_default_gpu_model_decides_and_replays(
    learned: httpx.AsyncClient, cid: str
) -> None:
    await _cluster(learned, cid)
    assert (await learned.get(f"/v1/clusters/{cid}")).json()["policy"] == "gpu-las"
    first = (await learned.post(f"/v1/clusters/{cid}/schedule", json={"now": T0 + 2})).json()
    assert first["policy"] == {"name": "gpu-las", "version": "1", "kind": "onnx"}
    assert first["fallback"] == {"used": False, "reason": None}
    assert sorted(a["job_id"] for a in first["allocations"]) == ["a", "b"]
    late = {"id": "c", "tasks": 4, "per_task": {"gpu": 1}, "walltime_s": 60.0}
    await learned.post(f"/v1/clusters/{cid}/jobs", json={**late, "submit_time": T0 + 50})
    d = (
        await learned.post(f"/v1/clusters/{cid}/schedule", json={"now": T0 + 100, "explain": True})
    ).json()
    # least attained first: the new job takes the GPUs of one of the two that ran 98 s
    assert [a["job_id"] for a in d["allocations"]] == ["c"]
    assert len(d["preemptions"]) == 1
    detail = (await learned.get(f"/v1/decisions/{d['id']}")).json()
    again = (await learned.post("/v1/decide", json=detail["input"])).json()
    for key in ("allocations", "preemptions", "resizes", "policy", "fallback"):
        assert again[key] == d[key], key


async def test_a_model_with_non_finite_output_falls_back(
    learned: httpx.AsyncClient, cid: str
) -> None:
    await _cluster(learned, cid, policy="gpu-nan", fallback="fifo")
    first = (await learned.post(f"/v1/clusters/{cid}/schedule", json={"now": T0 + 2})).json()
    # no job runs yet: the model's scores are finite and it decides
    assert (first["policy"]["name"], first["fallback"]["used"]) == ("gpu-nan", False)
    second = (await learned.post(f"/v1/clusters/{cid}/schedule", json={"now": T0 + 9})).json()
    assert second["fallback"] == {"used": True, "reason": "non_finite_output"}
    assert second["policy"]["name"] == "fifo"
    assert second["preemptions"] == []


async def test_a_gpu_model_is_refused_for_an_hpc_cluster(
    learned: httpx.AsyncClient, cid: str
) -> None:
    r = await learned.put(f"/v1/clusters/{cid}", json=cluster_body(policy="gpu-las"))
    assert r.status_code == 422
    assert r.json()["error"]["details"][0]["field"] == "body.policy"
