"""Engines: plain ``postgresql://`` / ``sqlite:///`` URLs in, async engines with drivers out."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app import jsonio

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: Execution option a connection carries to start its transaction with ``BEGIN IMMEDIATE``
#: (SQLite only): the write lock is taken up front, so a read-then-write transaction never
#: fails on lock upgrade when another process wrote in between.
SQLITE_BEGIN_IMMEDIATE = "kairos_begin_immediate"


#: Seconds a new PostgreSQL connection may take before the attempt fails (asyncpg waits 60 s by
#: default): an unreachable database fails a request fast instead of holding it.
CONNECT_TIMEOUT_S = 5.0

#: SQLSTATE classes that say the server cannot serve now, whatever the statement: connection
#: exception (08), insufficient resources (53: too many clients, disk full), operator
#: intervention (57: shutting down, starting up, terminated, cancelled).
_UNAVAILABLE_SQLSTATE_CLASSES = frozenset({"08", "53", "57"})


class UnsupportedDatabaseError(ValueError):
    pass


def backend_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the database cannot be reached or cannot serve now, as opposed to
    a statement it refused (constraint violations, bad data, SQL errors: bugs or 4xx).

    True for: a lost or refused connection (``OSError``, a DBAPI error that invalidated its
    connection, ``InterfaceError``), an exhausted pool (``sqlalchemy.exc.TimeoutError``), any
    ``OperationalError`` (SQLite's locked or unopenable file), and PostgreSQL errors of the
    SQLSTATE classes 08, 53 and 57, found on the error itself, its driver error or their causes.
    """
    seen: set[int] = set()
    todo: list[BaseException] = [error]
    while todo:
        current = todo.pop()
        if id(current) in seen or len(seen) > 16:
            continue
        seen.add(id(current))
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
            continue
        if isinstance(current, exc.IntegrityError | exc.DataError | exc.ProgrammingError):
            return False
        if isinstance(current, OSError | exc.TimeoutError | exc.OperationalError):
            return True
        if isinstance(current, exc.InterfaceError):
            return True
        if isinstance(current, exc.DBAPIError) and current.connection_invalidated:
            return True
        sqlstate = getattr(current, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate[:2] in _UNAVAILABLE_SQLSTATE_CLASSES:
            return True
        orig = getattr(current, "orig", None)
        if isinstance(orig, BaseException):
            todo.append(orig)
        if current.__cause__ is not None:
            todo.append(current.__cause__)
    return False


async def while_unavailable(
    call: Callable[[], Awaitable[T]],
    wait_s: float,
    *,
    first_delay_s: float = 0.25,
    max_delay_s: float = 2.0,
) -> T:
    """``await call()``, retried with doubling delays while it fails because the database
    cannot be reached or cannot serve now (:func:`backend_unavailable`), until ``wait_s``
    seconds have passed; any other error, or the last one, is raised."""
    deadline = time.monotonic() + wait_s
    delay = first_delay_s
    while True:
        try:
            return await call()
        except Exception as error:
            if not backend_unavailable(error) or time.monotonic() + delay > deadline:
                raise
            logger.warning(
                "database unavailable (%s); retrying in %.2f s", type(error).__name__, delay
            )
            await asyncio.sleep(delay)
            delay = min(2 * delay, max_delay_s)


def json_dumps(value: Any) -> str:
    """How JSON columns are written: :func:`app.jsonio.dumps` (orjson, ``json.dumps`` for what
    orjson refuses). Reading stays ``json.loads``."""
    return jsonio.dumps(value).decode()


def async_url(url: str) -> URL:
    """``postgresql://...`` -> asyncpg, ``sqlite:///...`` -> aiosqlite; explicit drivers kept."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        if parsed.drivername in {"postgresql", "postgresql+asyncpg"}:
            return parsed.set(drivername="postgresql+asyncpg")
    elif backend == "sqlite" and parsed.drivername in {"sqlite", "sqlite+aiosqlite"}:
        return parsed.set(drivername="sqlite+aiosqlite")
    raise UnsupportedDatabaseError(
        f"unsupported database URL {parsed.render_as_string(hide_password=True)!r}: "
        "use postgresql://user@host:port/db or sqlite:///path"
    )


def is_sqlite(engine: AsyncEngine) -> bool:
    return engine.dialect.name == "sqlite"


def make_engine(
    url: str,
    *,
    pool_size: int = 10,
    max_overflow: int = 20,
    sqlite_busy_timeout_s: float = 30.0,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
) -> AsyncEngine:
    """PostgreSQL: a pool that checks each connection before handing it out (``pool_pre_ping``),
    so connections a database restart killed are replaced, and one a statement found dead is
    invalidated and never handed out again."""
    target = async_url(url)
    if target.get_backend_name() == "sqlite":
        engine = create_async_engine(
            target,
            connect_args={"timeout": sqlite_busy_timeout_s},
            pool_pre_ping=False,
            json_serializer=json_dumps,
        )
        _configure_sqlite(engine.sync_engine, busy_timeout_ms=int(sqlite_busy_timeout_s * 1000))
        return engine
    return create_async_engine(
        target,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_pre_ping=True,
        pool_recycle=1800,
        connect_args={"timeout": connect_timeout_s},
        json_serializer=json_dumps,
    )


def sqlite_file_twin(engine: AsyncEngine, *, busy_timeout_s: float = 30.0) -> Engine | None:
    """A synchronous (pysqlite) engine on the same SQLite *file* as ``engine``, configured the
    same way (WAL, ``synchronous=NORMAL``, ``BEGIN IMMEDIATE`` on request), for code that runs a
    whole transaction in one worker thread instead of one aiosqlite thread hop per statement.
    None for other databases and for in-memory SQLite (a second connection would see another
    database)."""
    if not is_sqlite(engine):
        return None
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    sync = create_engine(
        engine.url.set(drivername="sqlite+pysqlite"),
        connect_args={"timeout": busy_timeout_s, "check_same_thread": False},
        pool_pre_ping=False,
        json_serializer=json_dumps,
    )
    _configure_sqlite(sync, busy_timeout_ms=int(busy_timeout_s * 1000))
    return sync


def _configure_sqlite(sync_engine: Engine, *, busy_timeout_ms: int) -> None:

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy (the "begin" hook below) own BEGIN instead of pysqlite's implicit one.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        immediate = conn.get_execution_options().get(SQLITE_BEGIN_IMMEDIATE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")
