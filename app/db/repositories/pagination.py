"""Opaque cursors over a table's integer primary key (insertion order)."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

#: ``pk:<1 to 18 ASCII digits>``: below 2**63, the range of the primary key
_PAYLOAD = re.compile(r"pk:([0-9]{1,18})", re.ASCII)
#: longer than any cursor :func:`encode_cursor` writes
_MAX_CURSOR_CHARS = 64


class InvalidCursorError(ValueError):
    pass


def encode_cursor(pk: int) -> str:
    return base64.urlsafe_b64encode(f"pk:{pk}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int | None:
    """The primary key a cursor of :func:`encode_cursor` holds; :class:`InvalidCursorError` for
    anything else (only ASCII digits count: ``str.isdigit`` accepts ``"²"``, ``int`` does not)."""
    if cursor is None or cursor == "":
        return None
    if len(cursor) > _MAX_CURSOR_CHARS or not cursor.isascii():
        raise InvalidCursorError(cursor)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidCursorError(cursor) from exc
    match = _PAYLOAD.fullmatch(raw)
    if match is None:
        raise InvalidCursorError(cursor)
    return int(match.group(1))


@dataclass(frozen=True, slots=True)
class PageResult(Generic[T]):
    items: list[T]
    next_cursor: str | None
