"""Which policy decides a dag cluster's round: a DAG heuristic, or a learned DAG model with the
fallback chain (a model that cannot be loaded hands the round to the cluster's fallback
heuristic, and the decision says why)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.conftest import open_client
from tests.integration.api.dag_helpers import NOW, make_dag_cluster, wide_dag

CARD = {
    "name": "dag-broken",
    "version": "1",
    "domain": "dag",
    "kind": "onnx",
    "feature_schema_version": "dag-v1",
    "decoding": {"mode": "argmax", "seed": 0},
}


@pytest.fixture
async def model_client(database_url: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    model_dir = tmp_path / "models" / "dag-broken" / "1"
    model_dir.mkdir(parents=True)
    (model_dir / "card.json").write_text(json.dumps(CARD))
    (model_dir / "policy.onnx").write_bytes(b"not an onnx graph")
    settings = Settings(
        DATABASE_URL=database_url, MODELS_DIR=str(tmp_path / "models"), DEFAULT_DEADLINE_MS=5_000
    )
    async for c in open_client(create_app(settings)):
        yield c


async def test_a_model_that_cannot_load_falls_back_to_the_clusters_heuristic(
    model_client: httpx.AsyncClient, cid: str
) -> None:
    await make_dag_cluster(model_client, cid, nodes=1, cpu=4, policy="dag-broken")
    r = await model_client.put(
        f"/v1/clusters/{cid}",
        json={
            "name": "dag test",
            "domain": "dag",
            "resources": ["cpu", "memory_gb"],
            "policy": "dag-broken",
            "fallback": "fifo",
        },
    )
    assert r.status_code == 200, r.text
    await model_client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("a", 3, NOW))
    await model_client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("b", 3, NOW + 1))
    r = await model_client.post(f"/v1/clusters/{cid}/schedule", json={"now": NOW + 2})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["fallback"] == {"used": True, "reason": "model_refused"}
    assert d["policy"] == {"name": "fifo", "version": "1", "kind": "heuristic"}
    # fifo: the first DAG takes what it can use, the second the rest
    assert [(a["job_id"], sum(p["tasks"] for p in a["placements"])) for a in d["allocations"]] == [
        ("a:only", 3),
        ("b:only", 1),
    ]


async def test_an_unknown_policy_name_is_422(client: httpx.AsyncClient, cid: str) -> None:
    await make_dag_cluster(client, cid)
    r = await client.post(f"/v1/clusters/{cid}/schedule", json={"policy": "no-such-model"})
    assert r.status_code == 422
    assert r.json()["error"]["details"][0]["field"] == "body.policy"


async def test_weighted_fair_and_packer_decide(client: httpx.AsyncClient, cid: str) -> None:
    await make_dag_cluster(client, cid, nodes=1, cpu=4)
    await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("a", 6, NOW))
    await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("b", 6, NOW + 1))
    for name in ("weighted_fair", "packer", "fifo_static", "sjf_capped"):
        r = await client.post(
            f"/v1/clusters/{cid}/schedule", json={"now": NOW + 2, "policy": name, "dry_run": True}
        )
        assert r.status_code == 200, r.text
        d = r.json()
        assert (d["policy"]["name"], d["fallback"]["used"]) == (name, False)
        assert sum(p["tasks"] for a in d["allocations"] for p in a["placements"]) == 4


async def test_a_primary_past_its_deadline_hands_the_round_to_the_fallback(
    client: httpx.AsyncClient, cid: str
) -> None:
    await make_dag_cluster(client, cid, nodes=1, cpu=4, policy="sjf_cp")
    await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("a", 6, NOW))
    r = await client.post(
        f"/v1/clusters/{cid}/schedule", json={"now": NOW + 1, "deadline_ms": 0.001}
    )
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["fallback"] == {"used": True, "reason": "deadline_exceeded"}
    assert d["policy"]["name"] == "fair"
    assert sum(p["tasks"] for a in d["allocations"] for p in a["placements"]) == 4


async def test_a_shadow_policy_is_decided_beside_and_never_applied(
    client: httpx.AsyncClient, cid: str
) -> None:
    await make_dag_cluster(client, cid, nodes=1, cpu=2)
    r = await client.put(
        f"/v1/clusters/{cid}",
        json={
            "name": "dag test",
            "domain": "dag",
            "resources": ["cpu", "memory_gb"],
            "policy": "fifo",
            "shadow_policy": "sjf_cp",
        },
    )
    assert r.status_code == 200, r.text
    await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("big", 9, NOW))
    await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("small", 1, NOW + 1))
    d = (await client.post(f"/v1/clusters/{cid}/schedule", json={"now": NOW + 2})).json()
    assert [a["job_id"] for a in d["allocations"]] == ["big:only"]  # fifo: the first DAG
    assert d["shadow"]["policy"] == "sjf_cp"
    shadow = [(a["job_id"], a["placements"]) for a in d["shadow"]["allocations"]]
    assert shadow == [
        ("small:only", [{"node_id": "n0", "tasks": 1}]),
        ("big:only", [{"node_id": "n0", "tasks": 1}]),
    ]
    small = (await client.get(f"/v1/clusters/{cid}/dags/small")).json()
    assert small["running_slots"] == 0  # the shadow's choice is not applied
    report = (await client.get(f"/v1/clusters/{cid}/shadow-report")).json()
    assert report["policies"][0]["shadow_policy"] == "sjf_cp"
    assert report["policies"][0]["compared"] == 1
