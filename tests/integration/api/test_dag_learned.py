"""A dag cluster decided by a learned DAG model through HTTP: the shipped Decima weights exported
to ONNX (training/dag_export.py) and installed as a model directory decide every round (no
fallback), the explanation carries the model's stage scores with the runners-up by score, every
decision keeps the invariants and replays through ``/v1/decide``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from sim.dag_data import load_decima
from tests.conftest import open_client
from tests.integration.api.dag_helpers import (
    NOW,
    all_dags,
    chain_dag,
    check_invariants,
    finish_running_tasks,
    join_dag,
    make_dag_cluster,
    wide_dag,
)
from training.dag_export import build_onnx

CARD = {
    "name": "decima-http",
    "version": "1",
    "domain": "dag",
    "kind": "onnx",
    "feature_schema_version": "dag-v1",
    "decoding": {"mode": "sample", "seed": 7},
}


@pytest.fixture(scope="module")
def decima_onnx() -> bytes:
    return build_onnx(dict(load_decima().tensors)).SerializeToString()


@pytest.fixture
async def learned(
    database_url: str, tmp_path: Path, decima_onnx: bytes
) -> AsyncIterator[httpx.AsyncClient]:
    model_dir = tmp_path / "models" / "decima-http" / "1"
    model_dir.mkdir(parents=True)
    (model_dir / "card.json").write_text(json.dumps(CARD))
    (model_dir / "policy.onnx").write_bytes(decima_onnx)
    settings = Settings(
        DATABASE_URL=database_url, MODELS_DIR=str(tmp_path / "models"), DEFAULT_DEADLINE_MS=5_000
    )
    async for c in open_client(create_app(settings)):
        yield c


async def test_the_learned_model_decides_every_round_to_completion(
    learned: httpx.AsyncClient, cid: str
) -> None:
    await make_dag_cluster(learned, cid, nodes=2, cpu=3, policy="decima-http")
    for body in (join_dag("j", NOW), chain_dag("c", NOW + 1), wide_dag("w", 5, NOW + 2)):
        assert (await learned.post(f"/v1/clusters/{cid}/dags", json=body)).status_code == 201
    t = NOW + 10
    decisions: list[dict[str, Any]] = []
    for _ in range(60):
        r = await learned.post(f"/v1/clusters/{cid}/schedule", json={"now": t, "explain": True})
        assert r.status_code == 200, r.text
        d = r.json()
        assert d["policy"] == {"name": "decima-http", "version": "1", "kind": "onnx"}
        assert d["fallback"] == {"used": False, "reason": None}
        # Decima's limit caps one action's executors, not the DAG's total
        await check_invariants(learned, cid, d, slots_per_node=3, dag_cap=False)
        decisions.append(d)
        t += 5
        if not await finish_running_tasks(learned, cid, t):
            break
    assert {x["state"] for x in await all_dags(learned, cid)} == {"finished"}
    steps = [s for d in decisions for s in d["explain"]["steps"]]
    assert steps
    for step in steps:
        assert isinstance(step["chosen"]["score"], float)
        scores = [u["score"] for u in step["runners_up"]]
        assert scores == sorted(scores, reverse=True)
        assert step["runners_up_ranked"] is True
    for d in decisions[:5]:
        stored = (await learned.get(f"/v1/decisions/{d['id']}")).json()
        replay = (await learned.post("/v1/decide", json=stored["input"])).json()
        assert (replay["policy"], replay["allocations"], replay["reservations"]) == (
            d["policy"],
            d["allocations"],
            d["reservations"],
        )


async def test_a_new_dag_cluster_is_decided_by_the_shipped_dag_model(
    client: httpx.AsyncClient, cid: str
) -> None:
    r = await client.put(
        f"/v1/clusters/{cid}", json={"domain": "dag", "resources": ["cpu", "memory_gb"]}
    )
    assert r.status_code == 201, r.text
    assert (r.json()["policy"], r.json()["fallback"]) == ("dag-v1", "fair")
    await client.put(
        f"/v1/clusters/{cid}/nodes", json={"nodes": [{"id": "n0", "capacity": {"cpu": 4}}]}
    )
    await client.post(f"/v1/clusters/{cid}/dags", json=join_dag("j", NOW))
    d = (await client.post(f"/v1/clusters/{cid}/schedule", json={"now": NOW + 1})).json()
    assert (d["policy"]["name"], d["policy"]["kind"]) == ("dag-v1", "onnx")
    assert d["fallback"]["used"] is False
    assert 1 <= sum(p["tasks"] for a in d["allocations"] for p in a["placements"]) <= 4
