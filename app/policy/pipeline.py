"""The decision pipeline the service plugs in: registry + batcher + (optional) Redis queue.

* Embedded (no ``KAIROS_REDIS_URL``): requests go through an in-process :class:`MicroBatcher`
  whose handler is :func:`app.policy.deciders.decide_requests` (in a thread; every domain, HPC
  requests step-synchronously).
* Redis: requests are ``XADD``ed to the stream and answered by ``kairos worker`` processes.  When
  Redis is unreachable (or fails mid-request), or no worker has sent a heartbeat lately, the
  request is decided in-process instead, and :meth:`DecisionPipeline.queue_health` reports
  ``degraded`` until Redis answers pings and a worker is alive again.
* Deadline: the time left of a request's ``deadline`` (epoch seconds) when it enters the
  pipeline is its primary policy's budget, counted from the start of the batch that decides it,
  not from its arrival (:mod:`app.batching.budget`): a request that queues behind a busy
  decision thread or worker keeps its whole budget. A request whose batch has not started
  within ``max_queue_wait_s``, whose primary would not be scored within its budget, or whose
  batch makes no progress for its budget (plus ``grace_s`` for the trip) is decided by the
  fallback heuristic with ``fallback.reason = "deadline_exceeded"``.

The pipeline is transport plumbing: it never raises for a request's policy or queue trouble, only
returns a :class:`DecisionOutcome` (whose ``error`` is set for a bad snapshot).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from app.batching.batcher import BatchControl, BatcherClosedError, BatchTimeoutError, MicroBatcher
from app.batching.budget import Budgeted, budget_of, started
from app.batching.redis_transport import QueueUnavailableError, RedisQueue, StreamKeys
from app.domains.hpc.heuristics import HEURISTIC_CLASSES
from app.outcomes import DecisionOutcome, DecisionRequest, FallbackReason
from app.policy.deciders import (
    batches_nothing,
    cells,
    decide_requests,
    fallback_for,
    heuristics_only,
)
from app.policy.onnx_policy import RuntimeOptions
from app.policy.registry import PACKAGED_MODELS, PolicyRegistry, split_name, watching
from app.policy.selector import DEFAULT_FALLBACK_RESERVE_S
from app.settings import Settings

logger = logging.getLogger(__name__)

QueueHealth = Literal["ok", "degraded", "down"]


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    max_batch: int = 32
    max_wait_ms: float = 2.0
    #: spend max_wait_ms only when the previous batch held several requests (ADR 0045)
    adaptive_wait: bool = True
    #: concurrent in-process batches (each runs in its own thread)
    concurrency: int = 1
    redis_url: str | None = None
    redis_prefix: str = "kairos"
    #: extra wait beyond the deadline for a worker's reply (the trip back)
    grace_s: float = 0.02
    #: the longest a request waits for its batch to start (in process or on a worker) before
    #: the fallback decides it; its deadline's budget counts from that start
    max_queue_wait_s: float = 1.0
    fallback_reserve_s: float = DEFAULT_FALLBACK_RESERVE_S
    #: a heuristic-only request of at most this many (pending job, node) pairs is decided on the
    #: event loop instead of in the decision thread (0: never)
    inline_max_cells: int = 4096
    #: seconds between looks for models another process installed (0: never; ADR 0086)
    models_rescan_s: float = 2.0


class DecisionPipeline:
    """One per process (built in ``lifespan``)."""

    def __init__(
        self,
        registry: PolicyRegistry,
        options: PipelineOptions,
        *,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self.registry = registry
        self.options = options
        self._on_batch = on_batch
        self._executor = ThreadPoolExecutor(
            max_workers=options.concurrency, thread_name_prefix="kairos-decide"
        )
        self.batcher: MicroBatcher[Budgeted, DecisionOutcome] = MicroBatcher(
            self._decide_queued,
            max_batch=options.max_batch,
            max_wait_ms=options.max_wait_ms,
            executor=self._executor,
            on_batch=self._observe_local_batch,
            concurrency=options.concurrency,
            adaptive_wait=options.adaptive_wait,
        )
        self._watch: contextlib.AsyncExitStack | None = None
        self.queue: RedisQueue | None = None
        if options.redis_url:
            self.queue = RedisQueue(options.redis_url, StreamKeys(options.redis_prefix))

    def _decide_batch(
        self,
        requests: Sequence[DecisionRequest],
        control: BatchControl[DecisionOutcome] | None = None,
    ) -> list[DecisionOutcome]:
        # with a batcher's control: answer each request as soon as it is decided, and skip the
        # ones whose wait has already ended in the fallback (ADR 0071)
        return decide_requests(
            requests,
            self.registry,
            fallback_reserve_s=self.options.fallback_reserve_s,
            wanted=None if control is None else control.wanted,
            deliver=None if control is None else control.deliver,
        )

    def _decide_queued(
        self, items: Sequence[Budgeted], control: BatchControl[DecisionOutcome]
    ) -> list[DecisionOutcome]:
        """The batcher's handler: each request's deadline counted from its batch's start, plus
        the time the batch spends on its batch-mates (:mod:`app.batching.budget`)."""
        shared_s = control.item_seconds * (len(items) - 1)
        return self._decide_batch(started(items, control.started_at, shared_s), control)

    def _observe_local_batch(self, size: int, _seconds: float) -> None:
        if self._on_batch is not None:
            self._on_batch(size)

    async def start(self) -> None:
        await asyncio.to_thread(self.registry.discover)
        for entry in self.registry.entries():
            if entry.loaded:
                logger.info(
                    "policy %s@%s loaded (sha256 %s)", entry.name, entry.version, entry.sha256
                )
            else:
                logger.warning(
                    "policy %s@%s refused: %s: %s",
                    entry.name,
                    entry.version,
                    entry.reason,
                    entry.message,
                )
        self.batcher.start()
        self._watch = contextlib.AsyncExitStack()
        await self._watch.enter_async_context(watching(self.registry, self.options.models_rescan_s))
        if self.queue is not None:
            await self.queue.start()

    async def close(self) -> None:
        if self._watch is not None:
            await self._watch.aclose()
            self._watch = None
        if self.queue is not None:
            await self.queue.close()
        await self.batcher.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ health and depth

    def queue_health(self) -> QueueHealth:
        if self.queue is None:
            return "ok" if self.batcher.running else "down"
        return "ok" if self.queue.usable else "degraded"

    def missing_defaults(self, settings: Settings) -> list[tuple[str, str]]:
        """:func:`missing_defaults` of this pipeline's registry (``/readyz``)."""
        return missing_defaults(settings, self.registry)

    def queue_depth(self) -> int:
        """Requests waiting in this process (in the batcher or for a worker's reply)."""
        waiting = self.batcher.depth
        if self.queue is not None:
            waiting += self.queue.in_flight
        return waiting

    # ------------------------------------------------------------------ deciding

    async def decide(self, request: DecisionRequest) -> DecisionOutcome:
        if self.queue is not None and self.queue.usable:
            remaining = self._remaining(request)
            queue_wait = self.options.max_queue_wait_s
            try:
                reply = await self.queue.submit(
                    request,
                    queue_wait + remaining + self.options.grace_s,
                    budget_s=budget_of(request, time.time()),
                    start_by=time.time() + queue_wait,
                )
            except QueueUnavailableError as exc:
                logger.warning("request %s: queue failed (%s); in-process", request.request_id, exc)
            else:
                if reply is None:
                    return await self._fallback(request, "no worker answered before the deadline")
                outcome, batch_size, leader = reply
                if leader and self._on_batch is not None:
                    self._on_batch(batch_size)
                return outcome
        return await self._local(request)

    def _remaining(self, request: DecisionRequest) -> float:
        if request.deadline is None:
            return 3600.0
        return max(0.0, request.deadline - time.time())

    async def _local(self, request: DecisionRequest) -> DecisionOutcome:
        unbatched = batches_nothing(request)
        if (
            unbatched
            and heuristics_only(request)
            and cells(request) <= self.options.inline_max_cells
        ):
            return await self._inline(request)
        try:
            if unbatched:
                return await asyncio.wait_for(
                    self._in_thread(request), self._remaining(request) + self.options.grace_s
                )
            budget = budget_of(request, time.time())
            return await self.batcher.submit(
                Budgeted(request, budget),
                queue_timeout_s=self.options.max_queue_wait_s,
                run_timeout_s=None if budget is None else budget + self.options.grace_s,
            )
        except BatchTimeoutError as exc:
            return await self._fallback(request, f"the primary policy did not answer: {exc}")
        except TimeoutError:
            return await self._fallback(request, "the batch did not finish before the deadline")
        except BatcherClosedError:
            return await self._fallback(request, "the batcher is stopped")

    # A heuristic-only request gains nothing from a batch (heuristics decide one request at a
    # time), so it skips the batcher and its wait. A small one is decided right on the event loop
    # (a thread hop there and back would cost a good part of its decision and always waits for
    # the GIL anyway); a larger one in the decision thread.

    async def _inline(self, request: DecisionRequest) -> DecisionOutcome:
        if not self.batcher.running:
            return await self._fallback(request, "the batcher is stopped")
        outcome = self._decide_batch([request])[0]
        self._observe_local_batch(1, 0.0)
        return outcome

    async def _in_thread(self, request: DecisionRequest) -> DecisionOutcome:
        if not self.batcher.running:
            raise BatcherClosedError("batcher is not running")
        loop = asyncio.get_running_loop()
        outcomes = await loop.run_in_executor(self._executor, self._decide_batch, [request])
        self._observe_local_batch(1, 0.0)
        return outcomes[0]

    async def _fallback(self, request: DecisionRequest, detail: str) -> DecisionOutcome:
        # a small fallback is decided on the event loop, like any small heuristic request (ADR
        # 0055): under overload a thread hop per expired request only adds GIL hand-offs
        if cells(request) <= self.options.inline_max_cells:
            return fallback_for(request, FallbackReason.DEADLINE_EXCEEDED, detail)
        return await asyncio.to_thread(
            fallback_for, request, FallbackReason.DEADLINE_EXCEEDED, detail
        )


def _is_heuristic(name: str) -> bool:
    return name.strip().lower() in HEURISTIC_CLASSES


def pipeline_from_settings(
    settings: Settings, *, on_batch: Callable[[int], None] | None = None
) -> DecisionPipeline:
    """The pipeline ``create_app`` builds: models from the package and ``MODELS_DIR``
    (ADR 0089), batching from settings."""
    registry = PolicyRegistry(
        Path(settings.MODELS_DIR),
        RuntimeOptions(
            intra_op_threads=settings.ONNX_INTRA_OP_THREADS,
            inter_op_threads=settings.ONNX_INTER_OP_THREADS,
            max_candidates=settings.MAX_CANDIDATES,
        ),
        packaged=PACKAGED_MODELS if settings.SHIPPED_MODELS else None,
    )
    options = PipelineOptions(
        max_batch=settings.BATCH_MAX_SIZE,
        max_wait_ms=settings.BATCH_MAX_WAIT_MS,
        adaptive_wait=settings.BATCH_ADAPTIVE_WAIT,
        concurrency=settings.BATCH_CONCURRENCY,
        redis_url=settings.REDIS_URL,
        redis_prefix=settings.REDIS_PREFIX,
        models_rescan_s=settings.MODELS_RESCAN_S,
    )
    return DecisionPipeline(registry, options, on_batch=on_batch)


#: each default-policy setting and the variable that sets it
_DEFAULTS = (
    ("DEFAULT_POLICY", "KAIROS_DEFAULT_POLICY"),
    ("DEFAULT_POLICY_NO_BACKFILL", "KAIROS_DEFAULT_POLICY_NO_BACKFILL"),
)


def missing_defaults(settings: Settings, registry: PolicyRegistry) -> list[tuple[str, str]]:
    """``(policy, variable)`` for each default policy that is neither a heuristic nor a loaded
    shipped model: a decision that relies on it is the fallback's (``model_missing`` or
    ``model_refused``)."""
    loaded = {(e.name.lower(), e.version) for e in registry.entries() if e.loaded and not e.owner}
    missing: list[tuple[str, str]] = []
    for attribute, variable in _DEFAULTS:
        spec: str = getattr(settings, attribute)
        if _is_heuristic(spec):
            continue
        name, version = split_name(spec.strip().lower())
        if not any(n == name and version in (None, v) for n, v in loaded):
            missing.append((spec, variable))
    return missing


def report_policies(settings: Settings, registry: PolicyRegistry) -> None:
    """Log at start-up the models loaded (``name@version``) and where they were read, and warn
    for each default policy that :func:`missing_defaults` finds."""
    where = ", ".join(str(d.resolve()) for d in registry.shipped_dirs())
    loaded = [e.spec for e in registry.entries() if e.loaded]
    logger.info(
        "policies loaded from %s: %s", where, ", ".join(loaded) if loaded else "none (no models)"
    )
    for spec, variable in missing_defaults(settings, registry):
        logger.warning(
            "DEFAULT POLICY MISSING: %s=%s names no loaded model in %s; every decision that "
            "relies on it is made by the fallback %s (reason model_missing or model_refused)",
            variable,
            spec,
            where,
            settings.DEFAULT_FALLBACK,
        )
