"""The only place the core learns wall-clock time.

Callers pass ``now`` explicitly into decisions.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime


def utc_now() -> datetime:
    return datetime.now(UTC)


def epoch_now() -> float:
    return time.time()
