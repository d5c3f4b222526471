"""The Redis server's clock, estimated from this process's (ADR 0074).

A request's deadline crosses hosts: the API stamps it and a ``kairos worker`` on another host
judges it (deadline fallback inside the batch, abandonment). Host clocks may disagree by more
than a deadline is long, so the deadline travels in the one clock every process already talks
to, the Redis server's: each process samples ``TIME`` now and then, keeps the offset of the
sample with the shortest round trip among the last few (its error is at most half that round
trip, plus the drift since), and converts at its edge. Nothing assumes synchronised hosts.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from redis.exceptions import ResponseError

logger = logging.getLogger(__name__)

#: samples kept (16 s of API pings, 32 s of worker heartbeats); the offset comes from the one
#: with the shortest round trip, so a busy event loop (which inflates every round trip it
#: measures) does not degrade the estimate unless it stays busy for the whole window
WINDOW = 32


class RedisClock:
    """``offset = redis time - local time``, from timed ``TIME`` calls."""

    def __init__(self, local: Callable[[], float] = time.time, window: int = WINDOW) -> None:
        self.local = local
        #: (round trip, offset) of the most recent samples
        self._samples: deque[tuple[float, float]] = deque(maxlen=window)
        #: the server refused ``TIME``: no offset, conversions are the identity
        self.refused = False

    async def sample(self, redis: Any) -> bool:
        """One timed ``TIME``; False (and no more tries) when the server refuses the command.

        Raises what the client raises for an outage (the caller's handling). Without ``TIME``
        (renamed away on some managed servers) deadlines stay on host clocks, as before ADR 0074.
        """
        if self.refused:
            return False
        sent = self.local()
        try:
            seconds, micros = await redis.time()
        except ResponseError as exc:
            self.refused = True
            logger.warning(
                "redis refused TIME (%s): deadlines cross hosts on their own clocks; keep API "
                "and worker clocks within ~80 ms of each other",
                exc,
            )
            return False
        received = self.local()
        server = float(seconds) + float(micros) / 1e6
        self._samples.append((received - sent, server - (sent + received) / 2.0))
        return True

    @property
    def synced(self) -> bool:
        return bool(self._samples)

    @property
    def offset(self) -> float | None:
        """Redis time minus local time, or ``None`` before the first sample."""
        if not self._samples:
            return None
        return min(self._samples)[1]

    @property
    def uncertainty(self) -> float | None:
        """Half the shortest round trip kept: a bound on the offset's error (drift aside)."""
        if not self._samples:
            return None
        return min(self._samples)[0] / 2.0

    def now(self) -> float:
        """Redis time now (local time until the first sample)."""
        return self.local() + (self.offset or 0.0)

    def to_redis(self, local_time: float) -> float:
        return local_time + (self.offset or 0.0)

    def from_redis(self, redis_time: float) -> float:
        return redis_time - (self.offset or 0.0)
