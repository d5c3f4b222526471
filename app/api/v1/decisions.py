"""Scheduling rounds and the decision log."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Request
from pydantic import (
    Discriminator,
    Tag,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from app.api.deps import CtxDep, DecisionServiceDep, DecisionWriterDep, SettingsDep, TenantDep
from app.api.errors import ERROR_RESPONSES, OVERLOADED_RESPONSE
from app.api.middleware import UNSTORED_DECISION
from app.api.v1.params import ClusterId, Cursor, DecisionId, Limit
from app.schemas.common import DEFAULT_PAGE_LIMIT, Page, example
from app.schemas.dag import DAG_DECIDE_EXAMPLE, DagDecideRequest
from app.schemas.decision import (
    DECIDE_EXAMPLE,
    DecideRequest,
    DecisionDetail,
    DecisionRead,
    ScheduleRequest,
)
from app.schemas.gpu import GPU_DECIDE_EXAMPLE, GpuDecideRequest
from app.services import decisions as decision_log
from app.services import scheduling

router = APIRouter(tags=["decisions"], responses=ERROR_RESPONSES)


def _decide_domain(body: Any) -> str:
    """The ``domain`` of a ``/v1/decide`` body (absent: ``hpc``)."""
    if isinstance(body, dict):
        return str(body.get("domain") or "hpc")
    return str(getattr(body, "domain", None) or "hpc")


def _untagged(body: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Errors name the body's fields as they are sent (``body.nodes[0]``), without the union's
    tag that pydantic puts first in their location."""
    try:
        return handler(body)
    except ValidationError as exc:
        tag = _decide_domain(body)
        errors: list[Any] = []
        for e in exc.errors():
            loc = e["loc"][1:] if e["loc"][:1] == (tag,) else e["loc"]
            item: dict[str, Any] = {"type": e["type"], "loc": loc, "input": e["input"]}
            if "ctx" in e:
                item["ctx"] = e["ctx"]
            errors.append(item)
        raise ValidationError.from_exception_data(exc.title, errors) from None


#: ``POST /v1/decide``'s body: one snapshot shape per domain, chosen by its ``domain`` field.
DecideBody = Annotated[
    Annotated[
        Annotated[DecideRequest, Tag("hpc")]
        | Annotated[GpuDecideRequest, Tag("gpu")]
        | Annotated[DagDecideRequest, Tag("dag")],
        Discriminator(_decide_domain),
    ],
    WrapValidator(_untagged),
]

RequestId = Annotated[
    str | None,
    Header(
        alias="X-Request-ID",
        pattern=r"^[A-Za-z0-9_.:\-]{1,128}$",
        description="Optional id of this decision request (unique; a repeat is 409)",
    ),
]


@router.post(
    "/clusters/{cluster_id}/schedule",
    response_model=DecisionRead,
    responses=OVERLOADED_RESPONSE,
    summary="Run a scheduling round",
    description=(
        "Decides which pending jobs start now and where, with the cluster's policy (or `policy`) "
        "and its fallback. Unless `dry_run`, the allocations are applied atomically with storing "
        "the decision: jobs become `running`, node capacity is taken. Concurrent rounds on one "
        "cluster are serialised. `now` defaults to the server's clock."
    ),
)
async def schedule_cluster(
    cluster_id: ClusterId,
    ctx: CtxDep,
    decisions: DecisionServiceDep,
    settings: SettingsDep,
    request_id: RequestId = None,
    body: Annotated[
        ScheduleRequest | None,
        Body(
            openapi_examples={
                "apply": example("Schedule and apply", {}),
                "dry": example("Preview with explanations", {"dry_run": True, "explain": True}),
                "dag": example(
                    "A dag cluster's round after a stage returned slots",
                    {"trigger": {"type": "stage_released", "job_id": "q9-1:scan"}},
                ),
            }
        ),
    ] = None,
) -> DecisionRead:
    return await scheduling.schedule_cluster(
        ctx,
        cluster_id,
        body or ScheduleRequest(),
        decisions=decisions,
        settings=settings,
        request_id=request_id,
    )


@router.post(
    "/decide",
    response_model=DecisionRead,
    responses=OVERLOADED_RESPONSE,
    summary="Decide on a snapshot (stateless)",
    description=(
        "Decides on a cluster snapshot sent in the body; `domain` chooses the snapshot's shape "
        "(absent or `hpc`: nodes, running and pending jobs; `gpu`: GPU nodes and jobs with "
        "their attained service; `dag`: nodes, an executor slot and DAGs of stages with "
        "their progress). Nothing about any cluster changes; the "
        "decision is stored in the decision log (with `cluster_id: null`). It needs no database "
        "to decide: while the database is unavailable the decision is still answered, with "
        "`stored: false` (not in the log; an `Idempotency-Key` is then not claimed either)."
    ),
)
async def decide(
    request: Request,
    body: Annotated[
        DecideBody,
        Body(
            openapi_examples={
                "small": example("Two nodes, two pending jobs", DECIDE_EXAMPLE),
                "gpu": example("A GPU snapshot (domain gpu)", GPU_DECIDE_EXAMPLE),
                "dag": example("A DAG snapshot (domain dag)", DAG_DECIDE_EXAMPLE),
            }
        ),
    ],
    tenant: TenantDep,
    decisions: DecisionServiceDep,
    writer: DecisionWriterDep,
    settings: SettingsDep,
    request_id: RequestId = None,
) -> DecisionRead:
    store = not request.scope.get("state", {}).get(UNSTORED_DECISION, False)
    return await scheduling.decide_snapshot(
        tenant,
        body,
        domain=_decide_domain(body),
        decisions=decisions,
        writer=writer,
        settings=settings,
        request_id=request_id,
        store=store,
    )


@router.get(
    "/decisions/{decision_id}",
    response_model=DecisionDetail,
    summary="Get a decision",
    description="One decision with its input snapshot (in `/v1/decide` request shape).",
)
async def get_decision(decision_id: DecisionId, ctx: CtxDep) -> DecisionDetail:
    return await decision_log.get_decision(ctx, decision_id)


@router.get(
    "/clusters/{cluster_id}/decisions",
    response_model=Page[DecisionRead],
    summary="List a cluster's decisions",
    description="The cluster's decision log, newest first.",
)
async def list_decisions(
    cluster_id: ClusterId, ctx: CtxDep, limit: Limit = DEFAULT_PAGE_LIMIT, cursor: Cursor = None
) -> Page[DecisionRead]:
    return await decision_log.list_decisions(ctx, cluster_id, limit=limit, cursor=cursor)
