"""Deadlines cross hosts on the Redis server's clock (ADR 0074): a worker whose host clock is
off by more than a deadline neither drops requests still waited for nor works on dead ones;
against a redis-server of the test's own."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis

from app.batching.redis_clock import RedisClock
from app.batching.redis_transport import RedisQueue, RedisWorker, StreamKeys, WorkerOptions
from app.batching.wire import request_to_json
from app.domains.hpc.types import ClusterState, Job, Node
from app.outcomes import DecisionOutcome, DecisionRequest, Deliver, Wanted
from app.policy.selector import decide_many
from tests.integration.batching.harness import RedisServer, free_port

pytestmark = pytest.mark.redis


def _request(request_id: str, deadline: float | None) -> DecisionRequest:
    jobs = tuple(Job(f"{request_id}-j{i}", {"cpu": 1.0}, 60.0, float(i)) for i in range(4))
    state = ClusterState(now=1000.0, nodes=(Node("n1", {"cpu": 8.0}),), pending=jobs)
    return DecisionRequest(request_id, state, policy="sjf", deadline=deadline)


class _Recorder:
    """A batch decider that records the deadlines it was handed, on the worker's clock."""

    def __init__(self) -> None:
        self.deadlines: dict[str, float | None] = {}

    def __call__(
        self, batch: Sequence[DecisionRequest], wanted: Wanted, deliver: Deliver
    ) -> list[DecisionOutcome]:
        for request in batch:
            self.deadlines[request.request_id] = request.deadline
        return decide_many(batch, None, wanted=wanted, deliver=deliver)


@dataclass
class _Stack:
    queue: RedisQueue
    worker: RedisWorker
    recorder: _Recorder

    @property
    def keys(self) -> StreamKeys:
        return self.queue.keys


@contextlib.asynccontextmanager
async def _serving(url: str, worker_clock: Callable[[], float]) -> AsyncIterator[_Stack]:
    """An API-side queue (this host's clock) and a worker whose host clock is ``worker_clock``,
    on a fresh stream prefix."""
    keys = StreamKeys(f"skew-{uuid.uuid4().hex[:8]}")
    recorder = _Recorder()
    worker = RedisWorker(
        url,
        recorder,
        keys=keys,
        options=WorkerOptions(max_batch=4, max_wait_ms=5.0, block_ms=50),
        consumer="skewed",
        clock=worker_clock,
    )
    queue = RedisQueue(url, keys, ping_interval_s=0.05)
    task = asyncio.create_task(worker.run())
    try:
        await queue.start()
        yield _Stack(queue, worker, recorder)
    finally:
        worker.stop()
        await task
        await queue.close()


async def _until(predicate: Callable[[], bool], what: str, within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def test_the_offset_of_a_skewed_clock_is_estimated_within_half_a_round_trip(
    redis_server: RedisServer,
) -> None:
    client = aioredis.Redis.from_url(redis_server.url)
    clock = RedisClock(lambda: time.time() + 5.0)  # this host runs 5 s ahead of the server's
    try:
        assert not clock.synced
        assert clock.offset is None
        for _ in range(3):
            await clock.sample(client)
        assert clock.offset is not None
        assert clock.uncertainty is not None
        # the server shares this machine's clock: the true offset is -5 s (TIME has microseconds)
        assert abs(clock.offset + 5.0) <= clock.uncertainty + 2e-6
        assert abs(clock.now() - time.time()) <= clock.uncertainty + 0.01
        assert clock.from_redis(clock.to_redis(123.0)) == pytest.approx(123.0)
    finally:
        await client.aclose()


async def test_a_worker_two_seconds_ahead_answers_a_request_with_one_second_left(
    redis_server: RedisServer,
) -> None:
    """By its own clock the request expired a second ago (the old rule dropped it unanswered);
    on the server's clock it has a second left."""
    async with _serving(redis_server.url, lambda: time.time() + 2.0) as stack:
        await _until(
            lambda: stack.worker.redis_clock.synced and stack.queue.clock.synced, "clock samples"
        )
        deadline = time.time() + 1.0
        reply = await stack.queue.submit(_request("ahead", deadline), wait_s=1.0)
        assert reply is not None, "the skewed worker dropped a request still waited for"
        outcome = reply[0]
        assert outcome.decision is not None
        assert not outcome.fallback_used
        seen = stack.recorder.deadlines["ahead"]
        # the worker judged the deadline on its own clock, shifted by its 2 s
        assert seen == pytest.approx(deadline + 2.0, abs=0.05)


async def test_a_worker_two_seconds_behind_drops_a_request_nobody_waits_for(
    redis_server: RedisServer,
) -> None:
    """The request's deadline passed half a second ago; by the worker's clock it has 1.5 s
    left (the old rule decided it and answered nobody)."""
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        async with _serving(redis_server.url, lambda: time.time() - 2.0) as stack:
            keys = stack.keys
            await _until(
                lambda: stack.worker.redis_clock.synced and stack.queue.clock.synced,
                "clock samples",
            )
            now = time.time()
            for request in (_request("gone", now - 0.5), _request("live", now + 30)):
                entry = request_to_json(request, stack.queue.clock.to_redis)
                await client.xadd(keys.stream, {"req": entry})
            got = await client.blpop([keys.reply("live")], 5)
            assert got is not None
            await _until(lambda: stack.worker.decided == 1, "the batch to be acknowledged")
            # "gone" was dropped before any work
            assert list(stack.recorder.deadlines) == ["live"]
            assert await client.exists(keys.reply("gone"), keys.done("gone")) == 0
            for _ in range(100):
                if await client.xlen(keys.stream) == 0:
                    break
                await asyncio.sleep(0.02)
            assert await client.xlen(keys.stream) == 0
    finally:
        await client.aclose()


async def test_the_api_counts_a_worker_whose_clock_is_ten_seconds_behind(
    redis_server: RedisServer,
) -> None:
    """Heartbeats are scored on the server's clock, so a worker's host clock does not make it
    look dead (or alive after it died) to the API."""
    async with _serving(redis_server.url, lambda: time.time() - 10.0) as stack:
        await _until(lambda: stack.queue.workers >= 1, "the API to count the worker")
        client = aioredis.Redis.from_url(redis_server.url)
        try:
            score = await client.zscore(stack.keys.heartbeats, "skewed")
        finally:
            await client.aclose()
        assert score is not None
        assert abs(score - time.time()) < 1.5


async def test_a_server_without_time_keeps_serving_on_host_clocks() -> None:
    """Some managed servers rename TIME away: the API and the worker then ping, heartbeat and
    judge deadlines on their own clocks (as before ADR 0074) instead of failing."""
    server = RedisServer(free_port(), extra_args=["--rename-command", "TIME", ""])
    server.start()
    try:
        async with _serving(server.url, time.time) as stack:
            assert stack.queue.available
            assert stack.queue.clock.refused
            await _until(lambda: stack.queue.workers >= 1, "the API to count the worker")
            assert stack.worker.redis_clock.refused
            deadline = time.time() + 2.0
            reply = await stack.queue.submit(_request("plain", deadline), wait_s=2.0)
            assert reply is not None
            assert reply[0].decision is not None
            assert stack.recorder.deadlines["plain"] == deadline
    finally:
        server.kill()
