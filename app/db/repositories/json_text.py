"""Decoding JSON columns read as text (``CAST(col AS TEXT)``), for the bulk reads of a
scheduling round: one C-level parse per value instead of the driver's per-value hook."""

from __future__ import annotations

import json
from typing import Any

import orjson


def json_value(text: str | bytes) -> Any:
    """The value a JSON column stored as ``text``; what orjson refuses to read (an integer
    beyond 64 bits, written through ``json.dumps``) is read by ``json.loads``."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
