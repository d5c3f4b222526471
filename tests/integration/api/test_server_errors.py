"""What the server answers when it cannot answer normally: an unexpected exception is a complete
500 on a connection that stays usable; a database that cannot be reached is 503
``backend_unavailable`` with ``Retry-After`` on every route that needs it (issue 23, findings 5
and 6), and ``POST /v1/decide`` still decides, answering ``stored: false`` (ADR 0087)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI, Request

from app.main import create_app
from app.settings import Settings
from tests.conftest import open_client
from tests.serving import free_port, serve_in_thread

DECIDE_BODY = {
    "now": 1000.0,
    "nodes": [{"id": "n1", "capacity": {"cpu": 4}}],
    "pending": [{"id": "p1", "per_task": {"cpu": 2}, "walltime_s": 60}],
    "policy": "fcfs",
}


def _app_with_failing_routes(settings: Settings) -> FastAPI:
    app = create_app(settings)

    @app.get("/test/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    @app.get("/test/peer")
    async def peer(request: Request) -> dict[str, int]:
        assert request.client is not None
        return {"port": request.client.port}

    return app


def test_a_500_keeps_the_keep_alive_connection_usable(sqlite_url: str) -> None:
    app = _app_with_failing_routes(Settings(DATABASE_URL=sqlite_url))
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        before = client.get("/test/peer").json()["port"]
        failed = client.get("/test/boom")
        assert failed.status_code == 500
        assert failed.json()["error"]["code"] == "internal_error"
        assert failed.headers.get("connection", "").lower() != "close"
        # the same connection (client port) serves the next request: nothing was dropped
        assert client.get("/test/peer").json()["port"] == before
        assert client.get("/healthz").status_code == 200


async def test_the_last_resort_handler_says_connection_close(sqlite_url: str) -> None:
    """An exception outside the error guard reaches Starlette's handler, after which the server
    drops the connection: that response says so."""
    app = create_app(Settings(DATABASE_URL=sqlite_url))
    handler = app.exception_handlers[Exception]
    request = Request({"type": "http", "method": "GET", "path": "/x", "headers": []})
    response = await handler(request, RuntimeError("a bug"))
    assert response.status_code == 500
    assert response.headers["connection"] == "close"


@pytest.fixture
def unreachable_settings() -> Settings:
    """PostgreSQL on a loopback port nobody listens on."""
    return Settings(
        DATABASE_URL=f"postgresql://postgres@127.0.0.1:{free_port()}/kairos",
        AUTO_MIGRATE=False,
        DEFAULT_DEADLINE_MS=5_000,
    )


@pytest.fixture
async def down_client(unreachable_settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async for c in open_client(create_app(unreachable_settings)):
        yield c


NODE = {"capacity": {"cpu": 4}}
JOB = {"id": "j1", "per_task": {"cpu": 1}, "walltime_s": 60}
POD = {
    "metadata": {"name": "pod-1", "namespace": "ml", "uid": "uid-1"},
    "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]},
}
BINDING = {"PodName": "pod-1", "PodNamespace": "ml", "PodUID": "uid-1", "Node": "n1"}

ROUTES_NEEDING_THE_DATABASE = [
    ("GET", "/v1/clusters", None),
    ("PUT", "/v1/clusters/c1", {"resources": ["cpu"]}),
    ("GET", "/v1/clusters/c1", None),
    ("DELETE", "/v1/clusters/c1", None),
    ("PUT", "/v1/clusters/c1/nodes/n1", NODE),
    ("PUT", "/v1/clusters/c1/nodes", {"nodes": [{"id": "n1", **NODE}]}),
    ("GET", "/v1/clusters/c1/nodes", None),
    ("POST", "/v1/clusters/c1/jobs", JOB),
    ("POST", "/v1/clusters/c1/jobs/batch", {"jobs": [JOB]}),
    ("GET", "/v1/clusters/c1/jobs", None),
    ("GET", "/v1/clusters/c1/jobs/j1", None),
    ("POST", "/v1/clusters/c1/jobs/j1/events", {"type": "finished"}),
    ("DELETE", "/v1/clusters/c1/jobs/j1", None),
    ("POST", "/v1/clusters/c1/schedule", {}),
    ("GET", "/v1/decisions/dec_1", None),
    ("GET", "/v1/clusters/c1/decisions", None),
    ("POST", "/v1/k8s/c1/filter", {"Pod": POD, "NodeNames": ["n1"]}),
    ("POST", "/v1/k8s/c1/prioritize", {"Pod": POD, "NodeNames": ["n1"]}),
    ("POST", "/v1/k8s/c1/bind", BINDING),
]


#: each route, and each ``POST`` again with an ``Idempotency-Key`` (claimed in the database)
CASES = [
    *(pytest.param(m, p, b, None, id=f"{m} {p}") for m, p, b in ROUTES_NEEDING_THE_DATABASE),
    *(
        pytest.param(m, p, b, "k-1", id=f"{m} {p} with Idempotency-Key")
        for m, p, b in ROUTES_NEEDING_THE_DATABASE
        if m == "POST"
    ),
]


@pytest.mark.parametrize(("method", "path", "body", "idempotency_key"), CASES)
async def test_every_route_needing_the_database_answers_503_while_it_is_unreachable(
    down_client: httpx.AsyncClient,
    method: str,
    path: str,
    body: dict[str, object] | None,
    idempotency_key: str | None,
) -> None:
    headers = {} if idempotency_key is None else {"Idempotency-Key": idempotency_key}
    content = None if body is None else json.dumps(body)
    if content is not None:
        headers["Content-Type"] = "application/json"
    response = await down_client.request(method, path, content=content, headers=headers)
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "backend_unavailable"
    assert int(response.headers["Retry-After"]) >= 1


async def test_readiness_says_the_database_is_down(down_client: httpx.AsyncClient) -> None:
    assert (await down_client.get("/healthz")).status_code == 200
    ready = await down_client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["database"] == "down"
    assert int(ready.headers["Retry-After"]) >= 1


@pytest.mark.parametrize("idempotency_key", [None, "k-decide"], ids=["plain", "idempotency-key"])
async def test_decide_answers_an_unstored_decision_while_the_database_is_unreachable(
    down_client: httpx.AsyncClient, idempotency_key: str | None
) -> None:
    headers = {} if idempotency_key is None else {"Idempotency-Key": idempotency_key}
    response = await down_client.post("/v1/decide", json=DECIDE_BODY, headers=headers)
    assert response.status_code == 200, response.text
    decision = response.json()
    assert decision["stored"] is False
    assert decision["allocations"] == [
        {"job_id": "p1", "placements": [{"node_id": "n1", "tasks": 1}]}
    ]
    assert (await down_client.get(f"/v1/decisions/{decision['id']}")).status_code == 503


async def test_a_stored_decision_says_so(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/decide", json=DECIDE_BODY)
    assert response.status_code == 200
    assert response.json()["stored"] is True
    stored = await client.get(f"/v1/decisions/{response.json()['id']}")
    assert stored.status_code == 200
    assert stored.json()["stored"] is True
