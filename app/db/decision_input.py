"""How a decision's input is stored: ``decisions.input_blob`` holds the input object (the HPC
codec's snapshot beside what it was decided with) as zlib-compressed UTF-8 JSON, written in the
transaction that stores the decision (ADR 0097).

Invariants: :func:`unpack` of :func:`pack` of a JSON value is that value; a blob that is not
exactly what :func:`pack` wrote fails to decode (zlib's Adler-32 check) instead of answering a
different input. Rows written before the blob column hold their input in ``input_snapshot``
(JSON) and a NULL blob; :func:`stored_input` reads either.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any, Final

from app import jsonio
from app.db.orm import DecisionRecord
from app.db.repositories.json_text import json_value

#: zlib level 1: the input's JSON repeats its keys per job and node, so the fastest level
#: already removes most of it.
LEVEL: Final = 1


def pack(value: Mapping[str, Any]) -> bytes:
    """``value`` as zlib-compressed compact JSON."""
    return zlib.compress(jsonio.dumps(value), LEVEL)


def unpack(blob: bytes) -> dict[str, Any]:
    """The JSON object :func:`pack` wrote (``zlib.error`` or ``ValueError`` on anything else)."""
    value = json_value(zlib.decompress(blob))
    if not isinstance(value, dict):
        raise ValueError("a stored decision input is a JSON object")
    return value


def stored_input(record: DecisionRecord) -> dict[str, Any]:
    """The decision's input as it was stored: the blob, or the JSON column of older rows."""
    if record.input_blob is not None:
        return unpack(record.input_blob)
    return dict(record.input_snapshot or {})
