"""Operations: liveness, readiness, metrics (outside ``/v1``, no auth)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from app.api.deps import DatabaseDep, DecisionServiceDep, MetricsDep, SettingsDep
from app.services.errors import BACKEND_RETRY_AFTER_S

router = APIRouter(tags=["operations"])

Health = Literal["ok", "degraded", "down"]


class Liveness(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Health
    database: Health
    queue: Health
    policies: Health
    #: ``VARIABLE=policy`` for each default policy that names no loaded model (ADR 0089)
    missing_policies: list[str] = Field(
        default_factory=list,
        description="Each default policy (`KAIROS_DEFAULT_POLICY=hpc-kernel`) that names no "
        "loaded model: decisions relying on it are the fallback's, and `policies` is `degraded`.",
    )


@router.get(
    "/healthz",
    response_model=Liveness,
    summary="Liveness",
    description="200 while the process serves HTTP; checks nothing else.",
)
async def get_healthz() -> Liveness:
    return Liveness()


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="Readiness",
    description=(
        "`database`, `queue` and `policies`, each `ok`, `degraded` or `down`. 200 when a "
        "decision can be served (a degraded queue still serves in-process), 503 (with "
        "`Retry-After`) when not, or when the database is down: then every route that reads or "
        "writes state answers 503 `backend_unavailable`, and `/v1/decide` answers unstored "
        "decisions (`stored: false`). Back to 200 by itself once the database answers."
    ),
    responses={503: {"model": Readiness, "description": "A decision cannot be served"}},
)
async def get_readyz(
    database: DatabaseDep, decisions: DecisionServiceDep, settings: SettingsDep
) -> JSONResponse:
    db: Health = "ok" if await database.ping() else "down"
    parts = decisions.health()
    pipeline = decisions.pipeline
    missing = [] if pipeline is None else pipeline.missing_defaults(settings)
    policies: Health = "degraded" if missing and parts["policies"] == "ok" else parts["policies"]
    values = [db, parts["queue"], policies]
    overall: Health = "down" if "down" in values else "degraded" if "degraded" in values else "ok"
    body = Readiness(
        status=overall,
        database=db,
        queue=parts["queue"],
        policies=policies,
        missing_policies=[f"{variable}={spec}" for spec, variable in missing],
    )
    if overall == "down":
        headers = {"Retry-After": str(BACKEND_RETRY_AFTER_S)}
        return JSONResponse(body.model_dump(), status_code=503, headers=headers)
    return JSONResponse(body.model_dump())


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    description="Request counts and latencies by route template, decisions by policy and fallback.",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
)
async def get_metrics(metrics: MetricsDep) -> Response:
    return Response(metrics.render(), media_type=metrics.content_type)
