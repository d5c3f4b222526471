"""Shared fixtures: real PostgreSQL and SQLite databases migrated with Alembic, and the app.

PostgreSQL: one throwaway database per test session (and per xdist worker),
``kairos_test_<pid>_<worker>``, created on the server at ``KAIROS_TEST_PG_URL`` (default: the
machine's ``postgresql://postgres@127.0.0.1:5432/test``), migrated to head, dropped at the end.
SQLite: a fresh file per test in ``tmp_path``.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.engine import make_url

from app.db.engine import make_engine
from app.db.migrate import upgrade_to_head
from app.main import create_app
from app.settings import Settings

PG_ADMIN_URL = os.environ.get("KAIROS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _asyncpg_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(_asyncpg_dsn(PG_ADMIN_URL))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def _migrate(url: str) -> None:
    engine = make_engine(url)
    try:
        await upgrade_to_head(engine)
    finally:
        await engine.dispose()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = f"kairos_test_{os.getpid()}_{worker}".lower()
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    url = make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        asyncio.run(_migrate(url))
        yield url
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'kairos.db'}"


BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(request.getfixturevalue("sqlite_url"))


@pytest.fixture
def settings(database_url: str) -> Settings:
    # A generous deadline: the default clusters are decided by the shipped ONNX policy, and a
    # loaded CI machine must not turn that into a deadline fallback (tests of the deadline set
    # their own).
    return Settings(DATABASE_URL=database_url, MAX_BODY_BYTES=256 * 1024, DEFAULT_DEADLINE_MS=5_000)


async def open_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kairos.test") as c:
            yield c


@pytest.fixture
async def app(settings: Settings) -> FastAPI:
    return create_app(settings)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async for c in open_client(app):
        yield c


@pytest.fixture
def cid() -> str:
    """A cluster id no other test uses (the Postgres database is shared by the session)."""
    return f"c-{uuid.uuid4().hex[:12]}"
