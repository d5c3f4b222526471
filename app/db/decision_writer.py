"""Group commit for the decision log of ``POST /v1/decide`` (ADR 0026).

Concurrent stateless decisions are stored by one background task: every record queued while the
previous transaction was committing goes into the next one (one ``INSERT`` executemany, one
commit), so N concurrent requests cost one transaction instead of N, and no request holds a
database connection (or, on SQLite, the process's write lock) while its decision is computed.

:meth:`DecisionWriter.add` returns only after the transaction holding the record committed: a
decision answered as stored is durable. When the transaction fails, every request of it gets the
error (``/v1/decide`` then answers ``stored: false`` if the database was unavailable, ADR 0087),
and the writer goes on with the next batch. A duplicate ``request_id`` (the UNIQUE guard of
exactly-once storage) fails only its own request: the batch is retried row by row, each in a
SAVEPOINT, and the duplicate gets :class:`DuplicateRequestError`.

On a SQLite file (ADR 0055) the batch is one prepared ``INSERT`` executemany on a raw pysqlite
connection of a synchronous twin engine (:func:`app.db.engine.sqlite_file_twin`), run right on
the event loop while holding the process's SQLite write lock: a 64-job decision is ~0.1 ms of
SQLite work, less than a thread hop there and back. That connection never waits
(``busy_timeout=0``): when another process holds the database's write lock the batch goes to the
writer's thread, on a second connection that waits as long as ``sqlite_busy_timeout_s``. It
does not checkpoint the WAL either (a checkpoint fsyncs, ~10 ms): the writer's thread runs a
passive checkpoint after every ~4 MB written. PostgreSQL (asyncpg) needs no thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Engine, PoolProxiedConnection, Table, insert
from sqlalchemy.exc import IntegrityError

from app.db.engine import backend_unavailable, sqlite_file_twin
from app.db.orm import DecisionRecord
from app.db.session import Database
from app.kernel.clock import utc_now

logger = logging.getLogger(__name__)

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


class _SqliteBusyError(Exception):
    """The non-waiting connection met another process's write lock."""


#: Written bytes after which the writer's thread checkpoints the WAL (SQLite's own automatic
#: checkpoint is at 1000 pages of 4 kB).
CHECKPOINT_BYTES = 4 * 1024 * 1024


class _SqliteSink:
    """The decisions ``INSERT`` on two raw pysqlite connections of the twin engine: ``now``
    (event loop; never waits for a lock, never checkpoints) and ``waiting`` (writer thread).

    Values go through the columns' own SQLAlchemy bind processors (JSON serializer, SQLite
    ``DATETIME`` text, booleans), so rows are stored exactly as the ORM would store them.
    """

    def __init__(self, engine: Engine) -> None:
        dialect = engine.dialect
        columns = [c for c in _TABLE.columns if c.key != "pk"]
        quote = dialect.identifier_preparer.quote
        self._sql = (
            f"INSERT INTO {quote(_TABLE.name)} ({', '.join(quote(c.name) for c in columns)}) "
            f"VALUES ({', '.join('?' for _ in columns)})"
        )
        self._keys = [c.key for c in columns]
        self._processors = [c.type.dialect_impl(dialect).bind_processor(dialect) for c in columns]
        self._integrity_error: type[Exception] = dialect.loaded_dbapi.IntegrityError
        self._operational_error: type[Exception] = dialect.loaded_dbapi.OperationalError
        self._now: PoolProxiedConnection = engine.raw_connection()
        self._waiting: PoolProxiedConnection = engine.raw_connection()
        cursor = self._now.cursor()
        cursor.execute("PRAGMA busy_timeout=0")
        cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.close()

    def params(self, record: DecisionRecord) -> tuple[Any, ...]:
        values = []
        for key, process in zip(self._keys, self._processors, strict=True):
            value = getattr(record, key)
            values.append(value if process is None else process(value))
        return tuple(values)

    def store_now(self, rows: list[tuple[Any, ...]]) -> list[bool]:
        """On the event loop; :class:`_SqliteBusyError` (nothing stored) when it would wait."""
        try:
            return self._store(self._now, rows)
        except self._operational_error as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise _SqliteBusyError(str(exc)) from exc
            raise

    def store_waiting(self, rows: list[tuple[Any, ...]]) -> list[bool]:
        """In the writer's thread, waiting for the write lock up to the busy timeout."""
        return self._store(self._waiting, rows)

    def checkpoint(self) -> None:
        cursor = self._waiting.cursor()
        try:
            cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            cursor.close()

    def _store(self, conn: PoolProxiedConnection, rows: list[tuple[Any, ...]]) -> list[bool]:
        """One transaction; True per stored row, False per duplicate ``request_id``/``id``
        (then every other row is stored row by row, each in a SAVEPOINT)."""
        cursor = conn.cursor()
        try:
            cursor.execute("BEGIN IMMEDIATE")
            try:
                cursor.executemany(self._sql, rows)
                stored = [True] * len(rows)
            except self._integrity_error:
                cursor.execute("ROLLBACK")
                cursor.execute("BEGIN IMMEDIATE")
                stored = [self._insert_one(cursor, row) for row in rows]
            cursor.execute("COMMIT")
            return stored
        except BaseException:
            if conn.dbapi_connection is not None and conn.dbapi_connection.in_transaction:
                cursor.execute("ROLLBACK")
            raise
        finally:
            cursor.close()

    def _insert_one(self, cursor: Any, row: tuple[Any, ...]) -> bool:
        cursor.execute("SAVEPOINT decision_row")
        try:
            cursor.execute(self._sql, row)
        except self._integrity_error:
            cursor.execute("ROLLBACK TO decision_row")
            cursor.execute("RELEASE decision_row")
            return False
        cursor.execute("RELEASE decision_row")
        return True

    def close(self) -> None:
        self._now.invalidate()  # its pragmas are not the pool's: never hand it out again
        self._waiting.close()


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
        self._sqlite: _SqliteSink | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._unchecked_bytes = 0
        self._checkpointing: asyncio.Future[None] | None = None
        #: committed transactions that stored at least one row, and the rows they stored
        #: (``rows / transactions``: how many decisions shared a commit)
        self.transactions = 0
        self.rows = 0
        #: called with the rows of each transaction counted in ``transactions`` once it
        #: committed (the metrics' counters); what it raises is logged, never a request's error
        self.on_commit: Callable[[int], None] | None = None

    def start(self) -> None:
        if self._task is not None:
            return
        self._closed = False
        self._sync = sqlite_file_twin(self.database.engine, busy_timeout_s=self._busy_timeout_s)
        if self._sync is not None:
            self._sqlite = _SqliteSink(self._sync)
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
        if self._sqlite is not None:
            self._sqlite.close()
            self._sqlite = None
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
        if self._sqlite is not None:
            await self._write_sqlite(self._sqlite, batch)
            return
        try:
            await self._insert_all(batch)
        except IntegrityError:
            await self._write_each(batch)
            return
        except Exception as exc:  # the transaction failed: every request of it fails
            _log_failure(len(batch), exc)
            for pending in batch:
                _settle(pending, exc)
            return
        self._committed(len(batch))
        for pending in batch:
            _settle(pending, None)

    def _committed(self, rows: int) -> None:
        if not rows:
            return
        self.transactions += 1
        self.rows += rows
        if self.on_commit is not None:
            try:
                self.on_commit(rows)
            except Exception:  # the batch's requests are settled after this: never skip them
                logger.exception("decision writer on_commit hook failed")

    async def _write_sqlite(self, sink: _SqliteSink, batch: Sequence[_Pending]) -> None:
        try:
            rows = [sink.params(p.record) for p in batch]
            async with self.database.sqlite_write_lock:
                try:
                    stored = sink.store_now(rows)
                except _SqliteBusyError:  # another process writes: wait in the thread
                    loop = asyncio.get_running_loop()
                    stored = await loop.run_in_executor(self._thread, sink.store_waiting, rows)
        except Exception as exc:  # the transaction failed: every request of it fails
            _log_failure(len(batch), exc)
            for pending in batch:
                _settle(pending, exc)
            return
        self._committed(sum(stored))
        _settle_stored(batch, stored)
        self._unchecked_bytes += sum(len(v) for row in rows for v in row if isinstance(v, str))
        if self._unchecked_bytes >= CHECKPOINT_BYTES and self._checkpointing is None:
            self._unchecked_bytes = 0
            self._checkpoint(sink)

    def _checkpoint(self, sink: _SqliteSink) -> None:
        """A passive WAL checkpoint in the writer's thread; nobody waits for it."""

        def done(future: asyncio.Future[None]) -> None:
            self._checkpointing = None
            if not future.cancelled() and future.exception() is not None:
                logger.warning("WAL checkpoint failed: %s", future.exception())

        future = asyncio.get_running_loop().run_in_executor(self._thread, sink.checkpoint)
        self._checkpointing = future
        future.add_done_callback(done)

    async def _insert_all(self, batch: Sequence[_Pending]) -> None:
        rows = [_row(p.record) for p in batch]
        async with self.database.transaction(write=True) as session:
            await session.execute(_INSERT, rows)

    async def _write_each(self, batch: Sequence[_Pending]) -> None:
        """Row by row, each in a SAVEPOINT: a duplicate fails only its own request."""
        rows = [_row(p.record) for p in batch]
        try:
            stored = await self._insert_each(rows)
        except Exception as exc:
            _log_failure(len(batch), exc)
            for pending in batch:
                _settle(pending, exc)
            return
        self._committed(sum(stored))
        _settle_stored(batch, stored)

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


def _log_failure(count: int, exc: Exception) -> None:
    """One line while the database is unavailable (every batch fails until it returns), a
    traceback for anything else."""
    if backend_unavailable(exc):
        logger.warning("could not store %d decisions: database unavailable: %r", count, exc)
    else:
        logger.error("could not store %d decisions", count, exc_info=exc)


def _settle_stored(batch: Sequence[_Pending], stored: Sequence[bool]) -> None:
    """Answer each request of a stored batch: ``False`` rows were duplicates of earlier ones."""
    for pending, ok in zip(batch, stored, strict=True):
        _settle(pending, None if ok else DuplicateRequestError(pending.record.request_id))


def _settle(pending: _Pending, exc: BaseException | None) -> None:
    if pending.future.done():
        return
    if exc is None:
        pending.future.set_result(None)
    else:
        pending.future.set_exception(exc)
