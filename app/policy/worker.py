"""``kairos worker``: decide requests from the Redis stream in batches (any number, any host).

Each worker loads every model under ``KAIROS_MODELS_DIR`` once at start (the same validation as
the API), reads the request stream through the shared consumer group, and decides each batch
with :func:`app.policy.deciders.decide_requests` in a thread (any domain; HPC requests
step-synchronously, sharing each inference).  SIGTERM/SIGINT
finish the batch in hand and exit.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from collections.abc import Callable, Sequence

from app.batching.redis_transport import RedisWorker, StreamKeys, WorkerOptions
from app.gc_tuning import freeze_startup_heap, restore_thresholds, set_young_threshold, thaw
from app.outcomes import DecisionOutcome, DecisionRequest, Deliver, Wanted
from app.policy.deciders import decide_requests
from app.policy.pipeline import pipeline_from_settings, report_policies
from app.policy.registry import PolicyRegistry, watching
from app.settings import Settings

logger = logging.getLogger(__name__)


#: a worker's decision leaves this much of the deadline for the reply's trip back to the API
WORKER_FALLBACK_RESERVE_S = 0.008


def batch_decider(
    registry: PolicyRegistry,
) -> Callable[[Sequence[DecisionRequest], Wanted, Deliver], list[DecisionOutcome]]:
    """The worker's batch handler: :func:`decide_requests` answering each request when
    decided."""

    def decide(
        batch: Sequence[DecisionRequest], wanted: Wanted, deliver: Deliver
    ) -> list[DecisionOutcome]:
        return decide_requests(
            batch,
            registry,
            fallback_reserve_s=WORKER_FALLBACK_RESERVE_S,
            wanted=wanted,
            deliver=deliver,
        )

    return decide


async def run_worker(settings: Settings, *, consumer: str | None = None) -> int:
    if not settings.REDIS_URL:
        logger.error("kairos worker needs KAIROS_REDIS_URL")
        return 2
    registry = pipeline_from_settings(settings).registry
    entries = await asyncio.to_thread(registry.discover)
    for entry in entries:
        state = "loaded" if entry.loaded else f"refused ({entry.reason}: {entry.message})"
        logger.info("policy %s@%s %s", entry.name, entry.version, state)
    report_policies(settings, registry)

    worker = RedisWorker(
        settings.REDIS_URL,
        batch_decider(registry),
        keys=StreamKeys(settings.REDIS_PREFIX),
        options=WorkerOptions(
            max_batch=settings.BATCH_MAX_SIZE,
            max_wait_ms=settings.BATCH_MAX_WAIT_MS,
            adaptive_wait=settings.BATCH_ADAPTIVE_WAIT,
            claim_idle_ms=settings.REDIS_CLAIM_IDLE_MS,
            reply_ttl_s=settings.REDIS_REPLY_TTL_S,
        ),
        consumer=consumer,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    if settings.GC_FREEZE:
        freeze_startup_heap()
    thresholds = set_young_threshold(settings.GC_GEN0_THRESHOLD)
    try:
        async with watching(registry, settings.MODELS_RESCAN_S):
            await worker.run()
    finally:
        restore_thresholds(thresholds)
        if settings.GC_FREEZE:
            thaw()
    logger.info("worker %s stopped after %d batches", worker.consumer, worker.batches)
    return 0


def main(args: Sequence[str], settings: Settings) -> int:
    parser = argparse.ArgumentParser(
        prog="kairos worker",
        description="Decide requests from the Redis request stream (needs KAIROS_REDIS_URL).",
    )
    parser.add_argument("--name", default=None, help="consumer name (default: host-pid)")
    opts = parser.parse_args(list(args))
    return asyncio.run(run_worker(settings, consumer=opts.name))
