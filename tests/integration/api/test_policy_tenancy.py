"""Policies are scoped to tenants (ADR 0088): an upload is its tenant's alone, never takes a
shipped or heuristic name, and is recorded in the tenant's audit log (issue 23, findings 1, 5
and 8). Two tenants: ``acme-*`` (key ``kA``) and ``globex-*`` (key ``kB``), new in each test."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.conftest import open_client
from tests.factories import job_spec, make_cluster
from tests.fixtures import onnx_models as m

SHIPPED_MODELS = Path(__file__).resolve().parents[3] / "models"
A = {"Authorization": "Bearer kA"}
B = {"Authorization": "Bearer kB"}


@pytest.fixture
async def api(settings: Settings, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    models = tmp_path / "models"
    shutil.copytree(SHIPPED_MODELS, models)
    run = uuid.uuid4().hex[:8]  # the PostgreSQL database outlives the test: fresh tenants
    tenants = settings.model_copy(
        update={
            "API_KEYS": f"acme-{run}:kA,globex-{run}:kB",
            "MODELS_DIR": str(models),
            "MAX_BODY_BYTES": 1 << 20,
        }
    )
    async for c in open_client(create_app(tenants)):
        yield c


def _files(model: bytes, card: dict[str, Any] | str) -> dict[str, tuple[str, bytes, str]]:
    text = card if isinstance(card, str) else json.dumps(card)
    return {
        "model": ("policy.onnx", model, "application/octet-stream"),
        "card": ("card.json", text.encode(), "application/json"),
    }


async def _upload(
    api: httpx.AsyncClient, who: dict[str, str], name: str, version: str = "1", seed: int = 4
) -> httpx.Response:
    files = _files(m.kernel_model(seed=seed), m.card(name=name, version=version))
    return await api.post("/v1/policies", headers=who, files=files)


def _name() -> str:
    return f"own-{uuid.uuid4().hex[:8]}"


async def _cluster(api: httpx.AsyncClient, who: dict[str, str], **cluster: str) -> str:
    cid = f"c-{uuid.uuid4().hex[:12]}"
    api.headers.update(who)
    try:
        await make_cluster(api, cid, nodes=2, cluster=dict(cluster), cpu=8)
        jobs = [job_spec(f"j{i}", cpu=4, submit_time=float(i)) for i in range(6)]
        r = await api.post(f"/v1/clusters/{cid}/jobs/batch", json={"jobs": jobs})
        assert r.status_code == 201, r.text
    finally:
        api.headers.pop("Authorization")
    return cid


async def _dry_run(api: httpx.AsyncClient, who: dict[str, str], cid: str) -> dict[str, Any]:
    r = await api.post(
        f"/v1/clusters/{cid}/schedule", headers=who, json={"now": 100.0, "dry_run": True}
    )
    assert r.status_code == 200, r.text
    decision: dict[str, Any] = r.json()
    return decision


def _decide_body(policy: str) -> dict[str, Any]:
    return {
        "now": 10.0,
        "nodes": [{"id": "n1", "capacity": {"cpu": 8}}],
        "pending": [job_spec("a", cpu=2, submit_time=1.0), job_spec("b", cpu=2, submit_time=2.0)],
        "policy": policy,
    }


def _fields(response: httpx.Response) -> list[str | None]:
    return [d["field"] for d in response.json()["error"]["details"]]


class TestUploadsAreTenantScoped:
    async def test_an_upload_never_decides_for_another_tenant(self, api: httpx.AsyncClient) -> None:
        """Finding 1: globex's ``hpc-kernel@99`` made acme's default cluster decide with it."""
        cid = await _cluster(api, A)
        before = (await _dry_run(api, A, cid))["policy"]
        assert (before["name"], before["version"]) == ("hpc-kernel", "3")
        shipped = SHIPPED_MODELS / "hpc-kernel" / "3"
        card = json.loads((shipped / "card.json").read_text())
        files = _files((shipped / "policy.onnx").read_bytes(), {**card, "version": "99"})
        r = await api.post("/v1/policies", headers=B, files=files)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "reserved_policy_name"
        assert _fields(r) == ["body.card"]
        after = (await _dry_run(api, A, cid))["policy"]
        assert (after["name"], after["version"]) == ("hpc-kernel", "3")
        for who in (A, B):
            listed = (await api.get("/v1/policies", headers=who)).json()
            assert ("hpc-kernel", "99") not in {(p["name"], p["version"]) for p in listed}
        assert (await api.get("/v1/policies/hpc-kernel@99", headers=B)).status_code == 404

    async def test_another_tenants_upload_is_unknown_everywhere(
        self, api: httpx.AsyncClient
    ) -> None:
        name = _name()
        created = await _upload(api, B, name)
        assert created.status_code == 201, created.text
        for spec in (name, f"{name}@1"):
            r = await api.get(f"/v1/policies/{spec}", headers=A)
            assert r.status_code == 404, r.text
            assert (await api.get(f"/v1/policies/{spec}", headers=B)).status_code == 200
        assert created.json()["scope"] == "tenant"
        listed_a = (await api.get("/v1/policies", headers=A)).json()
        listed_b = (await api.get("/v1/policies", headers=B)).json()
        assert name not in {p["name"] for p in listed_a}
        assert {p["scope"] for p in listed_a} == {"shared"}
        assert [p["scope"] for p in listed_b if p["name"] == name] == ["tenant"]
        assert {p["name"] for p in listed_b if p["scope"] == "shared"} == {
            p["name"] for p in listed_a
        }

        for field in ("policy", "shadow_policy"):
            r = await api.put(
                f"/v1/clusters/c-{uuid.uuid4().hex[:8]}",
                headers=A,
                json={"resources": ["cpu"], field: name},
            )
            assert r.status_code == 422, r.text
            assert _fields(r) == [f"body.{field}"]
        cid = await _cluster(api, A)
        r = await api.post(f"/v1/clusters/{cid}/schedule", headers=A, json={"policy": name})
        assert r.status_code == 422, r.text
        assert _fields(r) == ["body.policy"]
        r = await api.post("/v1/decide", headers=A, json=_decide_body(name))
        assert r.status_code == 422, r.text
        assert _fields(r) == ["body.policy"]

    async def test_a_tenant_decides_with_its_own_upload_under_its_own_name(
        self, api: httpx.AsyncClient
    ) -> None:
        name = _name()
        assert (await _upload(api, B, name)).status_code == 201
        cid = await _cluster(api, B, policy=name, shadow_policy=name)
        decision = await _dry_run(api, B, cid)
        assert decision["policy"] == {"name": name, "version": "1", "kind": "onnx"}
        assert decision["fallback"] == {"used": False, "reason": None}
        assert decision["shadow"]["policy"] == name
        detail = (await api.get(f"/v1/decisions/{decision['id']}", headers=B)).json()
        assert detail["input"]["policy"] == name
        for spec in (name, f"{name}@1", name.upper()):
            r = await api.post("/v1/decide", headers=B, json=_decide_body(spec))
            assert r.status_code == 200, r.text
            assert r.json()["policy"] == {"name": name, "version": "1", "kind": "onnx"}
            assert r.json()["fallback"]["used"] is False
        assert (await _dry_run(api, A, await _cluster(api, A)))["policy"]["name"] == "hpc-kernel"

    async def test_two_tenants_may_each_upload_the_same_name(self, api: httpx.AsyncClient) -> None:
        name = _name()
        first = await _upload(api, A, name, seed=1)
        second = await _upload(api, B, name, seed=2)
        assert (first.status_code, second.status_code) == (201, 201), second.text
        mine_a = (await api.get(f"/v1/policies/{name}", headers=A)).json()
        mine_b = (await api.get(f"/v1/policies/{name}", headers=B)).json()
        assert mine_a["sha256"] == first.json()["sha256"]
        assert mine_b["sha256"] == second.json()["sha256"]
        assert mine_a["sha256"] != mine_b["sha256"]
        again = await _upload(api, B, name, seed=3)
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "policy_exists"
        listed = (await api.get("/v1/policies", headers=B)).json()
        assert [p["version"] for p in listed if p["name"] == name] == ["1"]

    @pytest.mark.parametrize("name", ["sjf", "SJF", "f1", "hpc-kernel", "HPC-Kernel-None"])
    async def test_an_upload_may_not_take_a_heuristic_or_shipped_name(
        self, api: httpx.AsyncClient, name: str
    ) -> None:
        """Finding 8: ``sjf@1`` was accepted, then listed twice and never decided."""
        r = await _upload(api, B, name, version="7")
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "reserved_policy_name"
        assert _fields(r) == ["body.card"]
        assert name in r.json()["error"]["message"]
        listed = (await api.get("/v1/policies", headers=B)).json()
        assert [p["scope"] for p in listed if p["name"].lower() == name.lower()] != []
        assert all(p["scope"] == "shared" for p in listed if p["name"].lower() == name.lower())
        assert len([p for p in listed if p["name"] == "sjf"]) == 1

    @pytest.mark.parametrize(
        "card",
        [
            pytest.param("[" * 100_000 + "]" * 100_000, id="100k-brackets"),
            pytest.param(
                json.dumps(m.card(name="deep-card", metrics=json.loads("[" * 40 + "]" * 40))),
                id="40-levels-in-a-valid-card",
            ),
        ],
    )
    async def test_a_deeply_nested_card_is_refused_on_the_card(
        self, api: httpx.AsyncClient, card: str
    ) -> None:
        """Finding 5: 100,000 nested brackets answered 500 (RecursionError)."""
        r = await api.post("/v1/policies", headers=A, files=_files(m.kernel_model(), card))
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "invalid_card"
        assert _fields(r) == ["body.card"]
        names = {p["name"] for p in (await api.get("/v1/policies", headers=A)).json()}
        assert "deep-card" not in names
        assert (await api.get("/v1/audit", headers=A)).json()["items"] == []


class TestAuditLog:
    async def test_uploads_are_recorded_for_their_tenant_alone(
        self, api: httpx.AsyncClient
    ) -> None:
        first, second, other = _name(), _name(), _name()
        created = [await _upload(api, B, first), await _upload(api, B, second, version="2.0")]
        assert [r.status_code for r in created] == [201, 201]
        assert (await _upload(api, A, other)).status_code == 201
        assert (await _upload(api, B, "sjf")).status_code == 422  # refused: not recorded
        assert (await _upload(api, B, first)).status_code == 409  # not recorded either

        page = await api.get("/v1/audit", headers=B)
        assert page.status_code == 200, page.text
        events = page.json()["items"]
        assert [(e["action"], e["subject"]) for e in events] == [
            ("policy.upload", f"{second}@2.0"),
            ("policy.upload", f"{first}@1"),
        ]
        assert events[0]["details"]["sha256"] == created[1].json()["sha256"]
        assert events[0]["details"]["name"] == second
        assert events[0]["at"] >= events[1]["at"] > 1.7e9
        assert page.json()["next_cursor"] is None
        theirs = (await api.get("/v1/audit", headers=A)).json()["items"]
        assert [e["subject"] for e in theirs] == [f"{other}@1"]

        one = (await api.get("/v1/audit", headers=B, params={"limit": 1})).json()
        assert [e["subject"] for e in one["items"]] == [f"{second}@2.0"]
        rest = await api.get(
            "/v1/audit", headers=B, params={"limit": 1, "cursor": one["next_cursor"]}
        )
        assert [e["subject"] for e in rest.json()["items"]] == [f"{first}@1"]
        assert rest.json()["next_cursor"] is None
        filtered = await api.get("/v1/audit", headers=B, params={"action": "cluster.delete"})
        assert filtered.json()["items"] == []

    async def test_bad_paging_arguments_name_the_field(self, api: httpx.AsyncClient) -> None:
        for params, field in [
            ({"cursor": "cGs6wrI"}, "query.cursor"),
            ({"limit": 0}, "query.limit"),
            ({"action": "Policy Upload"}, "query.action"),
        ]:
            r = await api.get("/v1/audit", headers=A, params=params)
            assert r.status_code == 422, r.text
            assert _fields(r) == [field]
        assert (await api.get("/v1/audit")).status_code == 401
