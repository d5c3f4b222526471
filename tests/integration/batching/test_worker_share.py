"""Workers split a burst: each reads at most ``ceil(max_batch / live workers)`` entries."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence

import redis.asyncio as aioredis

from app.batching.redis_transport import RedisWorker, StreamKeys, WorkerOptions
from app.outcomes import DecisionOutcome, DecisionRequest, Deliver, Wanted
from tests.integration.batching.harness import RedisServer


def _never(
    batch: Sequence[DecisionRequest], wanted: Wanted, deliver: Deliver
) -> list[DecisionOutcome]:
    raise AssertionError("no request is queued in this test")


async def _wait_for(predicate: Callable[[], bool]) -> None:
    for _ in range(100):  # 5 s
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


async def test_batch_limit_is_the_live_workers_share(redis_server: RedisServer) -> None:
    keys = StreamKeys(f"share-{uuid.uuid4().hex[:8]}")
    options = WorkerOptions(max_batch=32, block_ms=50)
    first = RedisWorker(redis_server.url, _never, keys=keys, options=options, consumer="w1")
    second = RedisWorker(redis_server.url, _never, keys=keys, options=options, consumer="w2")
    assert first.batch_limit() == 32
    one = asyncio.create_task(first.run())
    try:
        await _wait_for(lambda: first.live_workers == 1 and first._redis is not None)
        assert first.batch_limit() == 32
        two = asyncio.create_task(second.run())
        try:
            # the first worker counts the second at its next heartbeat (every second)
            await _wait_for(lambda: first.live_workers == 2 and second.live_workers == 2)
            assert first.batch_limit() == second.batch_limit() == 16
        finally:
            second.stop()
            await two
        client = aioredis.Redis.from_url(redis_server.url)
        try:  # a stopped worker leaves the heartbeat set at once
            assert await client.zscore(keys.heartbeats, "w2") is None
        finally:
            await client.aclose()
    finally:
        first.stop()
        await one
