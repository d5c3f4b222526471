"""A ``kairos worker`` answers each request as soon as it is decided, and drops the ones whose
requester has stopped waiting (ADR 0072); against a redis-server of the test's own."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from app.batching.redis_transport import RedisWorker, StreamKeys, WorkerOptions
from app.batching.wire import outcome_from_json, request_to_json
from app.domains.hpc.types import ClusterState, Job, Node
from app.outcomes import DecisionOutcome, DecisionRequest, Deliver, Wanted
from app.policy.registry import PolicyRegistry
from app.policy.selector import decide_many
from app.policy.worker import batch_decider
from tests.integration.batching.harness import RedisServer

pytestmark = pytest.mark.redis

Decider = Callable[[Sequence[DecisionRequest], Wanted, Deliver], Sequence[DecisionOutcome]]


def _request(request_id: str, deadline: float | None) -> DecisionRequest:
    jobs = tuple(
        Job(f"{request_id}-j{i}", {"cpu": float(1 + i % 4)}, 60.0 * (1 + i), float(i))
        for i in range(6)
    )
    state = ClusterState(now=1000.0, nodes=(Node("n1", {"cpu": 8.0}),), pending=jobs)
    return DecisionRequest(request_id, state, policy="sjf", deadline=deadline)


class _Run:
    """A worker reading a fresh stream prefix in this process, with requests queued first."""

    def __init__(self, server: RedisServer, decider: Decider, clock: Callable[[], float]):
        self.keys = StreamKeys(f"replies-{uuid.uuid4().hex[:8]}")
        self.client = aioredis.Redis.from_url(server.url)
        self.worker = RedisWorker(
            server.url,
            decider,
            keys=self.keys,
            options=WorkerOptions(max_batch=8, max_wait_ms=20.0, block_ms=50),
            consumer="w1",
            clock=clock,
        )
        self.task: asyncio.Task[None] | None = None

    async def queue(
        self, requests: Sequence[DecisionRequest], terms: dict[str, float] | None = None
    ) -> None:
        """``terms``: ``budget_s`` and ``start_by`` for every entry (app.batching.budget)."""
        # queued before the worker starts: its group reads from the stream's start, so they
        # form one batch
        for request in requests:
            entry = request_to_json(request, **(terms or {}))
            await self.client.xadd(self.keys.stream, {"req": entry})
        self.task = asyncio.create_task(self.worker.run())

    async def reply(self, request_id: str, wait_s: float) -> DecisionOutcome | None:
        got = await self.client.blpop([self.keys.reply(request_id)], wait_s)
        return None if got is None else outcome_from_json(got[1])[0]

    async def settled(self, batches: int = 1) -> None:
        """Until the worker has acknowledged and deleted every entry, and counted ``batches``
        batches (its counters move after the XDEL returns, so an empty stream alone can be
        seen before they do)."""
        for _ in range(200):
            if self.worker.batches >= batches and await self.client.xlen(self.keys.stream) == 0:
                return
            await asyncio.sleep(0.025)
        raise AssertionError("the worker left entries in the stream")

    async def close(self) -> None:
        self.worker.stop()
        if self.task is not None:
            await self.task
        await self.client.aclose()


async def test_a_decided_request_is_answered_before_its_batch_ends(
    redis_server: RedisServer,
) -> None:
    first_answered = threading.Event()
    seen: list[int] = []

    def decider(
        batch: Sequence[DecisionRequest], wanted: Wanted, deliver: Deliver
    ) -> list[DecisionOutcome]:
        seen.append(len(batch))
        outcomes = decide_many(batch, None)
        deliver(0, outcomes[0])
        # the rest of the batch is still being decided: request 0's answer must already be out
        first_answered.wait(5)
        return outcomes

    run = _Run(redis_server, decider, time.time)
    try:
        await run.queue([_request("a", None), _request("b", None)])
        early = await run.reply("a", 4)
        assert early is not None, "request a was not answered while its batch was running"
        first_answered.set()
        assert early.decision is not None
        assert not early.fallback_used
        late = await run.reply("b", 5)
        assert late is not None
        assert late.decision is not None
        await run.settled()
        assert seen == [2]
        assert run.worker.replied_early == 1
        # answered once: nothing left in either reply list, both marked done
        assert await run.client.llen(run.keys.reply("a")) == 0
        assert await run.client.exists(run.keys.done("a"), run.keys.done("b")) == 2
    finally:
        first_answered.set()
        await run.close()


async def test_abandoned_requests_are_acknowledged_without_work_or_reply(
    redis_server: RedisServer,
) -> None:
    t0 = 1_000_000.0
    now = [t0]
    starts: list[str] = []

    def decider(
        batch: Sequence[DecisionRequest], wanted: Wanted, deliver: Deliver
    ) -> list[DecisionOutcome]:
        def deliver_then_time_passes(i: int, outcome: DecisionOutcome) -> None:
            deliver(i, outcome)
            now[0] += 1.0  # deciding took a second: "late"'s requester has given up

        def watched(i: int) -> bool:
            keep = wanted(i)
            if keep:
                starts.append(batch[i].request_id)
            return keep

        return decide_many(batch, None, wanted=watched, deliver=deliver_then_time_passes)

    run = _Run(redis_server, decider, lambda: now[0])
    try:
        await run.queue(
            [
                _request("live", t0 + 60.0),
                _request("late", t0 + 0.5),  # still waited for when the batch starts
                _request("gone", t0 - 0.2),  # its requester stopped waiting before the read
            ]
        )
        assert await run.reply("live", 5) is not None
        await run.settled()
        assert starts == ["live"]  # "late" dropped before any work, "gone" never handed over
        assert await run.client.exists(run.keys.reply("late"), run.keys.reply("gone")) == 0
        assert await run.client.exists(run.keys.done("late"), run.keys.done("gone")) == 0
        pending = await run.client.xpending(run.keys.stream, run.keys.group)
        assert pending["pending"] == 0
        assert run.worker.decided == 2
        assert run.worker.replied_early == 1
    finally:
        await run.close()


async def test_a_budgeted_request_is_decided_while_its_requester_still_waits(
    redis_server: RedisServer,
) -> None:
    """An entry with a budget is waited for until ``start_by`` plus the budget, however long
    its batch-mates take: the worker decides and answers it, where counting from its 50 ms
    budget it would have dropped it as abandoned once the first request took a second."""
    t0 = 1_000_000.0
    now = [t0]

    def decider(
        batch: Sequence[DecisionRequest], wanted: Wanted, deliver: Deliver
    ) -> list[DecisionOutcome]:
        def deliver_then_time_passes(i: int, outcome: DecisionOutcome) -> None:
            deliver(i, outcome)
            now[0] += 1.0  # each decision takes a second

        return decide_many(batch, None, wanted=wanted, deliver=deliver_then_time_passes)

    run = _Run(redis_server, decider, lambda: now[0])
    try:
        requests = [_request(f"r{k}", t0 + 0.05) for k in range(3)]
        await run.queue(requests, {"budget_s": 0.05, "start_by": t0 + 5.0})
        for k in range(3):
            outcome = await run.reply(f"r{k}", 5)
            assert outcome is not None, f"r{k} was dropped"
            assert outcome.decision is not None
        await run.settled()
        assert run.worker.decided == 3
    finally:
        await run.close()


def test_the_worker_decider_answers_each_request_when_decided(tmp_path: Path) -> None:
    """``kairos worker``'s batch handler passes the worker's wanted/deliver to decide_many."""
    registry = PolicyRegistry(tmp_path)
    registry.discover()
    delivered: list[str] = []
    requests = [_request("x", None), _request("y", None), _request("z", None)]
    outcomes = batch_decider(registry)(
        requests,
        lambda i: requests[i].request_id != "y",
        lambda i, outcome: delivered.append(outcome.request_id),
    )
    assert delivered == ["x", "z"]
    assert [o.request_id for o in outcomes] == ["x", "y", "z"]
    assert outcomes[1].error_type == "RequestAbandoned"


async def test_an_entry_the_worker_cannot_read_is_answered_with_the_error(
    redis_server: RedisServer,
) -> None:
    """A message of a domain (or wire version) this worker does not know is refused at once:
    its requester gets an error reply and decides its fallback instead of waiting out its
    deadline; an entry without even a request id is dropped; the batch's good request is
    decided as usual."""
    run = _Run(redis_server, batch_decider(None), time.time)  # type: ignore[arg-type]
    try:
        entry = json.loads(request_to_json(_request("alien", None)))
        for body in (
            {**entry, "v": 2, "domain": "quantum"},
            {"v": 99, "nothing": "readable"},
        ):
            await run.client.xadd(run.keys.stream, {"req": json.dumps(body)})
        await run.queue([_request("good", None)])
        refused = await run.reply("alien", 4)
        assert refused is not None
        assert (refused.decision, refused.error_type) == (None, "WireError")
        assert "quantum" in (refused.error or "")
        good = await run.reply("good", 4)
        assert good is not None
        assert good.decision is not None
        await run.settled()
        assert await run.client.exists(run.keys.done("alien")) == 1
    finally:
        await run.close()
