"""Group commit for the decision log of ``POST /v1/decide`` (ADR 0026).

Concurrent stateless decisions are stored by one background task: every record queued while the
previous transaction was committing goes into the next one (one ``INSERT`` executemany, one
commit), so N concurrent requests cost one transaction instead of N, and no request holds a
database connection (or, on SQLite, the process's write lock) while its decision is computed.

:meth:`DecisionWriter.add` returns only after the transaction holding the record committed: a
client never sees a decision that is not durable. A duplicate ``request_id`` (the UNIQUE guard of
exactly-once storage) fails only its own request: the batch is retried row by row, each in a
SAVEPOINT, and the duplicate gets :class:`DuplicateRequestError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError

from app.db.orm import DecisionRecord
from app.db.session import Database
from app.domain.clock import utc_now

logger = logging.getLogger(__name__)

_COLUMNS = tuple(c.key for c in DecisionRecord.__table__.columns if c.key != "pk")


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

    def __init__(self, database: Database, *, max_batch: int = 256) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.database = database
        self.max_batch = max_batch
        self._queue: asyncio.Queue[_Pending] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def start(self) -> None:
        if self._task is not None:
            return
        self._closed = False
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
        async with self.database.transaction(write=True) as session:
            await session.execute(insert(DecisionRecord), [_row(p.record) for p in batch])

    async def _write_each(self, batch: Sequence[_Pending]) -> None:
        """Row by row, each in a SAVEPOINT: a duplicate fails only its own request."""
        outcomes: list[BaseException | None] = []
        try:
            async with self.database.transaction(write=True) as session:
                for pending in batch:
                    try:
                        async with session.begin_nested():
                            await session.execute(insert(DecisionRecord), [_row(pending.record)])
                    except IntegrityError:
                        outcomes.append(DuplicateRequestError(pending.record.request_id))
                    else:
                        outcomes.append(None)
        except Exception as exc:
            logger.exception("could not store %d decisions", len(batch))
            for pending in batch:
                _settle(pending, exc)
            return
        for pending, outcome in zip(batch, outcomes, strict=True):
            _settle(pending, outcome)


def _settle(pending: _Pending, exc: BaseException | None) -> None:
    if pending.future.done():
        return
    if exc is None:
        pending.future.set_result(None)
    else:
        pending.future.set_exception(exc)
