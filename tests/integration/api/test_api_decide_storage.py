"""``POST /v1/decide`` stores every decision exactly once through the group-commit writer
(ADR 0026): concurrent requests share transactions, a response means the row is committed, and a
repeated ``X-Request-ID`` is 409 for every request but one, even when the repeats arrive in the
same batch."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from app.db import decision_writer
from app.db.decision_writer import DecisionWriter, DuplicateRequestError
from app.db.orm import DecisionRecord
from app.db.session import Database
from app.schemas.decision import DECIDE_EXAMPLE


async def _count(app: FastAPI, request_ids: list[str]) -> int:
    database: Database = app.state.database
    async with database.transaction(write=False) as session:
        stmt = select(func.count()).where(DecisionRecord.request_id.in_(request_ids))
        return int((await session.execute(stmt)).scalar_one())


async def test_concurrent_decisions_are_each_stored_before_the_answer(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    ids = [f"req-{uuid.uuid4().hex}" for _ in range(40)]
    responses = await asyncio.gather(
        *(client.post("/v1/decide", json=DECIDE_EXAMPLE, headers={"X-Request-ID": i}) for i in ids)
    )
    assert [r.status_code for r in responses] == [200] * len(ids), responses[0].text
    assert [r.json()["request_id"] for r in responses] == ids
    assert await _count(app, ids) == len(ids)
    for r in responses[:3]:  # each answer is readable at once, with its input snapshot
        detail = await client.get(f"/v1/decisions/{r.json()['id']}")
        assert detail.status_code == 200, detail.text
        assert detail.json()["input"]["pending"][0]["id"] == "p1"
        assert detail.json()["created_at"] == r.json()["created_at"]


async def test_a_repeated_request_id_is_stored_once_and_answered_409(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    rid = f"req-{uuid.uuid4().hex}"
    others = [f"req-{uuid.uuid4().hex}" for _ in range(6)]
    calls = [rid] * 6 + others
    responses = await asyncio.gather(
        *(
            client.post("/v1/decide", json=DECIDE_EXAMPLE, headers={"X-Request-ID": i})
            for i in calls
        )
    )
    statuses = [r.status_code for r in responses]
    assert statuses[:6].count(200) == 1, statuses
    assert statuses[:6].count(409) == 5, statuses
    assert statuses[6:] == [200] * len(others)  # batch-mates of the duplicates are unaffected
    for r in responses[:6]:
        if r.status_code == 409:
            assert r.json()["error"]["code"] == "duplicate_request"
    assert await _count(app, [rid]) == 1
    assert await _count(app, others) == len(others)
    again = await client.post("/v1/decide", json=DECIDE_EXAMPLE, headers={"X-Request-ID": rid})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "duplicate_request"
    assert await _count(app, [rid]) == 1


def _record(request_id: str) -> DecisionRecord:
    return DecisionRecord(
        id=f"dec_{uuid.uuid4().hex}",
        request_id=request_id,
        tenant="default",
        policy_name="f1",
        policy_version="1",
        policy_kind="heuristic",
        fallback_used=False,
        allocations=[],
        reservations=[],
        queue_length=0,
        latency_ms=1.0,
        dry_run=True,
        input_snapshot={"now": 0.0, "nodes": []},
    )


async def test_a_duplicate_inside_one_batch_fails_alone(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """Queued in the same tick, the three records share one batch: the duplicate's
    IntegrityError sends the batch row by row, and only the second copy fails."""
    writer: DecisionWriter = app.state.decision_writer
    rid, other = f"req-{uuid.uuid4().hex}", f"req-{uuid.uuid4().hex}"
    results = await asyncio.gather(
        writer.add(_record(rid)),
        writer.add(_record(rid)),
        writer.add(_record(other)),
        return_exceptions=True,
    )
    assert results[0] is None
    assert isinstance(results[1], DuplicateRequestError)
    assert results[1].request_id == rid
    assert results[2] is None
    assert await _count(app, [rid]) == 1
    assert await _count(app, [other]) == 1


async def test_sqlite_decisions_wait_in_the_thread_while_another_process_writes(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """On a SQLite file the batch is written on the event loop by a connection that never
    waits (ADR 0055); when another connection holds the write lock, the batch is written by the
    writer's thread once the lock is free, and still answered only after its commit."""
    database: Database = app.state.database
    if not database.is_sqlite:
        pytest.skip("SQLite only")
    path = database.engine.url.database
    assert path is not None
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        ids = [f"req-{uuid.uuid4().hex}" for _ in range(3)]
        posts = [
            asyncio.ensure_future(
                client.post("/v1/decide", json=DECIDE_EXAMPLE, headers={"X-Request-ID": i})
            )
            for i in ids
        ]
        await asyncio.sleep(0.3)
        assert not any(p.done() for p in posts)  # not answered while not stored
        other.execute("COMMIT")
        responses = await asyncio.gather(*posts)
    finally:
        other.close()
    assert [r.status_code for r in responses] == [200] * 3, responses[0].text
    assert await _count(app, ids) == 3


async def test_sqlite_writer_checkpoints_the_wal_in_its_thread(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The event-loop connection never checkpoints; the writer's thread does, every
    ``CHECKPOINT_BYTES`` written, and the rows stay readable."""
    database: Database = app.state.database
    if not database.is_sqlite:
        pytest.skip("SQLite only")
    monkeypatch.setattr(decision_writer, "CHECKPOINT_BYTES", 1)
    writer: DecisionWriter = app.state.decision_writer
    ids = [f"req-{uuid.uuid4().hex}" for _ in range(5)]
    for rid in ids:
        await writer.add(_record(rid))
    for _ in range(50):  # the checkpoint runs in the background
        if writer._checkpointing is None:
            break
        await asyncio.sleep(0.02)
    assert writer._checkpointing is None
    assert await _count(app, ids) == len(ids)


async def test_records_queued_in_one_tick_share_one_commit(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """Group commit: records queued while the writer is idle go into its next transaction
    together, and each is readable by its id once its ``add`` returned."""
    writer: DecisionWriter = app.state.decision_writer
    transactions, rows = writer.transactions, writer.rows
    records = [_record(f"req-{uuid.uuid4().hex}") for _ in range(5)]
    await asyncio.gather(*(writer.add(r) for r in records))
    assert (writer.transactions - transactions, writer.rows - rows) == (1, 5)
    for record in records:
        detail = await client.get(f"/v1/decisions/{record.id}")
        assert detail.status_code == 200, detail.text
        assert detail.json()["request_id"] == record.request_id


async def test_concurrent_keyed_decisions_are_stored_once_and_replayed(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """Concurrent ``/v1/decide`` requests with an ``Idempotency-Key`` each: every decision is
    committed (sharing commits with its batch-mates) before it is answered, readable by id, and
    a retry with the same key answers the stored decision without storing another."""
    writer: DecisionWriter = app.state.decision_writer
    transactions, rows = writer.transactions, writer.rows
    keys = [f"key-{uuid.uuid4().hex}" for _ in range(24)]
    responses = await asyncio.gather(
        *(
            client.post("/v1/decide", json=DECIDE_EXAMPLE, headers={"Idempotency-Key": k})
            for k in keys
        )
    )
    assert [r.status_code for r in responses] == [200] * len(keys), responses[0].text
    answers = [r.json() for r in responses]
    assert all(a["stored"] for a in answers)
    assert not any(a["fallback"]["used"] for a in answers)
    assert writer.rows - rows == len(keys)
    assert 1 <= writer.transactions - transactions <= len(keys)
    request_ids = [a["request_id"] for a in answers]
    assert len(set(request_ids)) == len(keys)
    assert await _count(app, request_ids) == len(keys)
    for answer in answers:
        detail = await client.get(f"/v1/decisions/{answer['id']}")
        assert detail.status_code == 200, detail.text
        assert detail.json()["allocations"] == answer["allocations"]
        assert detail.json()["input"]["pending"][0]["id"] == "p1"
    stored = writer.rows
    retries = await asyncio.gather(
        *(
            client.post("/v1/decide", json=DECIDE_EXAMPLE, headers={"Idempotency-Key": k})
            for k in keys
        )
    )
    for answer, retry in zip(answers, retries, strict=True):
        assert retry.status_code == 200, retry.text
        assert retry.headers.get("Idempotent-Replayed") == "true"
        assert retry.json() == answer
    assert writer.rows == stored
    assert await _count(app, request_ids) == len(keys)


def _unlabelled(text: str) -> dict[str, float]:
    """The samples of a ``/metrics`` text that carry no label (counters, histogram sums)."""
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


async def test_metrics_show_the_writers_commits_and_rows(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """``/metrics`` exports the group commit's counters as the writer counts them: a duplicate
    (409) is no stored row, and batch-mates that shared a commit count one commit."""
    writer: DecisionWriter = app.state.decision_writer
    ids = [f"req-{uuid.uuid4().hex}" for _ in range(30)]
    calls = [*ids, ids[0]]
    responses = await asyncio.gather(
        *(
            client.post("/v1/decide", json=DECIDE_EXAMPLE, headers={"X-Request-ID": i})
            for i in calls
        )
    )
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * len(ids) + [409], statuses
    assert all(r.json()["stored"] for r in responses if r.status_code == 200)
    samples = _unlabelled((await client.get("/metrics")).text)
    commits = samples["kairos_decision_commits_total"]
    rows = samples["kairos_decision_rows_stored_total"]
    assert (commits, rows) == (writer.transactions, writer.rows)
    assert rows == len(ids)  # this app stored nothing else
    assert 1 <= commits <= rows
    assert samples["kairos_decision_rows_per_commit_count"] == commits
    assert samples["kairos_decision_rows_per_commit_sum"] == rows


async def test_a_failing_commit_hook_fails_no_request(
    app: FastAPI, client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The hook runs after the commit, before the batch is answered: what it raises is logged
    and every record of the batch is still answered as stored, and counted."""
    writer: DecisionWriter = app.state.decision_writer

    def broken(rows: int) -> None:
        raise RuntimeError(f"hook saw {rows} rows")

    writer.on_commit = broken
    transactions, rows = writer.transactions, writer.rows
    records = [_record(f"req-{uuid.uuid4().hex}") for _ in range(3)]
    await asyncio.wait_for(asyncio.gather(*(writer.add(r) for r in records)), 10.0)
    assert await _count(app, [r.request_id for r in records]) == len(records)
    assert (writer.transactions - transactions, writer.rows - rows) == (1, len(records))
    assert "on_commit hook failed" in caplog.text
    assert "hook saw 3 rows" in caplog.text
