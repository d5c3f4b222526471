"""``kairos worker`` with ``adaptive_wait`` (ADR 0045, the service's default): after a batch of
at most one entry a lone request is read and decided at once, without the top-up polls that
wait ``max_wait_ms`` for batch-mates; after a batch of several, the worker waits again."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest
import redis.asyncio as aioredis

from app.batching.redis_transport import RedisWorker, StreamKeys, WorkerOptions
from app.outcomes import DecisionOutcome, DecisionRequest, Deliver, Wanted
from tests.integration.batching.harness import RedisServer


def _never(
    batch: Sequence[DecisionRequest], wanted: Wanted, deliver: Deliver
) -> list[DecisionOutcome]:
    raise AssertionError("this test only reads the stream")


class _Counted(RedisWorker):
    """A worker that counts its stream reads."""

    reads = 0

    async def _read(self, count: int, block_ms: int | None) -> Any:
        self.reads += 1
        return await super()._read(count, block_ms)


async def _worker(url: str, adaptive: bool) -> tuple[_Counted, aioredis.Redis]:
    keys = StreamKeys(f"adaptive-{uuid.uuid4().hex[:8]}")
    options = WorkerOptions(max_batch=8, max_wait_ms=20.0, block_ms=100, adaptive_wait=adaptive)
    worker = _Counted(url, _never, keys=keys, options=options, consumer="w1")
    client: aioredis.Redis = aioredis.Redis.from_url(url)
    worker._redis = client
    await worker._ensure_group()
    return worker, client


async def _collect_after(worker: _Counted, client: aioredis.Redis, entries: int) -> int:
    """Add ``entries`` to the stream, collect one batch; returns the reads it took."""
    for k in range(entries):
        await client.xadd(worker.keys.stream, {b"req": f"r{k}".encode()})
    worker.reads = 0
    batch = await worker._collect()
    assert len(batch) == entries
    return worker.reads


@pytest.mark.parametrize("adaptive", [True, False])
async def test_a_lone_request_waits_for_batch_mates_only_after_a_busy_batch(
    redis_server: RedisServer, adaptive: bool
) -> None:
    worker, client = await _worker(redis_server.url, adaptive)
    try:
        # nothing batched yet: a lone entry is read once, or waited on for max_wait_ms
        lone_reads = await _collect_after(worker, client, 1)
        assert lone_reads == 1 if adaptive else lone_reads > 2
        # a busy batch (several entries at once): the next lone entry is waited on
        assert await _collect_after(worker, client, 3) > 1
        assert await _collect_after(worker, client, 1) > 2
        # after that batch of one, lone entries are read at once again
        again = await _collect_after(worker, client, 1)
        assert again == 1 if adaptive else again > 2
    finally:
        await client.delete(worker.keys.stream)
        await client.aclose()
