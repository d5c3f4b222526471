"""Cursor arguments of list endpoints."""

from __future__ import annotations

from app.db.repositories.pagination import InvalidCursorError, decode_cursor
from app.services.errors import ErrorItem, UnprocessableError


def cursor_arg(cursor: str | None) -> int | None:
    try:
        return decode_cursor(cursor)
    except InvalidCursorError:
        raise UnprocessableError(
            "the cursor is not one this service issued",
            details=[ErrorItem("query.cursor", "invalid cursor", "invalid_cursor")],
        ) from None
