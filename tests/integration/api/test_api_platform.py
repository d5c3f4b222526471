"""Cross-cutting behaviour: error shape, auth and tenancy, Idempotency-Key, body limits,
health, metrics, offline docs, OpenAPI quality."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select, update

from app.db.orm import IdempotencyKeyRecord
from app.db.session import Database
from app.kernel.clock import utc_now
from app.main import create_app
from app.services import idempotency
from app.settings import Settings
from tests.conftest import open_client
from tests.factories import cluster_body, job_spec, make_cluster

JSON = {"content-type": "application/json"}


def _is_error(r: httpx.Response, status: int, code: str | None = None) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    assert {"code", "message", "details"} <= set(body["error"])
    if code is not None:
        assert body["error"]["code"] == code


class TestErrors:
    async def test_malformed_json_is_400(self, client: httpx.AsyncClient, cid: str) -> None:
        r = await client.put(f"/v1/clusters/{cid}", content=b'{"resources": [', headers=JSON)
        _is_error(r, 400, "malformed_json")

    async def test_unknown_route_and_method(self, client: httpx.AsyncClient) -> None:
        _is_error(await client.get("/v1/nothing-here"), 404, "not_found")
        _is_error(await client.patch("/v1/clusters"), 405, "method_not_allowed")

    async def test_wrong_types_name_fields(self, client: httpx.AsyncClient, cid: str) -> None:
        r = await client.put(f"/v1/clusters/{cid}", json={"resources": "cpu", "labels": 3})
        _is_error(r, 422, "validation_error")
        fields = {d["field"] for d in r.json()["error"]["details"]}
        assert {"body.resources", "body.labels"} <= fields

    async def test_unknown_field_is_422(self, client: httpx.AsyncClient, cid: str) -> None:
        r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(colour="red"))
        _is_error(r, 422)
        assert r.json()["error"]["details"][0]["field"] == "body.colour"

    async def test_nul_characters_and_huge_numbers_are_422(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(name="a\u0000b"))
        _is_error(r, 422)
        r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(labels={"k": "\u0000"}))
        _is_error(r, 422)
        await make_cluster(client, cid, nodes=1)
        r = await client.post(f"/v1/clusters/{cid}/jobs", json=job_spec("j", walltime_s=1e300))
        _is_error(r, 422)
        r = await client.post(f"/v1/clusters/{cid}/schedule", json={"now": 1e300})
        _is_error(r, 422)

    async def test_malformed_json_is_400_on_every_body(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid, nodes=1)
        await client.post(f"/v1/clusters/{cid}/jobs", json=job_spec("j"))
        base = f"/v1/clusters/{cid}"
        for method, path in [
            ("PUT", f"{base}/nodes/n9"),
            ("PUT", f"{base}/nodes"),
            ("POST", f"{base}/jobs"),
            ("POST", f"{base}/jobs/batch"),
            ("POST", f"{base}/jobs/j/events"),
            ("POST", f"{base}/schedule"),
            ("POST", "/v1/decide"),
        ]:
            for raw in (b'{"a": ', b"\xff\xfe", b'{"a": 1} trailing'):
                r = await client.request(method, path, content=raw, headers=JSON)
                _is_error(r, 400, "malformed_json")
        assert (await client.get(f"{base}/jobs/j")).json()["state"] == "pending"
        assert (await client.get(f"{base}")).json()["nodes"] == 1

    async def test_nan_infinity_and_negative_numbers_are_refused(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid, nodes=1)
        await client.post(f"/v1/clusters/{cid}/jobs", json=job_spec("j"))
        base = f"/v1/clusters/{cid}"
        node = '{"nodes": [{"id": "x", "capacity": {"cpu": %s}}]}'
        job = '{"id": "k", "per_task": {"cpu": %s}, "walltime_s": 5}'
        for method, path, template in [
            ("PUT", f"{base}/nodes", node),
            ("POST", f"{base}/jobs/batch", '{"jobs": [' + job + "]}"),
            ("POST", f"{base}/jobs", '{"id": "k", "per_task": {"cpu": 1}, "walltime_s": %s}'),
            ("POST", f"{base}/jobs/j/events", '{"type": "failed", "at": %s}'),
            ("POST", f"{base}/schedule", '{"now": %s}'),
            ("POST", "/v1/decide", '{"now": %s, "nodes": []}'),
            ("POST", "/v1/decide", '{"now": 1, "nodes": [{"id": "n", "capacity": {"cpu": %s}}]}'),
        ]:
            for value in ("NaN", "Infinity", "-Infinity"):
                raw = (template % value).encode()
                r = await client.request(method, path, content=raw, headers=JSON)
                assert r.status_code in (400, 422), (path, value, r.text)
                assert r.json()["error"]["code"] in ("malformed_json", "validation_error")
        for method, path, body in [
            ("PUT", f"{base}/nodes", {"nodes": [{"id": "x", "capacity": {"cpu": -1}}]}),
            ("POST", f"{base}/jobs/batch", {"jobs": [job_spec("k", cpu=-0.5)]}),
            ("POST", f"{base}/jobs", job_spec("k", walltime_s=-1)),
            ("POST", f"{base}/jobs", job_spec("k", tasks=-1)),
            ("POST", "/v1/decide", {"now": 1, "nodes": [{"id": "n", "capacity": {"cpu": -4}}]}),
        ]:
            _is_error(await client.request(method, path, json=body), 422, "validation_error")
        for path in (f"{base}/jobs", f"{base}/nodes", f"{base}/decisions", "/v1/clusters"):
            for limit in (-1, 0):
                r = await client.get(path, params={"limit": limit})
                _is_error(r, 422, "validation_error")
        assert (await client.get(f"{base}/jobs/j")).json()["state"] == "pending"
        page = (await client.get(f"{base}/jobs")).json()
        assert [j["id"] for j in page["items"]] == ["j"]


class TestBodyLimit:
    async def test_declared_length_over_limit(self, client: httpx.AsyncClient, cid: str) -> None:
        big = b'{"resources": ["cpu"], "name": "' + b"x" * 300_000 + b'"}'
        r = await client.put(f"/v1/clusters/{cid}", content=big, headers=JSON)
        _is_error(r, 413, "payload_too_large")

    async def test_streamed_body_over_limit(self, client: httpx.AsyncClient, cid: str) -> None:
        async def chunks() -> AsyncIterator[bytes]:
            yield b'{"resources": ["cpu"], "name": "'
            for _ in range(40):
                yield b"x" * 10_000
            yield b'"}'

        r = await client.put(f"/v1/clusters/{cid}", content=chunks(), headers=JSON)
        assert "content-length" not in r.request.headers
        _is_error(r, 413, "payload_too_large")


class TestIdempotencyKey:
    async def test_replay_and_conflict(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid, nodes=1)
        await client.post(f"/v1/clusters/{cid}/jobs", json=job_spec("a"))
        key = {"Idempotency-Key": f"k-{cid}"}
        first = await client.post(f"/v1/clusters/{cid}/schedule", json={}, headers=key)
        again = await client.post(f"/v1/clusters/{cid}/schedule", json={}, headers=key)
        assert first.status_code == again.status_code == 200
        assert again.json() == first.json()
        assert again.headers["idempotent-replayed"] == "true"
        page = (await client.get(f"/v1/clusters/{cid}/decisions")).json()
        assert len(page["items"]) == 1  # the replay did not decide again
        other = await client.post(
            f"/v1/clusters/{cid}/schedule", json={"dry_run": True}, headers=key
        )
        _is_error(other, 409, "idempotency_key_reused")

    async def test_concurrent_duplicates_decide_once(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid, nodes=1)
        await client.post(f"/v1/clusters/{cid}/jobs", json=job_spec("a"))
        key = {"Idempotency-Key": f"dup-{cid}"}
        url = f"/v1/clusters/{cid}/schedule"
        answers = await asyncio.gather(*(client.post(url, json={}, headers=key) for _ in range(6)))
        statuses = sorted(r.status_code for r in answers)
        assert statuses.count(200) >= 1
        assert set(statuses) <= {200, 409}
        for r in answers:
            if r.status_code == 409:
                assert r.json()["error"]["code"] == "idempotency_key_in_progress"
                assert r.headers["retry-after"] == "1"
        ids = {r.json()["id"] for r in answers if r.status_code == 200}
        assert len(ids) == 1
        page = (await client.get(f"/v1/clusters/{cid}/decisions")).json()
        assert [d["id"] for d in page["items"]] == list(ids)

    async def test_failed_request_is_not_stored(self, client: httpx.AsyncClient, cid: str) -> None:
        key = {"Idempotency-Key": f"later-{cid}"}
        r = await client.post(f"/v1/clusters/{cid}/schedule", json={}, headers=key)
        assert r.status_code == 404  # stored: a client error replays as itself
        again = await client.post(f"/v1/clusters/{cid}/schedule", json={}, headers=key)
        assert again.status_code == 404
        assert again.headers["idempotent-replayed"] == "true"

    async def test_job_submission_with_key(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid)
        key = {"Idempotency-Key": f"j-{cid}"}
        a = await client.post(f"/v1/clusters/{cid}/jobs", json=job_spec("x"), headers=key)
        b = await client.post(f"/v1/clusters/{cid}/jobs", json=job_spec("x"), headers=key)
        assert (a.status_code, b.status_code) == (201, 201)  # the stored 201 is replayed
        assert b.json() == a.json()


async def _age_key(app: FastAPI, key: str, by: timedelta) -> None:
    """Move the key's row ``by`` into the past, as if it had been stored then."""
    database: Database = app.state.database
    async with database.transaction(write=True) as session:
        await session.execute(
            update(IdempotencyKeyRecord)
            .where(IdempotencyKeyRecord.key == key)
            .values(created_at=utc_now() - by)
        )


async def _key_rows(app: FastAPI, *keys: str) -> set[str]:
    database: Database = app.state.database
    async with database.transaction(write=False) as session:
        stmt = select(IdempotencyKeyRecord.key).where(IdempotencyKeyRecord.key.in_(keys))
        return set((await session.execute(stmt)).scalars())


class TestIdempotencyKeyExpiry:
    async def test_an_expired_key_runs_as_new(
        self, app: FastAPI, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid, nodes=1)
        await client.post(f"/v1/clusters/{cid}/jobs", json=job_spec("a"))
        key = f"exp-{cid}"
        url = f"/v1/clusters/{cid}/schedule"
        first = await client.post(url, json={"dry_run": True}, headers={"Idempotency-Key": key})
        assert first.status_code == 200
        await _age_key(app, key, timedelta(hours=23))  # inside the 24 h lifetime: replayed
        again = await client.post(url, json={"dry_run": True}, headers={"Idempotency-Key": key})
        assert again.headers["idempotent-replayed"] == "true"
        _is_error(
            await client.post(url, json={}, headers={"Idempotency-Key": key}),
            409,
            "idempotency_key_reused",
        )
        await _age_key(app, key, timedelta(hours=25))  # past it: the key is new again
        later = await client.post(url, json={}, headers={"Idempotency-Key": key})
        assert later.status_code == 200, later.text
        assert "idempotent-replayed" not in later.headers
        assert later.json()["id"] != first.json()["id"]
        replay = await client.post(url, json={}, headers={"Idempotency-Key": key})
        assert replay.headers["idempotent-replayed"] == "true"  # and stores its new response
        assert replay.json() == later.json()

    async def test_concurrent_retries_of_an_expired_key_decide_once(
        self, app: FastAPI, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid, nodes=1)
        await client.post(f"/v1/clusters/{cid}/jobs", json=job_spec("a"))
        key = {"Idempotency-Key": f"exp-dup-{cid}"}
        url = f"/v1/clusters/{cid}/schedule"
        first = await client.post(url, json={"dry_run": True}, headers=key)
        await _age_key(app, key["Idempotency-Key"], timedelta(days=2))
        answers = await asyncio.gather(*(client.post(url, json={}, headers=key) for _ in range(6)))
        assert {r.status_code for r in answers} <= {200, 409}
        ids = {r.json()["id"] for r in answers if r.status_code == 200}
        assert len(ids) == 1
        assert first.json()["id"] not in ids
        for r in answers:
            if r.status_code == 409:
                assert r.json()["error"]["code"] == "idempotency_key_in_progress"
        page = (await client.get(f"/v1/clusters/{cid}/decisions")).json()
        stored = {d["id"] for d in page["items"]}
        assert stored == ids | {first.json()["id"]}  # the first (dry) run and one more

    async def test_ttl_zero_remembers_forever(self, settings: Settings, cid: str) -> None:
        app = create_app(settings.model_copy(update={"IDEMPOTENCY_TTL_S": 0}))
        async for client in open_client(app):
            await make_cluster(client, cid)
            key = f"forever-{cid}"
            spec = job_spec("x")
            a = await client.post(
                f"/v1/clusters/{cid}/jobs", json=spec, headers={"Idempotency-Key": key}
            )
            await _age_key(app, key, timedelta(days=400))
            b = await client.post(
                f"/v1/clusters/{cid}/jobs", json=spec, headers={"Idempotency-Key": key}
            )
            assert b.headers["idempotent-replayed"] == "true"
            assert b.json() == a.json()

    async def test_purge_deletes_only_expired_keys_in_batches(
        self, app: FastAPI, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        keys = [f"p{i}-{cid}" for i in range(5)]
        for i, key in enumerate(keys):
            r = await client.post(
                f"/v1/clusters/{cid}/jobs", json=job_spec(f"j{i}"), headers={"Idempotency-Key": key}
            )
            assert r.status_code == 201
        for key in keys[:3]:
            await _age_key(app, key, timedelta(days=2))
        await _age_key(app, keys[3], timedelta(hours=12))
        gone = await idempotency.purge_expired(app.state.database, ttl=timedelta(days=1), batch=2)
        assert gone >= 3  # other tests' aged rows on the shared Postgres may go too
        assert await _key_rows(app, *keys) == set(keys[3:])

    async def test_the_service_purges_in_the_background(self, settings: Settings, cid: str) -> None:
        app = create_app(settings.model_copy(update={"IDEMPOTENCY_PURGE_INTERVAL_S": 0.05}))
        async for client in open_client(app):
            await make_cluster(client, cid)
            old, fresh = f"old-{cid}", f"fresh-{cid}"
            for key, job in ((old, "a"), (fresh, "b")):
                await client.post(
                    f"/v1/clusters/{cid}/jobs", json=job_spec(job), headers={"Idempotency-Key": key}
                )
            await _age_key(app, old, timedelta(days=2))
            for _ in range(200):  # the janitor runs every 50 ms; give a loaded machine 10 s
                if await _key_rows(app, old, fresh) == {fresh}:
                    break
                await asyncio.sleep(0.05)
            assert await _key_rows(app, old, fresh) == {fresh}


@pytest.fixture
async def auth_client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings.model_copy(update={"API_KEYS": "acme:key-a, globex:key-g"}))
    async for c in open_client(app):
        yield c


def _as(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class TestAuthAndTenancy:
    async def test_missing_and_bad_keys_are_401(self, auth_client: httpx.AsyncClient) -> None:
        _is_error(await auth_client.get("/v1/clusters"), 401, "unauthorized")
        _is_error(await auth_client.get("/v1/clusters", headers=_as("nope")), 401)
        _is_error(await auth_client.get("/v1/policies", headers={"Authorization": "Basic x"}), 401)
        assert (await auth_client.get("/healthz")).status_code == 200

    async def test_tenants_are_isolated(self, auth_client: httpx.AsyncClient, cid: str) -> None:
        a, g = _as("key-a"), _as("key-g")
        assert (
            await auth_client.put(f"/v1/clusters/{cid}", json=cluster_body(), headers=a)
        ).status_code == 201
        await auth_client.put(
            f"/v1/clusters/{cid}/nodes/n1", json={"capacity": {"cpu": 4}}, headers=a
        )
        d = (await auth_client.post(f"/v1/clusters/{cid}/schedule", json={}, headers=a)).json()
        for method, path in [
            ("GET", f"/v1/clusters/{cid}"),
            ("GET", f"/v1/clusters/{cid}/nodes"),
            ("GET", f"/v1/clusters/{cid}/jobs"),
            ("POST", f"/v1/clusters/{cid}/schedule"),
            ("GET", f"/v1/clusters/{cid}/decisions"),
            ("GET", f"/v1/decisions/{d['id']}"),
            ("DELETE", f"/v1/clusters/{cid}"),
        ]:
            r = await auth_client.request(
                method, path, headers=g, json={} if method == "POST" else None
            )
            _is_error(r, 404)
        listed = (await auth_client.get("/v1/clusters", headers=g)).json()["items"]
        assert cid not in [c["id"] for c in listed]
        # the same id is free for the other tenant
        assert (
            await auth_client.put(f"/v1/clusters/{cid}", json=cluster_body(), headers=g)
        ).status_code == 201
        assert (await auth_client.get(f"/v1/decisions/{d['id']}", headers=a)).status_code == 200

    async def test_job_and_node_calls_are_isolated(
        self, auth_client: httpx.AsyncClient, cid: str
    ) -> None:
        a, g = _as("key-a"), _as("key-g")
        base = f"/v1/clusters/{cid}"
        assert (await auth_client.put(base, json=cluster_body(), headers=a)).status_code == 201
        r = await auth_client.put(f"{base}/nodes/n1", json={"capacity": {"cpu": 4}}, headers=a)
        assert r.status_code == 201
        r = await auth_client.post(f"{base}/jobs", json=job_spec("j", cpu=1), headers=a)
        assert r.status_code == 201
        for method, path, body in [
            ("PUT", f"{base}/nodes/n1", {"capacity": {"cpu": 64}}),
            ("PUT", f"{base}/nodes", {"nodes": [{"id": "n2", "capacity": {"cpu": 64}}]}),
            ("POST", f"{base}/jobs", job_spec("k")),
            ("POST", f"{base}/jobs/batch", {"jobs": [job_spec("k")]}),
            ("GET", f"{base}/jobs/j", None),
            ("POST", f"{base}/jobs/j/events", {"type": "failed"}),
            ("DELETE", f"{base}/jobs/j", None),
        ]:
            r = await auth_client.request(method, path, headers=g, json=body)
            _is_error(r, 404)
        job = (await auth_client.get(f"{base}/jobs/j", headers=a)).json()
        assert job["state"] == "pending"
        jobs = (await auth_client.get(f"{base}/jobs", headers=a)).json()["items"]
        assert [j["id"] for j in jobs] == ["j"]
        nodes = (await auth_client.get(f"{base}/nodes", headers=a)).json()["items"]
        assert [(n["id"], n["capacity"]["cpu"]) for n in nodes] == [("n1", 4.0)]


class TestOperations:
    async def test_health_and_ready(self, client: httpx.AsyncClient) -> None:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        r = await client.get("/readyz")
        assert r.status_code == 200
        assert r.json() == {
            "status": "ok",
            "database": "ok",
            "queue": "ok",
            "policies": "ok",
            "missing_policies": [],  # every default policy is a loaded model (ADR 0089)
        }

    async def test_readyz_reports_database_down(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        settings = Settings(
            DATABASE_URL="postgresql://postgres@127.0.0.1:1/nothing", AUTO_MIGRATE=False
        )
        app = create_app(settings)
        async for c in open_client(app):
            r = await c.get("/readyz")
            assert r.status_code == 503
            assert r.json()["database"] == "down"

    async def test_metrics(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid, nodes=1)
        await client.post(f"/v1/clusters/{cid}/schedule", json={})
        await client.get(f"/v1/clusters/{cid}-missing")
        text = (await client.get("/metrics")).text
        schedule = 'route="/v1/clusters/{cluster_id}/schedule",status="200"'
        assert f'kairos_http_requests_total{{method="POST",{schedule}}} 1.0' in text
        assert 'route="/v1/clusters/{cluster_id}",status="404"' in text
        assert (
            'kairos_decisions_total{fallback_reason="none",kind="onnx",policy="hpc-kernel"} 1.0'
            in text
        )
        assert "kairos_decision_latency_seconds_bucket" in text
        latency = 'method="POST",route="/v1/clusters/{cluster_id}/schedule"'
        assert f"kairos_http_request_duration_seconds_count{{{latency}}} 1.0" in text

    @pytest.mark.parametrize("page", ["/docs", "/redoc"])
    async def test_docs_are_offline(self, client: httpx.AsyncClient, page: str) -> None:
        html = (await client.get(page)).text
        assert "swagger-ui-bundle.js" in html or "redoc.standalone.js" in html
        urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html) + re.findall(
            r"url: ?'([^']+)'", html
        )
        assert urls
        for url in urls:
            assert url.startswith("/"), f"external asset {url}"
            if url.startswith("/static/"):
                assert (await client.get(url)).status_code == 200
        assert "http://" not in html
        assert "https://" not in html

    async def test_swagger_ui_reads_our_openapi_version(self, client: httpx.AsyncClient) -> None:
        from app.api.docs import swagger_ui_dir

        spec = (await client.get("/openapi.json")).json()
        # Swagger UI 4.x refuses OpenAPI 3.1 documents ("Unable to render this definition")
        if spec["openapi"].startswith("3.1"):
            major = int(swagger_ui_dir().name.removeprefix("swagger-ui-").split(".")[0])
            assert major >= 5, swagger_ui_dir()

    async def test_openapi_is_documented(self, client: httpx.AsyncClient) -> None:
        spec = (await client.get("/openapi.json")).json()
        ops = [(p, m, op) for p, item in spec["paths"].items() for m, op in item.items()]
        assert len(ops) >= 20
        for path, method, op in ops:
            assert op.get("summary"), (path, method)
            assert op.get("description"), (path, method)
            tag = op["tags"][0]
            assert op["operationId"].startswith(f"{tag}-"), op["operationId"]
            body = op.get("requestBody")
            media = (body or {}).get("content", {}).get("application/json")
            if media is not None:  # (multipart uploads document their parts instead)
                ref = media["schema"].get("$ref", "")
                has_schema_example = bool(
                    ref and spec["components"]["schemas"][ref.rsplit("/", 1)[1]].get("examples")
                )
                assert media.get("examples") or has_schema_example, (path, method)
