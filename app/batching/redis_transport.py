"""Redis Streams transport: the API side (:class:`RedisQueue`) and ``kairos worker``
(:class:`RedisWorker`).  The only module that imports ``redis``.

Keys (``<p>`` = the configured prefix, default ``kairos``; ADR 0040):

* ``<p>:requests``  the request stream; each entry ``{"req": <wire request JSON>}``
* ``<p>:workers``   the consumer group every worker reads through (``XREADGROUP``)
* ``<p>:reply:<request id>``  a list holding the reply; the API ``BLPOP``s it; TTL ``reply_ttl_s``
* ``<p>:done:<request id>``   set (``NX``, same TTL) by the first worker to deliver: a request
  decided twice (a reclaimed entry whose first worker died after answering) is answered once

Delivery is at-least-once: a worker ``XACK``s (and ``XDEL``s) an entry only after its reply is
pushed, and ``XAUTOCLAIM`` hands entries idle longer than ``claim_idle_ms`` (a dead worker's) to a
live one.  The request id is the idempotency key end to end (the decision table's ``request_id``
is UNIQUE too).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.batching.batcher import COST_WEIGHT, LoopHandover
from app.batching.budget import Budgeted, deadline_from
from app.batching.redis_clock import RedisClock
from app.batching.wire import (
    WireError,
    outcome_from_json,
    outcome_to_json,
    queued_from_json,
    request_id_of,
    request_to_json,
)
from app.outcomes import ABANDONED, DecisionOutcome, DecisionRequest, Deliver, Wanted

logger = logging.getLogger(__name__)

#: Errors that mean "Redis is not reachable right now".
UNAVAILABLE: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ConnectionError,
    TimeoutError,
    OSError,
)

_DELIVER = """
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
  redis.call('RPUSH', KEYS[2], ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[1])
  return 1
end
return 0
"""


#: workers heartbeat this often; the API counts those seen within ``WORKER_ALIVE_S``
HEARTBEAT_S = 1.0
WORKER_ALIVE_S = 3.0

#: poll interval of the worker's batch top-up reads
POLL_S = 0.0005

#: an exchange still running this long after its caller's wait ended is cancelled (its
#: connection dropped): the server-side BLPOP timeout ends every exchange on a live Redis first
HUNG_EXCHANGE_S = 2.0

#: consecutive ping timeouts (not refusals) before the queue is reported degraded
SLOW_PINGS_TO_DEGRADE = 3


class QueueUnavailableError(Exception):
    """Redis could not be reached; the caller decides in-process."""


@dataclass(frozen=True, slots=True)
class StreamKeys:
    prefix: str = "kairos"

    @property
    def stream(self) -> str:
        return f"{self.prefix}:requests"

    @property
    def group(self) -> str:
        return f"{self.prefix}:workers"

    def reply(self, request_id: str) -> str:
        return f"{self.prefix}:reply:{request_id}"

    def done(self, request_id: str) -> str:
        return f"{self.prefix}:done:{request_id}"

    @property
    def heartbeats(self) -> str:
        """Sorted set: worker name -> epoch seconds of its last heartbeat."""
        return f"{self.prefix}:heartbeats"


def _client(url: str) -> aioredis.Redis:
    # short connect timeout so an outage is noticed fast; no socket timeout on reads (BLPOP and
    # XREADGROUP BLOCK pass their own), health checks on idle connections
    return aioredis.Redis.from_url(
        url,
        socket_connect_timeout=2.0,
        health_check_interval=5,
        retry_on_timeout=False,
    )


Reply = tuple[DecisionOutcome, int, bool]


class RedisQueue:
    """API side: ``XADD`` a request, ``BLPOP`` its reply; tracks whether Redis is reachable."""

    def __init__(
        self,
        url: str,
        keys: StreamKeys | None = None,
        *,
        max_len: int = 100_000,
        ping_interval_s: float = 0.5,
    ) -> None:
        self.url = url
        self.keys = keys or StreamKeys()
        self.max_len = max_len
        self.ping_interval_s = ping_interval_s
        self.available = False
        self.in_flight = 0
        #: workers whose heartbeat is fresh (counted at every ping)
        self.workers = 0
        self._slow_pings = 0
        self._redis: aioredis.Redis | None = None
        self._monitor: asyncio.Task[None] | None = None
        #: exchanges whose caller stopped waiting, left to end on their own
        self._lingering: set[asyncio.Future[Any]] = set()
        #: deadlines and heartbeats cross hosts on the Redis server's clock (ADR 0074)
        self.clock = RedisClock()

    async def start(self) -> None:
        self._redis = _client(self.url)
        await self._ping()
        self._monitor = asyncio.create_task(self._watch(), name="redis-queue-monitor")

    async def close(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        lingering = list(self._lingering)
        for exchange in lingering:
            exchange.cancel()
        await asyncio.gather(*lingering, return_exceptions=True)
        if self._redis is not None:
            await self._redis.aclose()

    async def _ping(self) -> bool:
        """Refused/reset connections flip to unavailable at once; slow answers (a loaded host)
        only after ``SLOW_PINGS_TO_DEGRADE`` in a row."""
        assert self._redis is not None
        try:
            await asyncio.wait_for(self._ping_once(self._redis), timeout=1.0)
        except (TimeoutError, RedisTimeoutError) as exc:
            self._slow_pings += 1
            if self._slow_pings >= SLOW_PINGS_TO_DEGRADE:
                self._mark(False, exc)
        except UNAVAILABLE as exc:
            self._mark(False, exc)
        else:
            self._slow_pings = 0
            self._mark(True, None)
            await self._count_workers()
        return self.available

    async def _ping_once(self, redis: aioredis.Redis) -> None:
        """TIME is the ping: it keeps the estimate of the server's clock fresh (ADR 0074)."""
        if not await self.clock.sample(redis):
            await redis.ping()

    async def _count_workers(self) -> None:
        assert self._redis is not None
        try:
            alive = await asyncio.wait_for(
                self._redis.zcount(self.keys.heartbeats, self.clock.now() - WORKER_ALIVE_S, "+inf"),
                timeout=1.0,
            )
        except UNAVAILABLE:
            return  # the next ping decides about availability
        except ResponseError:
            return
        if int(alive) == 0 and self.workers > 0:
            logger.warning("no live kairos worker: deciding in-process")
        elif int(alive) > 0 and self.workers == 0:
            logger.info("%d kairos worker(s) alive: decisions go through the stream", alive)
        self.workers = int(alive)

    @property
    def usable(self) -> bool:
        """Redis answers and at least one worker heartbeats."""
        return self.available and self.workers > 0

    def _mark(self, available: bool, exc: BaseException | None) -> None:
        if available and not self.available:
            logger.info("redis reachable: decisions go through the request stream")
        elif not available and self.available:
            logger.warning("redis unreachable (%s): deciding in-process", exc)
        self.available = available

    async def _watch(self) -> None:
        task = asyncio.current_task()
        while True:
            await asyncio.sleep(self.ping_interval_s)
            await self._ping()
            # a cancel (close()) that lands while a command fails can surface as that failure,
            # which _ping absorbs: redis-py turns a cancelled read into a dropped connection,
            # and wait_for returns the inner outcome when both race. Honour it here, or close()
            # would wait for this loop forever.
            if task is not None and task.cancelling():
                raise asyncio.CancelledError

    async def submit(
        self,
        request: DecisionRequest,
        wait_s: float,
        *,
        budget_s: float | None = None,
        start_by: float | None = None,
    ) -> Reply | None:
        """The worker's reply, or ``None`` if none came within ``wait_s``.

        With ``budget_s`` the worker counts the request's deadline from its batch's start, at
        the latest ``start_by`` (:mod:`app.batching.budget`); ``wait_s`` should then cover
        ``start_by`` plus the budget.

        Raises :class:`QueueUnavailableError` when Redis fails (and marks the queue unavailable).

        The caller's wait ends at ``wait_s`` whatever the exchange does, but the exchange is
        not cancelled (ADR 0073). Its BLPOP times out on the server shortly after, and its
        connection goes back to the pool. A cancelled redis-py command can lose the
        cancellation and run on to its server-side timeout (seen under load as ~1.2 s waits
        for a 70 ms deadline), and a cancelled command's connection is dropped, so under
        overload every timed-out request cost a reconnect.
        """
        assert self._redis is not None
        self.in_flight += 1
        terms = Budgeted(request, budget_s, start_by)
        exchange = asyncio.ensure_future(self._bounded_exchange(self._redis, terms, wait_s))
        try:
            done, _ = await asyncio.wait({exchange}, timeout=max(wait_s, 0.001))
        except asyncio.CancelledError:  # the caller went away
            self._linger(exchange)
            raise
        finally:
            self.in_flight -= 1
        if not done:
            self._linger(exchange)
            return None  # no answer in time: the caller's fallback decides
        try:
            got = exchange.result()
        except UNAVAILABLE as exc:
            if not isinstance(exc, RedisTimeoutError | TimeoutError):
                self._mark(False, exc)  # refused/reset: Redis is gone; a slow connect is not
            raise QueueUnavailableError(str(exc)) from exc
        if got is None:
            return None
        return outcome_from_json(got[1])

    def _linger(self, exchange: asyncio.Future[Any]) -> None:
        """Let an exchange nobody waits for finish on its own (a reference keeps it alive)."""
        self._lingering.add(exchange)
        exchange.add_done_callback(self._settle)

    def _settle(self, exchange: asyncio.Future[Any]) -> None:
        self._lingering.discard(exchange)
        if not exchange.cancelled():
            exchange.exception()  # retrieved: a late failure is the pings' business

    async def _bounded_exchange(self, redis: aioredis.Redis, terms: Budgeted, wait_s: float) -> Any:
        # only a hung Redis gets here: the BLPOP has its own server-side timeout
        async with asyncio.timeout(max(wait_s, 0.001) + HUNG_EXCHANGE_S):
            return await self._exchange(redis, terms, wait_s)

    async def _exchange(self, redis: aioredis.Redis, terms: Budgeted, wait_s: float) -> Any:
        """XADD + BLPOP; one retry when a pooled connection turns out dead.

        After Redis restarts, every connection the pool held before is broken and fails on its
        first use although the server is back. Retrying once on a fresh connection is safe: a
        request added twice is decided twice but answered once and stored once (the request id
        is the idempotency key end to end).
        """
        request = terms.request
        entry = request_to_json(
            request,
            self.clock.to_redis if self.clock.synced else None,
            budget_s=terms.budget_s,
            start_by=terms.start_by,
        )
        for attempt in (1, 2):
            pipe = redis.pipeline(transaction=False)
            pipe.xadd(
                self.keys.stream,
                {"req": entry},
                maxlen=self.max_len,
                approximate=True,
            )
            # Redis resolves the timeout at its hz tick (up to ~100 ms late); 0 would block forever
            pipe.blpop([self.keys.reply(request.request_id)], max(wait_s, 0.01))
            try:
                try:
                    return (await pipe.execute())[1]
                except RuntimeError as exc:
                    # under uvloop, a connection whose socket the server just closed raises
                    # RuntimeError ("unable to perform operation on <TCPTransport closed=True>")
                    # instead of a ConnectionError: it is the same failure
                    raise RedisConnectionError(f"connection closed: {exc}") from exc
            except RedisConnectionError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def depth(self) -> int | None:
        """Entries in the stream (waiting or being decided), or None when unreachable."""
        if self._redis is None or not self.available:
            return None
        try:
            return int(await self._redis.xlen(self.keys.stream))
        except UNAVAILABLE:
            return None


#: ``decide_batch(requests, wanted, deliver)``: the contract of
#: :func:`app.policy.selector.decide_many` -- ``deliver(i, outcome)`` as soon as request ``i`` is
#: decided, ``wanted(i)`` false once nobody waits for it any more
BatchDecider = Callable[[Sequence[DecisionRequest], Wanted, Deliver], Sequence[DecisionOutcome]]


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    max_batch: int = 32
    max_wait_ms: float = 2.0
    claim_idle_ms: int = 5_000
    claim_interval_ms: int = 1_000
    reply_ttl_s: int = 60
    #: a request whose requester stopped waiting longer ago than this is abandoned: not decided
    #: (or no further), not answered, acknowledged. Its requester stopped waiting at its
    #: deadline (an entry with a budget: at ``start_by`` plus the budget) plus the API's grace
    #: (20 ms) and answered with its own fallback. The deadline is judged on
    #: the Redis server's clock as both sides estimate it (ADR 0074), so host clocks need not
    #: agree; the margin covers the two estimates' errors (half a round trip each).
    abandon_after_s: float = 0.1
    block_ms: int = 500
    #: wait ``max_wait_ms`` for batch-mates only after a batch of several entries (ADR 0045):
    #: at low load a lone request is decided at once, without the top-up polls
    adaptive_wait: bool = False


class RedisWorker:
    """Reads the request stream through the consumer group, decides in batches, replies."""

    def __init__(
        self,
        url: str,
        decide_batch: BatchDecider,
        *,
        keys: StreamKeys | None = None,
        options: WorkerOptions | None = None,
        consumer: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self.decide_batch = decide_batch
        self.keys = keys or StreamKeys()
        self.options = options or WorkerOptions()
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.clock = clock
        #: deadlines and heartbeats cross hosts on the Redis server's clock (ADR 0074)
        self.redis_clock = RedisClock(clock)
        self.batches = 0
        self.decided = 0
        #: entries of the last batch read (``adaptive_wait``)
        self._last_size = 0
        #: replies pushed before their batch ended
        self.replied_early = 0
        #: seconds of batch handling per request, a moving average over the batches decided
        self.item_seconds = 0.0
        self._stop = asyncio.Event()
        self._redis: aioredis.Redis | None = None
        self._last_claim = 0.0
        #: workers with a fresh heartbeat (this one included), counted at every beat
        self.live_workers = 1
        #: the thread batches are decided in (one batch at a time), while :meth:`run` runs
        self._executor: ThreadPoolExecutor | None = None

    def stop(self) -> None:
        self._stop.set()

    async def _ensure_group(self) -> None:
        assert self._redis is not None
        try:
            await self._redis.xgroup_create(
                self.keys.stream, self.keys.group, id="0", mkstream=True
            )
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _heartbeat(self) -> None:
        """Tell the API this worker is alive (a separate task: it beats while a batch decides)."""
        assert self._redis is not None
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self.redis_clock.sample(self._redis), timeout=1.0)
                now = self.redis_clock.now()
                pipe = self._redis.pipeline(transaction=False)
                pipe.zadd(self.keys.heartbeats, {self.consumer: now})
                pipe.zremrangebyscore(self.keys.heartbeats, "-inf", now - 60.0)
                pipe.zcount(self.keys.heartbeats, now - WORKER_ALIVE_S, "+inf")
                self.live_workers = max(1, int((await pipe.execute())[2]))
            except UNAVAILABLE:
                pass  # the main loop reports and retries
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), HEARTBEAT_S)

    async def run(self) -> None:
        """Until :meth:`stop`; survives outages (reconnects with backoff, recreates the group)."""
        self._redis = _client(self.url)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kairos-worker")
        backoff = 0.1
        beat = asyncio.create_task(self._heartbeat(), name="worker-heartbeat")
        try:
            while not self._stop.is_set():
                try:
                    # deadlines are read on the server's clock from the first entry on
                    await self.redis_clock.sample(self._redis)
                    await self._ensure_group()
                    logger.info("worker %s reading %s", self.consumer, self.keys.stream)
                    backoff = 0.1
                    await self._loop()
                except UNAVAILABLE as exc:
                    logger.warning(
                        "worker %s: redis unavailable (%s); retrying", self.consumer, exc
                    )
                except ResponseError as exc:
                    if "NOGROUP" in str(exc):
                        logger.warning("worker %s: consumer group lost; recreating", self.consumer)
                        continue
                    logger.exception("worker %s: redis refused a command", self.consumer)
                except Exception:  # a bug must not kill the worker: its entries stay pending
                    logger.exception("worker %s: unexpected error; retrying", self.consumer)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), backoff)
                backoff = min(backoff * 2, 2.0)
        finally:
            self._stop.set()
            await beat
            with contextlib.suppress(*UNAVAILABLE):
                await self._redis.zrem(self.keys.heartbeats, self.consumer)
            await self._redis.aclose()
            self._executor.shutdown(wait=False)
            self._executor = None

    async def _loop(self) -> None:
        while not self._stop.is_set():
            entries = await self._claim()
            if not entries:
                entries = await self._collect()
            if entries:
                await self._handle(entries)

    async def _claim(self) -> list[tuple[str, dict[bytes, bytes]]]:
        """Entries a dead worker left pending longer than ``claim_idle_ms``."""
        now = time.monotonic()
        if now - self._last_claim < self.options.claim_interval_ms / 1000.0:
            return []
        self._last_claim = now
        assert self._redis is not None
        result = await self._redis.xautoclaim(
            self.keys.stream,
            self.keys.group,
            self.consumer,
            min_idle_time=self.options.claim_idle_ms,
            start_id="0-0",
            count=self.options.max_batch,
        )
        claimed = [(_s(i), f) for i, f in result[1] if f]
        if claimed:
            logger.info("worker %s reclaimed %d pending entries", self.consumer, len(claimed))
        deleted = [_s(i) for i in result[2]] if len(result) > 2 else []
        if deleted:
            await self._redis.xack(self.keys.stream, self.keys.group, *deleted)
        return claimed

    async def _read(self, count: int, block_ms: int | None) -> list[tuple[str, dict[bytes, bytes]]]:
        assert self._redis is not None
        got: Any = await self._redis.xreadgroup(
            self.keys.group,
            self.consumer,
            {self.keys.stream: ">"},
            count=count,
            block=block_ms,
        )
        if not got:
            return []
        return [(_s(i), f) for i, f in got[0][1]]

    def batch_limit(self) -> int:
        """This worker's share of ``max_batch``: ``ceil(max_batch / live workers)``.

        A step-synchronous batch costs about the sum of its requests (ADR 0041), so one worker
        taking a whole burst would leave the others idle while every request of the burst waits
        for the slowest; sharing the burst lets the workers decide it in parallel.
        """
        return max(1, -(-self.options.max_batch // max(1, self.live_workers)))

    async def _collect(self) -> list[tuple[str, dict[bytes, bytes]]]:
        """Up to ``max_batch`` entries, waiting at most ``max_wait_ms`` after the first one.

        The first read blocks (Redis wakes it as soon as an entry arrives); the top-up reads do
        not, because Redis resolves short ``BLOCK`` timeouts only at its ``hz`` tick (~100 ms):
        they poll every ``POLL_S`` until the batch is full or the wait is over. With
        ``adaptive_wait``, a lone entry after a batch of at most one is decided at once: no sign
        of concurrent requesters, so no wait and no polls (ADR 0045).
        """
        opts = self.options
        limit = self.batch_limit()
        batch = await self._read(limit, opts.block_ms)
        if not batch:
            return batch
        if opts.adaptive_wait and self._last_size <= 1 and len(batch) == 1:
            self._last_size = 1
            return batch
        closes_at = time.monotonic() + opts.max_wait_ms / 1000.0
        while len(batch) < limit:
            more = await self._read(limit - len(batch), None)
            batch.extend(more)
            remaining = closes_at - time.monotonic()
            if remaining <= 0:
                break
            if not more:
                await asyncio.sleep(min(POLL_S, remaining))
        self._last_size = len(batch)
        return batch

    def _started(
        self, entries: list[tuple[str, dict[bytes, bytes]]], now: float
    ) -> tuple[list[DecisionRequest], list[float | None], list[DecisionOutcome]]:
        """The requests of a batch starting at ``now``, each with its deadline counted from
        that start plus the time the batch spends on its batch-mates (:mod:`app.batching.budget`),
        without the undecodable entries and those whose requester has given up; beside them,
        when each one's requester stops waiting (:func:`_waits_until`)."""
        from_redis = self.redis_clock.from_redis if self.redis_clock.synced else None
        queued: list[Budgeted] = []
        refused: list[DecisionOutcome] = []
        for entry_id, fields in entries:
            try:
                queued.append(queued_from_json(fields[b"req"], from_redis))
            except (WireError, KeyError) as exc:
                logger.error(
                    "worker %s: refusing undecodable entry %s: %s", self.consumer, entry_id, exc
                )
                # answered with the error when its requester can be named, so that it decides
                # at once (its fallback) instead of waiting out its deadline
                request_id = request_id_of(fields.get(b"req", b""))
                if request_id is not None:
                    refused.append(
                        DecisionOutcome(request_id, None, error=str(exc), error_type="WireError")
                    )
        # its requester gave up and answered with its own fallback: not decided
        live = [q for q in queued if not self._abandoned(_waits_until(q), now)]
        shared_s = self.item_seconds * (len(live) - 1)
        return [_at(q, now, shared_s) for q in live], [_waits_until(q) for q in live], refused

    def _observe_cost(self, per_item: float) -> None:
        weight = COST_WEIGHT if self.item_seconds > 0.0 else 1.0
        self.item_seconds = (1.0 - weight) * self.item_seconds + weight * per_item

    def _abandoned(self, waits_until: float | None, now: float) -> bool:
        return waits_until is not None and now > waits_until + self.options.abandon_after_s

    async def _handle(self, entries: list[tuple[str, dict[bytes, bytes]]]) -> None:
        """Decide one batch; answer each request as soon as it is decided (ADR 0072).

        Replies go out from the loop while the batch thread still decides the rest, one
        pipeline per burst; the entries are acknowledged only after every reply is pushed.
        """
        assert self._redis is not None
        now = self.clock()
        requests, waits, refused = self._started(entries, now)
        replies = _Replies(self._redis, self.keys, self.options.reply_ttl_s, len(requests))
        outcomes: Sequence[DecisionOutcome] = []
        if requests:
            handover: LoopHandover[DecisionOutcome] = LoopHandover(
                asyncio.get_running_loop(), replies.send_early
            )

            def wanted(i: int) -> bool:
                return not self._abandoned(waits[i], self.clock())

            started = time.perf_counter()
            try:
                assert self._executor is not None  # set by run()
                # the outcomes come back with the last early reply: one loop wake-up
                outcomes = await handover.run_in(
                    self._executor,
                    functools.partial(self.decide_batch, requests, wanted, handover.put),
                )
                self._observe_cost((time.perf_counter() - started) / len(requests))
            except Exception as exc:  # decide_many isolates requests; this is a last guard
                logger.exception("worker %s: batch failed", self.consumer)
                outcomes = [
                    DecisionOutcome(r.request_id, None, error=repr(exc), error_type="BatchError")
                    for r in requests
                ]
        # a reply that failed to go out leaves every entry of the batch pending: reclaimed and
        # decided again, answered once (the done key)
        await replies.sent_early()
        pipe = self._redis.pipeline(transaction=False)
        replies.add_rest(pipe, outcomes)
        replies.add_refused(pipe, refused)
        ids = [entry_id for entry_id, _ in entries]
        pipe.xack(self.keys.stream, self.keys.group, *ids)
        pipe.xdel(self.keys.stream, *ids)
        await pipe.execute()
        self.batches += 1 if requests else 0
        self.decided += len(requests)
        self.replied_early += len(replies.delivered)


class _Replies:
    """One batch's replies: early ones (from the loop, as the batch thread decides them) and
    the rest, with the batch's acknowledgement."""

    def __init__(self, redis: aioredis.Redis, keys: StreamKeys, ttl: int, batch_size: int):
        self.redis, self.keys, self.ttl, self.batch_size = redis, keys, ttl, batch_size
        self.delivered: set[int] = set()
        self._sends: list[asyncio.Future[Any]] = []
        self._led = False

    def _add(self, pipe: Any, outcome: DecisionOutcome) -> None:
        # the first reply of a batch carries its size to the API's kairos_batch_size
        leader, self._led = not self._led, True
        try:
            payload = outcome_to_json(outcome, batch_size=self.batch_size, leader=leader)
        except (TypeError, ValueError) as exc:  # e.g. a non-finite number in explain
            error = DecisionOutcome(outcome.request_id, None, error=f"unencodable outcome: {exc}")
            payload = outcome_to_json(error, batch_size=self.batch_size, leader=leader)
        pipe.eval(
            _DELIVER,
            2,
            self.keys.done(outcome.request_id),
            self.keys.reply(outcome.request_id),
            self.ttl,
            payload,
        )

    def send_early(self, ready: list[tuple[int, DecisionOutcome]]) -> None:
        """On the loop: push the replies the batch thread has handed over (one pipeline)."""
        pipe = self.redis.pipeline(transaction=False)
        for index, outcome in ready:
            self._add(pipe, outcome)
            self.delivered.add(index)
        self._sends.append(asyncio.ensure_future(pipe.execute()))

    async def sent_early(self) -> None:
        """Wait for the early pushes; raise the first failure (nothing is acknowledged then)."""
        for result in await asyncio.gather(*self._sends, return_exceptions=True):
            if isinstance(result, BaseException):
                raise result

    def add_refused(self, pipe: Any, refused: Sequence[DecisionOutcome]) -> None:
        """Queue the error replies of entries that could not be read."""
        for outcome in refused:
            self._add(pipe, outcome)

    def add_rest(self, pipe: Any, outcomes: Sequence[DecisionOutcome]) -> None:
        """Queue the replies not sent early; an abandoned request gets none."""
        for index, outcome in enumerate(outcomes):
            if index not in self.delivered and outcome.error_type != ABANDONED:
                self._add(pipe, outcome)


def _waits_until(queued: Budgeted) -> float | None:
    """When the requester of ``queued`` stops waiting (before its grace): ``start_by`` plus the
    budget for an entry that carries them, else its deadline."""
    if queued.budget_s is not None and queued.start_by is not None:
        return queued.start_by + queued.budget_s
    return queued.request.deadline


def _at(queued: Budgeted, started_at: float, shared_s: float = 0.0) -> DecisionRequest:
    deadline = deadline_from(queued, started_at, shared_s)
    request = queued.request
    return request if deadline == request.deadline else replace(request, deadline=deadline)


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
