"""Opaque cursors over a table's integer primary key (insertion order)."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class InvalidCursorError(ValueError):
    pass


def encode_cursor(pk: int) -> str:
    return base64.urlsafe_b64encode(f"pk:{pk}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int | None:
    if cursor is None or cursor == "":
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidCursorError(cursor) from exc
    prefix, _, value = raw.partition(":")
    if prefix != "pk" or not value.isdigit() or len(value) > 18:
        raise InvalidCursorError(cursor)
    return int(value)


@dataclass(frozen=True, slots=True)
class PageResult(Generic[T]):
    items: list[T]
    next_cursor: str | None
