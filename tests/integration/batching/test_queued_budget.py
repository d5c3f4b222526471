"""A request's deadline is its primary policy's budget from the start of the batch that decides
it (app.batching.budget): requests queued behind a slow batch are still decided by the learned
policy, together in one batch, in process and through Redis with a worker. A model too slow on
its own still falls back.

The slow batch is an injected slow inference (its first call blocks until the test releases
it), so what the tests assert is who decided and how requests were batched, never a duration.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from app.batching.redis_transport import RedisWorker, StreamKeys, WorkerOptions
from app.domains.hpc.types import ClusterState, Job, Node
from app.outcomes import DecisionOutcome, DecisionRequest, FallbackReason
from app.policy.onnx_policy import RuntimeOptions
from app.policy.pipeline import DecisionPipeline, PipelineOptions
from app.policy.registry import PolicyRegistry
from app.policy.worker import batch_decider
from tests.fixtures import onnx_models as m

#: the Redis server the suite runs against (each test under a key prefix of its own)
REDIS_URL = "redis://127.0.0.1:6379/0"
#: the budget of the queued requests: far less than the blocked batch ahead of them lasts
BUDGET_S = 0.05
#: how long the first batch is held: past every queued request's deadline counted from arrival
HOLD_S = 0.3
QUEUED = 8


def _request(request_id: str, policy: str, deadline: float | None) -> DecisionRequest:
    jobs = tuple(
        Job(f"{request_id}-j{i}", {"cpu": float(1 + i % 4)}, 60.0 * (1 + i), float(i))
        for i in range(6)
    )
    state = ClusterState(now=1000.0, nodes=(Node("n1", {"cpu": 8.0}),), pending=jobs)
    return DecisionRequest(request_id, state, policy=policy, deadline=deadline)


class _Gate:
    """Wraps a loaded model's ``score``: the first call (or every call, ``always``) blocks until
    :meth:`release`; ``entered`` is set once a call is blocked."""

    def __init__(self, score: Callable[..., Any], *, always: bool = False) -> None:
        self._score = score
        self._always = always
        self._released = threading.Event()
        self.entered = threading.Event()
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if self._always or self.calls == 1:
            self.entered.set()
            self._released.wait(10)
        return self._score(*args)

    def release(self) -> None:
        self._released.set()


@dataclass
class _Models:
    registry: PolicyRegistry
    name: str
    monkeypatch: pytest.MonkeyPatch
    gate: _Gate | None = None

    def hold(self, *, always: bool = False) -> _Gate:
        """Gate the loaded model's inference (after the pipeline's start has loaded it)."""
        entry = self.registry.find_or_load(self.name)
        assert entry is not None, "the test model is not known"
        assert entry.policy is not None, "the test model did not load"
        self.gate = _Gate(entry.policy.score, always=always)
        self.monkeypatch.setattr(entry.policy, "score", self.gate)
        return self.gate

    def release(self) -> None:
        if self.gate is not None:
            self.gate.release()


def _models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> _Models:
    name = f"hpc-{mode}"
    body = m.card(name=name, version="1")
    if mode == "rank":
        body["decision_mode"] = "rank"
    m.write_model(tmp_path / "models", name, "1", m.kernel_model(seed=3), body)
    return _Models(PolicyRegistry(tmp_path / "models", RuntimeOptions()), name, monkeypatch)


@pytest.fixture(params=["step", "rank"])
def models(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> _Models:
    return _models(tmp_path, monkeypatch, str(request.param))


async def _until(predicate: Callable[[], bool], what: str) -> None:
    for _ in range(400):
        if predicate():
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"timed out waiting for {what}")


def _decided_by_the_model(outcome: DecisionOutcome) -> bool:
    return (
        not outcome.fallback_used
        and outcome.decision is not None
        and outcome.decision.policy.kind == "onnx"
    )


async def test_requests_queued_behind_a_slow_batch_keep_their_budget_and_share_a_batch(
    models: _Models,
) -> None:
    """In process: while the first batch is held, eight requests with a 50 ms budget queue up;
    once it ends they are decided by the model, all in one batch (one inference per step).
    Before, their deadline ran from arrival and every one of them fell back."""
    pipeline = DecisionPipeline(models.registry, PipelineOptions(max_batch=32, max_wait_ms=0.0))
    await pipeline.start()
    gate = models.hold()
    try:
        first = asyncio.ensure_future(
            pipeline.decide(_request("first", models.name, time.time() + 60.0))
        )
        await _until(gate.entered.is_set, "the first batch's inference")
        queued = [
            asyncio.ensure_future(
                pipeline.decide(_request(f"q{k}", models.name, time.time() + BUDGET_S))
            )
            for k in range(QUEUED)
        ]
        await _until(lambda: pipeline.batcher.depth == QUEUED, "the requests to queue")
        await asyncio.sleep(HOLD_S)  # past every queued deadline counted from arrival
        gate.release()
        outcomes = await asyncio.gather(first, *queued)
    finally:
        gate.release()
        await pipeline.close()
    assert all(_decided_by_the_model(o) for o in outcomes), [
        (o.request_id, o.fallback_reason, o.fallback_detail) for o in outcomes
    ]
    assert pipeline.batcher.batches == 2
    assert pipeline.batcher.items == 1 + QUEUED
    assert pipeline.batcher.mean_batch >= 2
    assert [o.batch_size for o in outcomes[1:]] == [QUEUED] * QUEUED  # one shared inference


async def test_a_model_too_slow_on_its_own_request_still_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget still binds the primary's own work: an inference that does not return
    within it leaves the request to the fallback (deadline_exceeded)."""
    models = _models(tmp_path, monkeypatch, "step")
    pipeline = DecisionPipeline(models.registry, PipelineOptions(max_batch=32, max_wait_ms=0.0))
    await pipeline.start()
    gate = models.hold(always=True)
    try:
        outcome = await pipeline.decide(_request("slow", models.name, time.time() + BUDGET_S))
    finally:
        gate.release()
        await pipeline.close()
    assert outcome.fallback_used
    assert outcome.fallback_reason == FallbackReason.DEADLINE_EXCEEDED
    assert outcome.decision is not None
    assert outcome.decision.policy.kind == "heuristic"


@dataclass
class _RedisStack:
    pipeline: DecisionPipeline
    worker: RedisWorker
    task: asyncio.Task[None]


@pytest.fixture
async def redis_stack(models: _Models) -> AsyncIterator[_RedisStack]:
    prefix = f"test-budget-{uuid.uuid4().hex[:8]}"
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        await client.ping()
    except Exception as exc:  # the suite's Redis is part of the environment
        pytest.fail(f"no Redis at {REDIS_URL}: {exc!r}")
    worker = RedisWorker(
        REDIS_URL,
        batch_decider(models.registry),
        keys=StreamKeys(prefix),
        options=WorkerOptions(max_batch=32, max_wait_ms=0.0, block_ms=50),
        consumer="w1",
    )
    task = asyncio.create_task(worker.run())
    pipeline = DecisionPipeline(
        models.registry,
        PipelineOptions(max_batch=32, max_wait_ms=0.0, redis_url=REDIS_URL, redis_prefix=prefix),
    )
    assert pipeline.queue is not None
    pipeline.queue.ping_interval_s = 0.05
    await pipeline.start()
    try:
        queue = pipeline.queue
        await _until(lambda: queue.usable, "the API to see the worker")
        yield _RedisStack(pipeline, worker, task)
    finally:
        models.release()
        worker.stop()
        await task
        await pipeline.close()
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@pytest.mark.redis
async def test_requests_queued_for_a_busy_worker_keep_their_budget_and_share_a_batch(
    models: _Models, redis_stack: _RedisStack
) -> None:
    """Through Redis: the worker holds its first batch while eight requests with a 50 ms
    budget wait in the stream; its next batch decides them all with the model. Before, the
    worker dropped them as abandoned and the API answered each with the fallback."""
    pipeline, worker = redis_stack.pipeline, redis_stack.worker
    gate = models.hold()
    first = asyncio.ensure_future(
        pipeline.decide(_request("first", models.name, time.time() + 60.0))
    )
    await _until(gate.entered.is_set, "the worker's first inference")
    queued = [
        asyncio.ensure_future(
            pipeline.decide(_request(f"q{k}", models.name, time.time() + BUDGET_S))
        )
        for k in range(QUEUED)
    ]
    assert pipeline.queue is not None
    queue = pipeline.queue
    await _until(lambda: queue.in_flight == 1 + QUEUED, "the requests to be sent")
    await asyncio.sleep(HOLD_S)  # past every queued deadline counted from arrival
    gate.release()
    outcomes = await asyncio.gather(first, *queued)
    assert all(_decided_by_the_model(o) for o in outcomes), [
        (o.request_id, o.fallback_reason, o.fallback_detail) for o in outcomes
    ]
    await _until(lambda: worker.batches == 2, "the worker to count its batches")
    assert worker.decided == 1 + QUEUED
    assert [o.batch_size for o in outcomes[1:]] == [QUEUED] * QUEUED
