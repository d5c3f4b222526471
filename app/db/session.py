"""The database handle built in ``lifespan``, and the transaction boundary.

``Database.transaction(write=...)`` is the only place that commits: services and repositories
``flush()``. On SQLite a write transaction is serialised in-process by an ``asyncio.Lock`` and
across processes by ``BEGIN IMMEDIATE`` (plus ``busy_timeout``), so read-then-write never fails
on lock upgrade.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.engine import SQLITE_BEGIN_IMMEDIATE, is_sqlite

#: Seconds ``/readyz`` waits for the database before calling it down.
PING_TIMEOUT_S = 2.0


class Database:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.sessionmaker = async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
        self.is_sqlite = is_sqlite(engine)
        self._write_lock = asyncio.Lock()

    @asynccontextmanager
    async def transaction(self, *, write: bool) -> AsyncIterator[AsyncSession]:
        guard: AbstractAsyncContextManager[object] = (
            self._write_lock if (write and self.is_sqlite) else nullcontext()
        )
        async with guard, self.sessionmaker() as session:
            if write and self.is_sqlite:
                await session.connection(execution_options={SQLITE_BEGIN_IMMEDIATE: True})
            try:
                yield session
                await session.commit()
            except BaseException:
                await session.rollback()
                raise

    @property
    def sqlite_write_lock(self) -> asyncio.Lock:
        """The in-process lock every SQLite write transaction holds (see the module doc)."""
        return self._write_lock

    async def ping(self, timeout_s: float = PING_TIMEOUT_S) -> bool:
        """Whether a pooled connection answers ``SELECT 1`` within ``timeout_s``; a connection
        that fails is invalidated by the pool, so a later ping after the database returns uses a
        new one."""
        try:
            async with asyncio.timeout(timeout_s), self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except Exception:  # any driver error, or no answer in time, means "not reachable"
            return False
        return True

    async def dispose(self) -> None:
        await self.engine.dispose()
