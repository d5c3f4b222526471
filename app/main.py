"""The FastAPI application: ``uvicorn --factory app.main:create_app``.

Nothing happens at import; ``create_app`` wires routers, middleware and error handlers, and the
lifespan builds (and tears down) the engine and the decision service.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version

from fastapi import FastAPI
from fastapi.routing import APIRoute

from app.api.docs import install_docs
from app.api.errors import ErrorGuardMiddleware, install_error_handlers
from app.api.methods import AllowedMethodsMiddleware
from app.api.middleware import (
    AdmissionMiddleware,
    AnsweredKeys,
    BodyLimitMiddleware,
    IdempotencyMiddleware,
    MetricsMiddleware,
)
from app.api.v1 import api_router
from app.api.v1.health import router as health_router
from app.db.decision_writer import DecisionWriter
from app.db.engine import make_engine, while_unavailable
from app.db.migrate import is_behind, upgrade_to_head
from app.db.session import Database
from app.gc_tuning import freeze_startup_heap, restore_thresholds, set_young_threshold, thaw
from app.heartbeat import beating
from app.observability import Metrics, multiprocess_dir
from app.policy.pipeline import pipeline_from_settings, report_policies
from app.services.decision import DecisionService, gate_from_settings
from app.services.idempotency import IdempotencyJanitor
from app.settings import Settings, get_settings
from app.ui import router as ui_router

logger = logging.getLogger(__name__)

#: the distribution's name in pyproject.toml; the API's version is the installed package's
DISTRIBUTION = "kairos"


def api_version() -> str:
    """The installed distribution's version (one source of truth with the package and its wheel);
    a checkout used without installing has no metadata and says so."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"


DESCRIPTION = """Register a cluster and its nodes, submit jobs, and ask for a scheduling round:
Kairos answers with allocations from a learned policy or a heuristic fallback, and records every
decision.

Errors always have the shape `{"error": {"code", "message", "details"}}`. When the service runs
with `KAIROS_API_KEYS`, every `/v1` call needs `Authorization: Bearer <key>`. Every `POST` honours
an `Idempotency-Key` header: a repeat within the key's lifetime (24 h by default) replays the first
response."""


def operation_id(route: APIRoute) -> str:
    tag = str(route.tags[0]) if route.tags else "default"
    return f"{tag}-{route.name}"


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    metrics = Metrics(multiprocess_dir())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(
            settings.DATABASE_URL,
            pool_size=settings.DB_POOL_SIZE,
            max_overflow=settings.DB_MAX_OVERFLOW,
            sqlite_busy_timeout_s=settings.SQLITE_BUSY_TIMEOUT_S,
        )
        database = Database(engine)
        writer = DecisionWriter(database, sqlite_busy_timeout_s=settings.SQLITE_BUSY_TIMEOUT_S)
        metrics.track_decision_writer(writer)
        pipeline = pipeline_from_settings(settings, on_batch=metrics.observe_batch)
        metrics.track_queue_depth(pipeline.queue_depth)
        decisions = DecisionService(
            default_deadline_s=settings.DEFAULT_DEADLINE_MS / 1000.0,
            pipeline=pipeline,
            gate=gate_from_settings(settings),
        )
        metrics.track_admission(decisions.gate)
        decisions.add_observer(metrics.observe_decision)
        janitor = (
            IdempotencyJanitor(
                database,
                ttl=timedelta(seconds=settings.IDEMPOTENCY_TTL_S),
                interval_s=settings.IDEMPOTENCY_PURGE_INTERVAL_S,
            )
            if settings.IDEMPOTENCY_TTL_S > 0
            else None
        )
        thresholds: tuple[int, int, int] | None = None
        try:
            if settings.AUTO_MIGRATE and await while_unavailable(
                lambda: is_behind(engine), settings.DB_STARTUP_WAIT_S
            ):
                logger.info("database schema is behind; upgrading to head")
                await upgrade_to_head(engine)
            await decisions.start()
            report_policies(settings, pipeline.registry)
            writer.start()
            if janitor is not None:
                janitor.start()
            app.state.database = database
            app.state.decisions = decisions
            app.state.decision_writer = writer
            if settings.GC_FREEZE:
                freeze_startup_heap()
            thresholds = set_young_threshold(settings.GC_GEN0_THRESHOLD)
            async with metrics.shared(), beating(settings.HEARTBEAT_DIR):
                yield
        finally:
            if thresholds is not None:
                restore_thresholds(thresholds)
            if settings.GC_FREEZE:
                thaw()
            if janitor is not None:
                await janitor.close()
            tune_runner = getattr(app.state, "tune_runner", None)
            if tune_runner is not None:  # its tunes' children are killed, their leases expire
                await tune_runner.close()
            await writer.close()
            await decisions.close()
            await database.dispose()

    app = FastAPI(
        title="Kairos",
        version=api_version(),
        summary="Scheduling as a service",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        generate_unique_id_function=operation_id,
        # a path with a trailing slash is a JSON 404 naming the path without it, not an empty 307
        redirect_slashes=False,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.api_keys = settings.api_key_tenants()
    install_error_handlers(app)
    app.include_router(health_router)
    app.include_router(api_router)
    app.include_router(ui_router)
    install_docs(app)
    answered = AnsweredKeys()  # shared: admission answers retries of what idempotency stored
    app.add_middleware(AllowedMethodsMiddleware, routes=app.router.routes)
    app.add_middleware(IdempotencyMiddleware, answered=answered)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.MAX_BODY_BYTES)
    app.add_middleware(AdmissionMiddleware, answered=answered)
    app.add_middleware(ErrorGuardMiddleware)  # inside metrics: its answers are counted
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
