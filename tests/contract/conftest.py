"""Fixtures of the contract tests: an empty database for the migration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fixtures.migrations import empty_postgres_database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def empty_url(request: pytest.FixtureRequest, sqlite_url: str) -> AsyncIterator[str]:
    """An empty database (no schema): a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield sqlite_url
        return
    async with empty_postgres_database() as url:
        yield url
