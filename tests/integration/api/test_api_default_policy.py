"""The shipped learned policy is the default, and the heuristic fallback takes over without it."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.conftest import open_client
from tests.factories import job_spec, make_cluster

SHIPPED_MODELS = Path(__file__).resolve().parents[3] / "models"


async def _schedule_default_cluster(client: httpx.AsyncClient, cid: str, **cluster: str) -> dict:
    await make_cluster(client, cid, nodes=2, cluster=dict(cluster), cpu=8)
    jobs = [job_spec(f"j{i}", cpu=4, submit_time=float(i)) for i in range(6)]
    r = await client.post(f"/v1/clusters/{cid}/jobs/batch", json={"jobs": jobs})
    assert r.status_code == 201, r.text
    r = await client.post(f"/v1/clusters/{cid}/schedule", json={"now": 100.0})
    assert r.status_code == 200, r.text
    decision: dict = r.json()
    return decision


class TestDefaultPolicy:
    async def test_default_cluster_is_scheduled_by_hpc_kernel(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        cluster = (await client.put(f"/v1/clusters/{cid}", json={"resources": ["cpu"]})).json()
        assert (cluster["policy"], cluster["fallback"]) == ("hpc-kernel", "f1")
        d = await _schedule_default_cluster(client, f"{cid}-2")
        assert d["policy"]["name"] == "hpc-kernel"
        assert d["policy"]["kind"] == "onnx"
        assert d["fallback"] == {"used": False, "reason": None}
        assert len(d["allocations"]) == 4  # 2 nodes x 8 cpu hold four 4-cpu jobs

    async def test_decide_defaults_to_hpc_kernel(self, client: httpx.AsyncClient) -> None:
        body = {
            "now": 10.0,
            "nodes": [{"id": "n1", "capacity": {"cpu": 8}}],
            "pending": [job_spec("a", cpu=2, submit_time=1.0)],
        }
        d = (await client.post("/v1/decide", json=body)).json()
        assert (d["policy"]["name"], d["policy"]["kind"]) == ("hpc-kernel", "onnx")
        assert d["policy"]["version"] == "3"  # the newest shipped version serves by default
        assert [a["job_id"] for a in d["allocations"]] == ["a"]

    async def test_without_backfilling_the_default_is_hpc_kernel_none(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        cluster = await client.put(
            f"/v1/clusters/{cid}", json={"resources": ["cpu"], "backfill": "none"}
        )
        assert cluster.json()["policy"] == "hpc-kernel-none"
        d = await _schedule_default_cluster(client, f"{cid}-2", backfill="none")
        assert (d["policy"]["name"], d["policy"]["kind"]) == ("hpc-kernel-none", "onnx")
        assert d["fallback"] == {"used": False, "reason": None}
        assert len(d["allocations"]) == 4

    async def test_the_shipped_defaults_are_ranking_models(self, client: httpx.AsyncClient) -> None:
        listed = (await client.get("/v1/policies")).json()
        loaded = {(p["name"], p["version"]) for p in listed if p["kind"] == "onnx" and p["loaded"]}
        assert {("hpc-kernel", "3"), ("hpc-kernel-none", "1")} <= loaded
        assert ("hpc-kernel", "2") in loaded  # earlier versions stay servable by name@version

    @pytest.mark.parametrize("site", ["hpc-kernel-alcf-mira", "hpc-kernel-kth-sp2"])
    async def test_a_cluster_may_name_a_site_model(
        self, client: httpx.AsyncClient, cid: str, site: str
    ) -> None:
        d = await _schedule_default_cluster(client, cid, policy=site)
        assert (d["policy"]["name"], d["policy"]["kind"]) == (site, "onnx")
        assert d["fallback"] == {"used": False, "reason": None}
        assert len(d["allocations"]) == 4


@pytest.fixture
async def client_without_model(
    settings: Settings, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    """The shipped models copied to a folder whose hpc-kernel model file is then removed."""
    models = tmp_path / "models"
    shutil.copytree(SHIPPED_MODELS, models)
    for onnx in models.glob("hpc-kernel*/*/policy.onnx"):
        onnx.unlink()
    app = create_app(settings.model_copy(update={"MODELS_DIR": str(models)}))
    async for c in open_client(app):
        yield c


class TestModelRemoved:
    async def test_fallback_decides_and_says_so(
        self, client_without_model: httpx.AsyncClient, cid: str
    ) -> None:
        d = await _schedule_default_cluster(client_without_model, cid)
        assert d["fallback"]["used"] is True
        assert d["fallback"]["reason"] in {"model_missing", "model_refused"}
        assert d["policy"]["kind"] == "heuristic"
        assert d["policy"]["name"] == "f1"
        assert len(d["allocations"]) == 4

    async def test_fallback_decides_without_backfilling_too(
        self, client_without_model: httpx.AsyncClient, cid: str
    ) -> None:
        d = await _schedule_default_cluster(client_without_model, cid, backfill="none")
        assert d["fallback"]["used"] is True
        assert d["fallback"]["reason"] in {"model_missing", "model_refused"}
        assert d["policy"]["kind"] == "heuristic"
