"""Which errors mean "the database is down" (503) and which are bugs or bad input (issue 23,
finding 6): the outages PostgreSQL and SQLite really raise, and the statement errors that must
not hide behind a 503."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy import exc

from app.db.engine import backend_unavailable


def _wrapped(driver_error: Exception, *, invalidated: bool = False) -> exc.DBAPIError:
    """How SQLAlchemy's asyncpg dialect raises a driver error: a DBAPIError around it."""
    wrapped = exc.DBAPIError("SELECT 1", None, driver_error, connection_invalidated=invalidated)
    wrapped.__cause__ = driver_error
    return wrapped


OUTAGES = [
    pytest.param(ConnectionRefusedError(111, "Connection refused"), id="refused"),
    pytest.param(TimeoutError(), id="connect-timeout"),
    pytest.param(exc.TimeoutError("QueuePool limit reached"), id="pool-timeout"),
    pytest.param(exc.OperationalError("INSERT", None, Exception("locked")), id="operational"),
    pytest.param(exc.InterfaceError("SELECT", None, Exception("closed")), id="interface"),
    pytest.param(_wrapped(Exception("gone"), invalidated=True), id="invalidated"),
    pytest.param(
        _wrapped(asyncpg.exceptions.CannotConnectNowError("the database system is starting up")),
        id="starting-up",
    ),
    pytest.param(
        _wrapped(asyncpg.exceptions.AdminShutdownError("terminating connection")), id="shutdown"
    ),
    pytest.param(
        _wrapped(asyncpg.exceptions.ConnectionDoesNotExistError("closed mid-operation")),
        id="connection-lost",
    ),
    pytest.param(
        _wrapped(asyncpg.exceptions.TooManyConnectionsError("too many clients")), id="too-many"
    ),
    pytest.param(
        ExceptionGroup("task group", [ConnectionResetError(104, "reset")]), id="in-a-group"
    ),
]

NOT_OUTAGES = [
    pytest.param(
        exc.IntegrityError("INSERT", None, asyncpg.exceptions.UniqueViolationError("dup")),
        id="unique-violation",
    ),
    pytest.param(exc.DataError("INSERT", None, Exception("value too long")), id="data-error"),
    pytest.param(exc.ProgrammingError("SELEC", None, Exception("syntax")), id="syntax"),
    pytest.param(
        _wrapped(asyncpg.exceptions.DeadlockDetectedError("deadlock detected")), id="deadlock"
    ),
    pytest.param(ValueError("a bug"), id="bug"),
    pytest.param(OverflowError("int too large"), id="overflow"),
]


@pytest.mark.parametrize("error", OUTAGES)
def test_outages_are_backend_unavailable(error: BaseException) -> None:
    assert backend_unavailable(error)


@pytest.mark.parametrize("error", NOT_OUTAGES)
def test_statement_errors_and_bugs_are_not(error: BaseException) -> None:
    assert not backend_unavailable(error)
