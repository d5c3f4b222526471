"""The API side of the Redis transport stops waiting at the deadline without cancelling the
exchange (ADR 0073); against a redis-server of the test's own."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis

from app.batching.redis_transport import RedisQueue, StreamKeys
from app.batching.wire import outcome_to_json
from app.domains.hpc.types import ClusterState, Job, Node
from app.outcomes import DecisionRequest
from app.policy.selector import decide_many
from tests.integration.batching.harness import RedisServer

pytestmark = pytest.mark.redis

WAIT_S = 0.05


def _request(request_id: str) -> DecisionRequest:
    job = Job(f"{request_id}-j", {"cpu": 1.0}, 60.0, 0.0)
    state = ClusterState(now=1000.0, nodes=(Node("n1", {"cpu": 8.0}),), pending=(job,))
    return DecisionRequest(request_id, state, policy="sjf")


async def _connections_received(url: str) -> int:
    client = aioredis.Redis.from_url(url)
    try:
        return int((await client.info("stats"))["total_connections_received"])
    finally:
        await client.aclose()


async def test_a_wait_that_times_out_keeps_its_connection(redis_server: RedisServer) -> None:
    """No worker answers: each wait ends empty-handed, and its connection is reused (a
    cancelled command's connection would be dropped: one reconnect per timed-out request)."""
    queue = RedisQueue(redis_server.url, StreamKeys(f"wait-{uuid.uuid4().hex[:8]}"))
    await queue.start()
    try:
        assert await queue.submit(_request("warm"), WAIT_S) is None
        await asyncio.sleep(0.3)  # the first exchange's BLPOP times out on the server
        before = await _connections_received(redis_server.url)
        for k in range(20):
            assert await queue.submit(_request(f"r{k}"), WAIT_S) is None
            await asyncio.sleep(0.15)  # each exchange ends before the next (no pool growth)
        # the two probes of _connections_received are the only new connections
        assert await _connections_received(redis_server.url) - before <= 2
        assert queue.in_flight == 0
    finally:
        await queue.close()
    assert not queue._lingering


async def test_the_wait_ends_at_its_deadline_even_if_the_exchange_ignores_cancellation(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A redis-py command can lose a cancellation and run to its server-side timeout; the
    caller's wait must end at ``wait_s`` regardless (before, a 70 ms wait took ~1.2 s)."""
    queue = RedisQueue(redis_server.url, StreamKeys(f"wait-{uuid.uuid4().hex[:8]}"))
    await queue.start()
    finished = asyncio.Event()

    async def stubborn(*_: Any) -> Any:
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            try:
                await asyncio.sleep(end - time.monotonic())
            except asyncio.CancelledError:
                continue  # swallowed, as the redis-py path did
        finished.set()
        return None

    monkeypatch.setattr(queue, "_exchange", stubborn)
    try:
        started = time.monotonic()
        assert await queue.submit(_request("stubborn"), WAIT_S) is None
        waited = time.monotonic() - started
        assert waited < 0.5, f"the caller waited {waited:.3f} s for a {WAIT_S} s deadline"
        assert len(queue._lingering) == 1  # left to end on its own
        await asyncio.wait_for(finished.wait(), 5)
        await asyncio.sleep(0)
        assert not queue._lingering
    finally:
        await queue.close()


async def test_a_reply_within_the_wait_is_returned(redis_server: RedisServer) -> None:
    """The happy path through the un-cancelled exchange: a 'worker' pushes the reply."""
    keys = StreamKeys(f"wait-{uuid.uuid4().hex[:8]}")
    queue = RedisQueue(redis_server.url, keys)
    await queue.start()
    client = aioredis.Redis.from_url(redis_server.url)
    request = _request("answered")
    [outcome] = decide_many([request], None)

    async def worker() -> None:
        assert await client.xread({keys.stream: "0"}, block=5000)  # the request is queued
        payload = outcome_to_json(outcome, batch_size=1, leader=True)
        await client.rpush(keys.reply("answered"), payload)

    try:
        pushing = asyncio.create_task(worker())
        reply = await queue.submit(request, 5.0)
        await pushing
        assert reply is not None
        assert reply[0].request_id == "answered"
        assert reply[0].decision == outcome.decision
    finally:
        await client.aclose()
        await queue.close()


class _CancelledAsAPingEnds(RedisQueue):
    """A queue whose close() lands exactly as a ping completes: Python 3.11's ``wait_for``
    then returns the ping's result and the cancellation is lost."""

    arm = False

    async def _ping_once(self, redis: aioredis.Redis) -> None:
        await super()._ping_once(redis)
        if self.arm and self._monitor is not None:
            self.arm = False
            self._monitor.cancel()  # what close() does, at the worst moment


async def test_a_cancel_that_lands_as_a_ping_ends_still_stops_the_monitor(
    redis_server: RedisServer,
) -> None:
    """Otherwise close() waits for the monitor forever: seen as a hung test run, once in
    ~30 runs of the clock-skew tests, whose queues ping every 50 ms."""
    queue = _CancelledAsAPingEnds(
        redis_server.url, StreamKeys(f"cancel-{uuid.uuid4().hex[:8]}"), ping_interval_s=0.01
    )
    await queue.start()
    try:
        monitor = queue._monitor
        assert monitor is not None
        queue.arm = True
        done, _ = await asyncio.wait({monitor}, timeout=5)
        assert done, "the monitor went on pinging after it was cancelled"
        assert monitor.cancelled()
    finally:
        await asyncio.wait_for(queue.close(), 5)
