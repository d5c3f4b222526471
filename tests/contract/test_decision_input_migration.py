"""Migration 0004 (``decisions.input_blob``): a row stored before it keeps its input readable,
a row stored after it holds its input compressed, and the downgrade writes every compressed
input back into ``input_snapshot``; on SQLite and on a fresh PostgreSQL database."""

from __future__ import annotations

import json
import zlib
from typing import Any

import pytest
from sqlalchemy import text

from app.db.decision_input import pack, stored_input, unpack
from app.db.engine import make_engine
from app.db.orm import DecisionRecord
from tests.fixtures.migrations import migrate

OLD_INPUT: dict[str, Any] = {"now": 5.0, "nodes": [], "running": [], "pending": [], "policy": "f1"}
NEW_INPUT: dict[str, Any] = {"codec": "hpc-state/1", "state": {"now": 7.0, "nodes": []}}

_INSERT = (
    "INSERT INTO decisions (id, request_id, tenant, created_at, policy_name, policy_version,"
    " policy_kind, fallback_used, allocations, reservations, queue_length, latency_ms, dry_run,"
    " {column}) VALUES (:id, :id, 'default', CURRENT_TIMESTAMP, 'f1', '1', 'heuristic', false,"
    " '[]', '[]', 0, 0, true, :input)"
)


async def test_inputs_survive_the_upgrade_and_the_downgrade(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        await migrate(engine, "0003")
        async with engine.begin() as conn:
            await conn.execute(
                text(_INSERT.format(column="input_snapshot")),
                {"id": "dec_old", "input": json.dumps(OLD_INPUT)},
            )
        await migrate(engine, "head")
        async with engine.begin() as conn:
            await conn.execute(
                text(_INSERT.format(column="input_blob")),
                {"id": "dec_new", "input": pack(NEW_INPUT)},
            )
        async with engine.connect() as conn:
            rows = {
                r.id: r
                for r in await conn.execute(
                    text("SELECT id, input_snapshot, input_blob FROM decisions")
                )
            }
        assert rows["dec_old"].input_blob is None
        assert rows["dec_new"].input_snapshot is None
        assert unpack(rows["dec_new"].input_blob) == NEW_INPUT
        await migrate(engine, "0003", down=True)
        async with engine.connect() as conn:
            result = await conn.execute(
                text("SELECT id, CAST(input_snapshot AS TEXT) FROM decisions")
            )
            back = {str(r[0]): str(r[1]) for r in result}
        assert {k: json.loads(v) for k, v in back.items()} == {
            "dec_old": OLD_INPUT,
            "dec_new": NEW_INPUT,
        }
    finally:
        await engine.dispose()


def test_stored_input_reads_the_blob_or_the_old_column() -> None:
    assert stored_input(DecisionRecord(input_blob=pack(NEW_INPUT), input_snapshot=None)) == (
        NEW_INPUT
    )
    assert stored_input(DecisionRecord(input_blob=None, input_snapshot=OLD_INPUT)) == OLD_INPUT


def test_a_damaged_blob_is_refused_not_misread() -> None:
    blob = bytearray(pack(NEW_INPUT))
    blob[len(blob) // 2] ^= 0xFF
    with pytest.raises((ValueError, zlib.error)):
        unpack(bytes(blob))
