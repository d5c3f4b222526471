"""Group commit for the decision log of ``POST /v1/decide`` (ADR 0026).

Concurrent stateless decisions are stored by one background task: every record queued while the
previous transaction was committing goes into the next one (one ``INSERT`` executemany, one
commit), so N concurrent requests cost one transaction instead of N, and no request holds a
database connection (or, on SQLite, the process's write lock) while its decision is computed.

:meth:`DecisionWriter.add` returns only after the transaction holding the record committed: a
client never sees a decision that is not durable. A duplicate ``request_id`` (the UNIQUE guard of
exactly-once storage) fails only its own request: the batch is retried row by row, each in a
SAVEPOINT, and the duplicate gets :class:`DuplicateRequestError`.

On a SQLite file the transaction runs in one dedicated thread on a synchronous twin engine
(:func:`app.db.engine.sqlite_file_twin`), holding the process's SQLite write lock: one thread
hop per batch instead of one aiosqlite hop per statement. PostgreSQL (asyncpg) needs no thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from sqlalchemy import Engine, Table, insert
from sqlalchemy.exc import IntegrityError

from app.db.engine import SQLITE_BEGIN_IMMEDIATE, sqlite_file_twin
from app.db.orm import DecisionRecord
from app.db.session import Database
from app.domain.clock import utc_now

logger = logging.getLogger(__name__)

T = TypeVar("T")

_TABLE = cast(Table, DecisionRecord.__table__)
_COLUMNS = tuple(c.key for c in _TABLE.columns if c.key != "pk")
_INSERT = insert(DecisionRecord)


class DuplicateRequestError(Exception):
    """A decision with this ``request_id`` is already stored."""

    def __init__(self, request_id: str) -> None:
        super().__init__(f"request {request_id!r} was already decided")
        self.request_id = request_id


class WriterClosedError(RuntimeError):
    """:meth:`DecisionWriter.add` after :meth:`DecisionWriter.close`."""


@dataclass(slots=True)
class _Pending:
    record: DecisionRecord
    future: asyncio.Future[None]


def _row(record: DecisionRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in _COLUMNS}


class DecisionWriter:
    """One per process (built in ``lifespan``); ``max_batch`` rows per transaction at most."""

    def __init__(
        self, database: Database, *, max_batch: int = 256, sqlite_busy_timeout_s: float = 30.0
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.database = database
        self.max_batch = max_batch
        self._busy_timeout_s = sqlite_busy_timeout_s
        self._queue: asyncio.Queue[_Pending] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._sync: Engine | None = None
        self._thread: ThreadPoolExecutor | None = None

    def start(self) -> None:
        if self._task is not None:
            return
        self._closed = False
        self._sync = sqlite_file_twin(self.database.engine, busy_timeout_s=self._busy_timeout_s)
        if self._sync is not None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="kairos-decision-writer")
        self._queue = asyncio.Queue()
        self._task = asyncio.create_task(self._run(), name="decision-writer")

    async def close(self) -> None:
        """Write what is queued, then stop."""
        self._closed = True
        if self._task is None or self._queue is None:
            return
        queue, task = self._queue, self._task
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(queue.join(), 10.0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        self._task = None
        while not queue.empty():
            pending = queue.get_nowait()
            if not pending.future.done():
                pending.future.set_exception(WriterClosedError("decision writer stopped"))
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None
        if self._sync is not None:
            self._sync.dispose()
            self._sync = None

    async def add(self, record: DecisionRecord) -> None:
        """Store ``record``; returns once it is committed.

        Raises :class:`DuplicateRequestError` when its ``request_id`` is already stored (or is
        queued twice), and whatever the database raised when the transaction failed.
        """
        if self._closed or self._queue is None:
            raise WriterClosedError("decision writer is not running")
        if getattr(record, "created_at", None) is None:
            record.created_at = utc_now()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Pending(record, future))
        await future

    async def _run(self) -> None:
        assert self._queue is not None
        queue = self._queue
        while True:
            batch = [await queue.get()]
            while len(batch) < self.max_batch and not queue.empty():
                batch.append(queue.get_nowait())
            live = [p for p in batch if not p.future.done()]  # cancelled: the caller is gone
            try:
                if live:
                    await self._write(live)
            finally:
                for _ in batch:
                    queue.task_done()

    async def _write(self, batch: Sequence[_Pending]) -> None:
        try:
            await self._insert_all(batch)
        except IntegrityError:
            await self._write_each(batch)
            return
        except Exception as exc:  # the transaction failed: every request of it fails
            logger.exception("could not store %d decisions", len(batch))
            for pending in batch:
                _settle(pending, exc)
            return
        for pending in batch:
            _settle(pending, None)

    async def _insert_all(self, batch: Sequence[_Pending]) -> None:
        rows = [_row(p.record) for p in batch]
        if self._sync is not None:
            await self._in_thread(lambda: _sync_insert_all(self._engine(), rows))
            return
        async with self.database.transaction(write=True) as session:
            await session.execute(_INSERT, rows)

    async def _write_each(self, batch: Sequence[_Pending]) -> None:
        """Row by row, each in a SAVEPOINT: a duplicate fails only its own request."""
        rows = [_row(p.record) for p in batch]
        try:
            if self._sync is not None:
                stored = await self._in_thread(lambda: _sync_insert_each(self._engine(), rows))
            else:
                stored = await self._insert_each(rows)
        except Exception as exc:
            logger.exception("could not store %d decisions", len(batch))
            for pending in batch:
                _settle(pending, exc)
            return
        for pending, ok in zip(batch, stored, strict=True):
            _settle(pending, None if ok else DuplicateRequestError(pending.record.request_id))

    async def _insert_each(self, rows: list[dict[str, Any]]) -> list[bool]:
        stored: list[bool] = []
        async with self.database.transaction(write=True) as session:
            for row in rows:
                try:
                    async with session.begin_nested():
                        await session.execute(_INSERT, [row])
                except IntegrityError:
                    stored.append(False)
                else:
                    stored.append(True)
        return stored

    def _engine(self) -> Engine:
        assert self._sync is not None
        return self._sync

    async def _in_thread(self, work: Callable[[], T]) -> T:
        """``work`` in the writer's thread, holding the process's SQLite write lock."""
        async with self.database.sqlite_write_lock:
            return await asyncio.get_running_loop().run_in_executor(self._thread, work)


def _sync_insert_all(engine: Engine, rows: list[dict[str, Any]]) -> None:
    with engine.connect() as conn:
        conn.execution_options(**{SQLITE_BEGIN_IMMEDIATE: True})
        with conn.begin():
            conn.execute(insert(_TABLE), rows)


def _sync_insert_each(engine: Engine, rows: list[dict[str, Any]]) -> list[bool]:
    stored: list[bool] = []
    with engine.connect() as conn:
        conn.execution_options(**{SQLITE_BEGIN_IMMEDIATE: True})
        with conn.begin():
            for row in rows:
                try:
                    with conn.begin_nested():
                        conn.execute(insert(_TABLE), [row])
                except IntegrityError:
                    stored.append(False)
                else:
                    stored.append(True)
    return stored


def _settle(pending: _Pending, exc: BaseException | None) -> None:
    if pending.future.done():
        return
    if exc is None:
        pending.future.set_result(None)
    else:
        pending.future.set_exception(exc)
