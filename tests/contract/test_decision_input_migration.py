"""Migration 0004 (``decisions.input_blob``): a row stored before it keeps its input readable,
a row stored after it holds its input compressed, and the downgrade writes every compressed
input back into ``input_snapshot``; on SQLite and on a fresh PostgreSQL database."""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.decision_input import pack, stored_input, unpack
from app.db.engine import make_engine
from app.db.migrate import alembic_config
from app.db.orm import DecisionRecord
from tests.conftest import PG_ADMIN_URL

OLD_INPUT: dict[str, Any] = {"now": 5.0, "nodes": [], "running": [], "pending": [], "policy": "f1"}
NEW_INPUT: dict[str, Any] = {"codec": "hpc-state/1", "state": {"now": 7.0, "nodes": []}}

_INSERT = (
    "INSERT INTO decisions (id, request_id, tenant, created_at, policy_name, policy_version,"
    " policy_kind, fallback_used, allocations, reservations, queue_length, latency_ms, dry_run,"
    " {column}) VALUES (:id, :id, 'default', CURRENT_TIMESTAMP, 'f1', '1', 'heuristic', false,"
    " '[]', '[]', 0, 0, true, :input)"
)


def _to(revision: str, *, down: bool) -> Any:
    def run(connection: Connection) -> None:
        (command.downgrade if down else command.upgrade)(alembic_config(connection), revision)

    return run


async def _migrate(engine: AsyncEngine, revision: str, *, down: bool = False) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(_to(revision, down=down))


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def empty_url(request: pytest.FixtureRequest, sqlite_url: str) -> AsyncIterator[str]:
    """An empty database (no schema): a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield sqlite_url
        return
    name = f"kairos_mig_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(_dsn(PG_ADMIN_URL))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def test_inputs_survive_the_upgrade_and_the_downgrade(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        await _migrate(engine, "0003")
        async with engine.begin() as conn:
            await conn.execute(
                text(_INSERT.format(column="input_snapshot")),
                {"id": "dec_old", "input": json.dumps(OLD_INPUT)},
            )
        await _migrate(engine, "heads")  # every branch (domains add migrations in parallel)
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
        await _migrate(engine, "0003", down=True)
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
