"""Shared fixtures: real PostgreSQL and SQLite databases migrated with Alembic, and the app.

PostgreSQL: one throwaway database per test session (and per xdist worker),
``kairos_test_<pid>_<worker>``, created on the server at ``KAIROS_TEST_PG_URL`` (default: the
machine's ``postgresql://postgres@127.0.0.1:5432/test``), migrated to head, dropped at the end.
SQLite: ``sqlite_url`` is a fresh, empty file per test in ``tmp_path``; the ``database_url``
backend ``sqlite`` is a per-test copy of one file migrated to head once per session.

Without ``-m``, tests marked ``docker`` are deselected (``make test-compose`` runs them with
``-m docker``) and so are tests marked ``slow`` unless ``KAIROS_TEST_ALL=1`` (``make test-all``).
A ``-m`` expression selects by itself: ``-m slow``, ``-m "not docker"`` for everything else.
"""

from __future__ import annotations

import asyncio
import os
import shutil
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

#: ``KAIROS_TEST_ALL=1`` runs the tests marked ``slow`` too (``make test-all``).
RUN_ALL_ENV = "KAIROS_TEST_ALL"

#: the variable behind ``Settings.GC_FREEZE``
GC_FREEZE_ENV = "KAIROS_GC_FREEZE"

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


def _chosen_by_marker(config: pytest.Config) -> bool:
    return bool(config.option.markexpr)


def _runs_slow(config: pytest.Config) -> bool:
    return _chosen_by_marker(config) or os.environ.get(RUN_ALL_ENV, "") not in ("", "0")


def pytest_report_header(config: pytest.Config) -> str:
    if _chosen_by_marker(config):
        return "markers: the -m expression alone selects"
    if _runs_slow(config):
        return f"markers: slow selected ({RUN_ALL_ENV}); docker deselected (make test-compose)"
    return "markers: slow and docker deselected (make test-all runs slow, make test-compose docker)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without ``-m``: ``docker`` tests never run, ``slow`` ones only with ``KAIROS_TEST_ALL``."""
    if _chosen_by_marker(config):
        return
    skipped = {"docker"} if _runs_slow(config) else {"docker", "slow"}
    left = [i for i in items if not any(i.get_closest_marker(m) for m in skipped)]
    if len(left) < len(items):
        kept = {id(i) for i in left}
        config.hook.pytest_deselected(items=[i for i in items if id(i) not in kept])
        items[:] = left


@pytest.fixture(autouse=True)
def _no_startup_heap_freeze(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settings made during a test default to ``GC_FREEZE=false``: the freeze's full collection
    would walk this process's whole heap at every app start. A test marked
    ``startup_heap_freeze`` gets the service's own default; a value set outside the run stays."""
    if request.node.get_closest_marker("startup_heap_freeze") is not None:
        monkeypatch.delenv(GC_FREEZE_ENV, raising=False)
    elif GC_FREEZE_ENV not in os.environ:
        monkeypatch.setenv(GC_FREEZE_ENV, "false")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh, empty SQLite file (no schema)."""
    return f"sqlite:///{tmp_path / 'kairos.db'}"


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head, closed (no WAL left beside it): copied, never opened."""
    path = tmp_path_factory.mktemp("sqlite-template") / "kairos.db"
    asyncio.run(_migrate(f"sqlite:///{path}"))
    return path


@pytest.fixture
def migrated_sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    """This test's own copy of the migrated template (the same schema Alembic's head builds)."""
    path = tmp_path / "kairos.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(request.getfixturevalue("migrated_sqlite_url"))


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
