"""A cluster's history as SWF, and tuning its policy from that history (issue 21)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response, status
from fastapi.responses import PlainTextResponse

from app.api.deps import CtxDep, DatabaseDep, DecisionServiceDep, TenantDep
from app.api.errors import ERROR_RESPONSES, JSON_ERROR_RESPONSES
from app.api.v1.params import ClusterId, Cursor, Limit
from app.schemas.common import DEFAULT_PAGE_LIMIT, Page, example
from app.schemas.tune import MAX_HISTORY_JOBS, TuneCreate, TunePromote, TunePromoteRead, TuneRead
from app.services import tunes as tune_service

router = APIRouter(prefix="/clusters/{cluster_id}", tags=["tunes"], responses=ERROR_RESPONSES)

TuneId = Annotated[
    str,
    Path(pattern=r"^tune_[0-9a-f]{32}$", description="Tune id", examples=["tune_0f3a" + "0" * 28]),
]


async def get_tune_runner(
    request: Request, database: DatabaseDep, decisions: DecisionServiceDep
) -> tune_service.TuneRunner:
    """This app's tune runner, made on first use; its first act fails every tune whose lease
    expired (a replica that stopped mid-tune)."""
    runner: tune_service.TuneRunner | None = getattr(request.app.state, "tune_runner", None)
    if runner is None:
        runner = tune_service.TuneRunner(database, decisions)
        request.app.state.tune_runner = runner  # before the await: made once per app
        await tune_service.sweep_on_start(database)
    return runner


TuneRunnerDep = Annotated[tune_service.TuneRunner, Depends(get_tune_runner)]


@router.get(
    "/history",
    response_class=PlainTextResponse,
    summary="Export the cluster's history as SWF",
    description=(
        "The cluster's finished jobs in the Standard Workload Format (18 fields a line, header "
        "comments with `MaxNodes`/`MaxProcs`): submit, wait and run times from the job events, "
        "the requested walltime, the gang size as processors (in units of the jobs' most "
        "common task shape). In submit order, ties by job id; `since` keeps jobs submitted at "
        "or after it, `limit` the first that many. The input of `kairos tune --trace`."
    ),
    responses={
        **JSON_ERROR_RESPONSES,
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
    },
)
async def get_history(
    cluster_id: ClusterId,
    ctx: CtxDep,
    since: Annotated[
        float | None,
        Query(ge=0, le=1e11, description="Only jobs submitted at or after (epoch seconds)"),
    ] = None,
    limit: Annotated[
        int | None, Query(ge=1, le=MAX_HISTORY_JOBS, description="At most this many jobs")
    ] = None,
) -> PlainTextResponse:
    history = await tune_service.export_history(ctx, cluster_id, since=since, limit=limit)
    return PlainTextResponse(
        history.text,
        media_type="text/plain",
        headers={"X-Kairos-History-Jobs": str(history.jobs)},
    )


@router.post(
    "/tune",
    response_model=TuneRead,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Tune the cluster's policy from its history",
    description=(
        "Starts a tune in the background (202, `state: queued`): the cluster's newest finished "
        "jobs are the history; the latest part is held out, every heuristic, the start model "
        "and the tuned candidates are compared on the same validation windows, and the winner "
        "is registered for this tenant only (a heuristic winner registers nothing and is the "
        "recommendation). The result then runs as the cluster's shadow policy; it becomes the "
        "primary only through `POST .../tunes/{tune_id}/promote` (or `auto_promote`), guarded "
        "by the validation result. 422 `too_little_history` when the history is shorter than "
        "two windows (nothing is started); 409 `tune_in_progress` while another tune of the "
        "cluster runs. A tune that fails leaves the cluster as it was and says why."
    ),
)
async def start_tune(
    cluster_id: ClusterId,
    body: TuneCreate,
    tenant: TenantDep,
    database: DatabaseDep,
    decisions: DecisionServiceDep,
    runner: TuneRunnerDep,
    response: Response,
) -> TuneRead:
    tune = await tune_service.create_tune(
        database, tenant, cluster_id, body, decisions=decisions, runner=runner
    )
    response.headers["Location"] = f"/v1/clusters/{cluster_id}/tunes/{tune.id}"
    return tune


@router.get(
    "/tunes",
    response_model=Page[TuneRead],
    summary="List the cluster's tunes",
    description="The cluster's tunes, newest first, with state, progress and result.",
)
async def list_tunes(
    cluster_id: ClusterId,
    tenant: TenantDep,
    database: DatabaseDep,
    limit: Limit = DEFAULT_PAGE_LIMIT,
    cursor: Cursor = None,
) -> Page[TuneRead]:
    return await tune_service.list_tunes(database, tenant, cluster_id, limit=limit, cursor=cursor)


@router.get(
    "/tunes/{tune_id}",
    response_model=TuneRead,
    summary="Get a tune",
    description=(
        "A tune's state (`queued`, `running`, `succeeded`, `failed` with `error`), its latest "
        "progress, and once it succeeded its result: the winner, the validation table and the "
        "card; `phase` says whether the result is the cluster's shadow or primary policy."
    ),
)
async def get_tune(
    cluster_id: ClusterId, tune_id: TuneId, tenant: TenantDep, database: DatabaseDep
) -> TuneRead:
    return await tune_service.get_tune(database, tenant, cluster_id, tune_id)


@router.post(
    "/tunes/{tune_id}/promote",
    response_model=TunePromoteRead,
    summary="Promote a tune's result to the cluster's primary policy",
    description=(
        "Makes the tune's policy the cluster's primary when its validation result beats the "
        "current policy's on the tune's validation windows (the guard), or with `force`. A "
        "refusal is 409 with the reason as the code: `tune_not_finished`, `tune_failed`, "
        "`already_primary`, `policy_missing`, `backfill_mismatch`, `validation_not_better`. "
        "Promotions and refusals are in the audit log."
    ),
)
async def promote_tune(
    cluster_id: ClusterId,
    tune_id: TuneId,
    tenant: TenantDep,
    database: DatabaseDep,
    decisions: DecisionServiceDep,
    body: Annotated[
        TunePromote | None,
        Body(
            openapi_examples={
                "guarded": example("Promote if the guard passes", {"force": False}),
                "forced": example("Promote whatever the guard says", {"force": True}),
            }
        ),
    ] = None,
) -> TunePromoteRead:
    return await tune_service.promote_tune(
        database, tenant, cluster_id, tune_id, body or TunePromote(), decisions=decisions
    )
