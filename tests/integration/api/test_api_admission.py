"""Admission (ADR 0024): past ``KAIROS_MAX_DECISIONS_IN_FLIGHT`` decisions at once, a replica
refuses the next one with 429 ``overloaded`` and ``Retry-After``; nothing is decided, stored or
applied, and the retry (same ``X-Request-ID`` or ``Idempotency-Key``) runs as new. A request
whose ``Idempotency-Key`` already holds an answer gets that answer instead."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, update

from app.api.middleware import AnsweredKeys
from app.db.orm import DecisionRecord, IdempotencyKeyRecord
from app.db.session import Database
from app.kernel.clock import utc_now
from app.main import create_app
from app.schemas.decision import DECIDE_EXAMPLE
from app.services import idempotency
from app.services.decision import DecisionGate
from app.settings import Settings
from tests.factories import job_spec, make_cluster

LIMIT = 2


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(
        DATABASE_URL=database_url, DEFAULT_DEADLINE_MS=5_000, MAX_DECISIONS_IN_FLIGHT=LIMIT
    )


@contextlib.contextmanager
def _busy(app: FastAPI) -> Iterator[DecisionGate]:
    """The replica at its limit: LIMIT decisions admitted and not finished."""
    gate: DecisionGate = app.state.decisions.gate
    with contextlib.ExitStack() as stack:
        for _ in range(LIMIT):
            stack.enter_context(gate.admit())
        yield gate


async def _stored(app: FastAPI, request_id: str) -> int:
    database: Database = app.state.database
    async with database.transaction(write=False) as session:
        stmt = select(func.count()).where(DecisionRecord.request_id == request_id)
        return int((await session.execute(stmt)).scalar_one())


def _refused(r: httpx.Response) -> None:
    assert r.status_code == 429, r.text
    error = r.json()["error"]
    assert error["code"] == "overloaded"
    assert "KAIROS_MAX_DECISIONS_IN_FLIGHT" in error["message"]
    assert r.headers["Retry-After"] == "1"


async def test_decide_past_the_limit_is_429_and_the_retry_is_new(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    rid = f"req-{uuid.uuid4().hex}"
    with _busy(app) as gate:
        r = await client.post("/v1/decide", json=DECIDE_EXAMPLE, headers={"X-Request-ID": rid})
        _refused(r)
        assert gate.refused == {"limit": 1}
        metrics = (await client.get("/metrics")).text
        assert f"kairos_decisions_in_flight {float(LIMIT)}" in metrics
        assert 'status="429"' in metrics
        # health and reads are not decisions: still served
        assert (await client.get("/readyz")).status_code == 200
    assert await _stored(app, rid) == 0
    r = await client.post("/v1/decide", json=DECIDE_EXAMPLE, headers={"X-Request-ID": rid})
    assert r.status_code == 200, r.text
    assert await _stored(app, rid) == 1
    assert gate.in_flight == 0


async def test_a_full_replica_refuses_before_reading_the_body(
    app: FastAPI, client: httpx.AsyncClient, cid: str
) -> None:
    """The refusal comes before the body is read (``AdmissionMiddleware``): a body that is not
    even JSON, or larger than the body limit, gets the 429, not the 400 or 413 it would get
    once read; the refusal is counted under its route. Other requests are served."""
    with _busy(app) as gate:
        r = await client.post(
            "/v1/decide", content=b"{not json", headers={"content-type": "application/json"}
        )
        _refused(r)
        huge = b" " * (app.state.settings.MAX_BODY_BYTES + 1)
        _refused(await client.post(f"/v1/clusters/{cid}/schedule", content=huge))
        assert gate.refused == {"limit": 2}
        metrics = (await client.get("/metrics")).text
        assert 'route="/v1/decide",status="429"' in metrics
        assert 'route="/v1/clusters/{cluster_id}/schedule",status="429"' in metrics
        await make_cluster(client, cid, nodes=1, cluster={"policy": "f1"}, cpu=8)
        assert (await client.get(f"/v1/clusters/{cid}")).status_code == 200
    r = await client.post(
        "/v1/decide", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400  # once admitted, the body is read and found not to be JSON


async def test_a_refused_round_applies_nothing_and_keeps_its_idempotency_key(
    app: FastAPI, client: httpx.AsyncClient, cid: str
) -> None:
    await make_cluster(client, cid, nodes=1, cluster={"policy": "f1"}, cpu=8)
    r = await client.post(
        f"/v1/clusters/{cid}/jobs/batch", json={"jobs": [job_spec("a", cpu=4, submit_time=1.0)]}
    )
    assert r.status_code == 201, r.text
    key = {"Idempotency-Key": f"round-{uuid.uuid4().hex}"}
    with _busy(app):
        _refused(await client.post(f"/v1/clusters/{cid}/schedule", json={}, headers=key))
    cluster = (await client.get(f"/v1/clusters/{cid}")).json()
    assert cluster["pending_jobs"] == 1
    assert cluster["allocated"].get("cpu", 0) == 0
    assert (await client.get(f"/v1/clusters/{cid}/decisions")).json()["items"] == []
    # the key was not spent on the refusal: the retry runs, and a repeat replays it
    first = await client.post(f"/v1/clusters/{cid}/schedule", json={}, headers=key)
    assert first.status_code == 200, first.text
    assert [a["job_id"] for a in first.json()["allocations"]] == ["a"]
    again = await client.post(f"/v1/clusters/{cid}/schedule", json={}, headers=key)
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]


async def test_a_full_replica_answers_from_a_key_that_holds_an_answer(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """A retry whose answer is stored (its first response was lost, say) is replayed while
    the replica is full, with no decision and no refusal counted; the same key with another
    body is the usual 409; a free key is refused and stays free."""
    key = f"k-{uuid.uuid4().hex}"
    rid = f"req-{uuid.uuid4().hex}"
    headers = {"Idempotency-Key": key, "X-Request-ID": rid}
    first = await client.post("/v1/decide", json=DECIDE_EXAMPLE, headers=headers)
    assert first.status_code == 200, first.text
    with _busy(app) as gate:
        again = await client.post("/v1/decide", json=DECIDE_EXAMPLE, headers=headers)
        assert again.status_code == 200, again.text
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json() == first.json()
        assert gate.refused == {"limit": 0}
        other = {**DECIDE_EXAMPLE, "now": DECIDE_EXAMPLE["now"] + 1}
        reused = await client.post("/v1/decide", json=other, headers=headers)
        assert reused.status_code == 409
        assert reused.json()["error"]["code"] == "idempotency_key_reused"
        free = {"Idempotency-Key": f"k-{uuid.uuid4().hex}"}
        _refused(await client.post("/v1/decide", json=DECIDE_EXAMPLE, headers=free))
        assert gate.refused == {"limit": 1}
        metrics = (await client.get("/metrics")).text
        assert 'route="/v1/decide",status="409"' in metrics
    assert await _stored(app, rid) == 1
    # the refused key was not claimed: its request runs now
    r = await client.post("/v1/decide", json=DECIDE_EXAMPLE, headers=free)
    assert r.status_code == 200, r.text
    assert "idempotent-replayed" not in r.headers


async def test_a_full_replica_reads_only_keys_it_answered_and_never_expired_ones(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database is read only for a key whose answer this replica stored (other refusals
    stay free of reads: the SDK sends a key with every call), and an expired answer is not
    replayed (a new request would take the key over)."""
    database: Database = app.state.database
    reads: list[str] = []
    lookup = idempotency.lookup

    async def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(kwargs["key"])
        return await lookup(*args, **kwargs)

    monkeypatch.setattr(idempotency, "lookup", counted)
    expired = f"k-{uuid.uuid4().hex}"
    assert (
        await client.post("/v1/decide", json=DECIDE_EXAMPLE, headers={"Idempotency-Key": expired})
    ).status_code == 200
    ttl = timedelta(seconds=app.state.settings.IDEMPOTENCY_TTL_S)
    async with database.transaction(write=True) as session:
        await session.execute(
            update(IdempotencyKeyRecord)
            .where(IdempotencyKeyRecord.key == expired)
            .values(created_at=utc_now() - ttl - timedelta(minutes=1))
        )
    # a key in progress elsewhere (another replica still deciding its first request)
    elsewhere = f"k-{uuid.uuid4().hex}"
    raw = json.dumps(DECIDE_EXAMPLE).encode()
    claimed = await idempotency.claim(
        database,
        tenant="default",
        key=elsewhere,
        method="POST",
        path="/v1/decide",
        digest=idempotency.request_hash("POST", "/v1/decide", raw),
    )
    assert claimed is None
    with _busy(app) as gate:
        _refused(
            await client.post(
                "/v1/decide", json=DECIDE_EXAMPLE, headers={"Idempotency-Key": expired}
            )
        )
        _refused(
            await client.post(
                "/v1/decide",
                content=raw,
                headers={"Idempotency-Key": elsewhere, "content-type": "application/json"},
            )
        )
        assert gate.refused == {"limit": 2}
    assert reads == [expired]


async def test_every_decision_leaves_the_gate_whatever_its_end(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """Answered, refused as invalid (422) or a repeated request id (409): the count returns to
    zero, so a replica never locks itself out."""
    gate: DecisionGate = app.state.decisions.gate
    rid = f"req-{uuid.uuid4().hex}"
    ok = await client.post("/v1/decide", json=DECIDE_EXAMPLE, headers={"X-Request-ID": rid})
    assert ok.status_code == 200
    dup = await client.post("/v1/decide", json=DECIDE_EXAMPLE, headers={"X-Request-ID": rid})
    assert dup.status_code == 409
    bad = {
        **DECIDE_EXAMPLE,
        "running": [
            {
                "job": job_spec("r", cpu=1),
                "placements": [{"node_id": "nowhere", "tasks": 1}],
                "start_time": 1.0,
            }
        ],
    }
    invalid = await client.post("/v1/decide", json=bad)
    assert invalid.status_code == 422, invalid.text
    assert gate.in_flight == 0
    for _ in range(3 * LIMIT):  # more decisions than the limit, one after another: all admitted
        assert (await client.post("/v1/decide", json=DECIDE_EXAMPLE)).status_code == 200
    assert gate.refused == {"limit": 0}


async def test_the_admission_settings_reach_the_gate(database_url: str) -> None:
    tuned = Settings(DATABASE_URL=database_url, MAX_DECISIONS_IN_FLIGHT=100, RETRY_AFTER_S=3)
    app = create_app(tuned)
    async with app.router.lifespan_context(app):
        gate: DecisionGate = app.state.decisions.gate
        assert (gate.limit, gate.retry_after_s) == (100, 3)


def test_no_limit_admits_any_number() -> None:
    gate = DecisionGate(0)
    with contextlib.ExitStack() as stack:
        for _ in range(10_000):
            stack.enter_context(gate.admit())
        assert gate.in_flight == 10_000
    assert gate.in_flight == 0


def test_answered_keys_keep_the_newest() -> None:
    keys = AnsweredKeys(capacity=2)
    keys.add("a")
    keys.add("b")
    keys.add("a")  # seen again: newest now
    keys.add("c")
    assert "a" in keys
    assert "c" in keys
    assert "b" not in keys
    assert len(keys) == 2
