"""The Alembic head and the ORM metadata describe the same schema, on Postgres and SQLite."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import orm  # noqa: F401  (registers the tables)
from app.db.base import Base
from app.db.engine import make_engine
from app.db.migrate import alembic_config, current_revisions, head_revision, upgrade_to_head
from tests.fixtures.migrations import migrate


def _diff(connection: Connection) -> list[object]:
    context = MigrationContext.configure(
        connection, opts={"compare_type": True, "compare_server_default": True}
    )
    return list(compare_metadata(context, Base.metadata))


async def _head_diff(engine: AsyncEngine) -> list[object]:
    """What the database at the head (asserted) and the ORM metadata disagree on."""
    assert await current_revisions(engine) == {head_revision()}
    async with engine.connect() as conn:
        return await conn.run_sync(_diff)


async def test_autogenerate_finds_no_difference(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        await upgrade_to_head(engine)
        diff = await _head_diff(engine)
        assert diff == [], f"migrations and ORM disagree: {diff}"
    finally:
        await engine.dispose()


def test_the_script_directory_has_one_head() -> None:
    # Domains branch their migrations from one revision; a merge revision joins them again, so
    # `kairos migrate` and the image's `alembic upgrade head` name one target.
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    assert heads == [head_revision()], f"unmerged migration heads: {heads}"


def _tables(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names()) - {"alembic_version"}


async def test_upgrade_downgrade_to_base_and_upgrade_again(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        await migrate(engine, "head")
        assert await current_revisions(engine) == {head_revision()}
        async with engine.connect() as conn:
            assert set(Base.metadata.tables) <= await conn.run_sync(_tables)
        await migrate(engine, "base", down=True)
        assert await current_revisions(engine) == set()
        async with engine.connect() as conn:
            assert await conn.run_sync(_tables) == set()
        await migrate(engine, "head")
        diff = await _head_diff(engine)
        assert diff == [], f"migrations and ORM disagree after a round trip: {diff}"
    finally:
        await engine.dispose()


async def test_upgrade_is_idempotent(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        await upgrade_to_head(engine)
        await upgrade_to_head(engine)
        assert await current_revisions(engine) == {head_revision()}
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgresql://u@h:5432/db", "postgresql+asyncpg"),
        ("sqlite:///./x.db", "sqlite+aiosqlite"),
        ("sqlite+aiosqlite:///./x.db", "sqlite+aiosqlite"),
    ],
)
def test_plain_urls_pick_async_drivers(url: str, driver: str) -> None:
    from app.db.engine import async_url

    assert async_url(url).drivername == driver


def test_unsupported_url_is_refused() -> None:
    from app.db.engine import UnsupportedDatabaseError, async_url

    with pytest.raises(UnsupportedDatabaseError):
        async_url("mysql://u@h/db")
