"""Jobs of a cluster."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query, Response, status

from app.api.deps import CtxDep
from app.api.errors import ERROR_RESPONSES
from app.api.v1.params import ClusterId, Cursor, JobId, Limit
from app.schemas.common import DEFAULT_PAGE_LIMIT, ErrorResponse, Page, example
from app.schemas.job import (
    GPU_JOB_EXAMPLE,
    JOB_EXAMPLE,
    JobBatchCreate,
    JobBatchRead,
    JobCreate,
    JobEventCreate,
    JobRead,
    JobStateName,
)
from app.services import jobs as job_service

router = APIRouter(
    prefix="/clusters/{cluster_id}/jobs",
    tags=["jobs"],
    responses={**ERROR_RESPONSES, 409: {"model": ErrorResponse, "description": "Conflict"}},
)


@router.post(
    "",
    response_model=JobRead,
    status_code=status.HTTP_201_CREATED,
    summary="Submit a job",
    description=(
        "Queues a job (a gang of `tasks` x `per_task`). 201 when created; the same id with the "
        "same body again answers 200 with the same job; the same id with a different body is "
        "409. `per_task` may only name the cluster's resources. `walltime_s` is required on hpc "
        "clusters and optional on gpu clusters (the job's estimate)."
    ),
    responses={200: {"model": JobRead, "description": "Already submitted with this body"}},
)
async def submit_job(
    cluster_id: ClusterId,
    body: Annotated[
        JobCreate,
        Body(
            openapi_examples={
                "gang": example("A 4-task gang", JOB_EXAMPLE),
                "gpu": example(
                    "An elastic GPU job with no estimate (gpu cluster)", GPU_JOB_EXAMPLE
                ),
            }
        ),
    ],
    ctx: CtxDep,
    response: Response,
) -> JobRead:
    job, created = await job_service.submit_job(ctx, cluster_id, body)
    if not created:
        response.status_code = status.HTTP_200_OK
    return job


@router.post(
    "/batch",
    response_model=JobBatchRead,
    status_code=status.HTTP_201_CREATED,
    summary="Submit many jobs",
    description=(
        "Submits up to 10,000 jobs all-or-nothing. Ids already present with the same spec are "
        "returned as they are; any id present with another spec fails the whole batch (409). "
        "201 when at least one job was created, else 200."
    ),
    responses={200: {"model": JobBatchRead, "description": "Every job was already submitted"}},
)
async def submit_jobs(
    cluster_id: ClusterId, body: JobBatchCreate, ctx: CtxDep, response: Response
) -> JobBatchRead:
    jobs, created = await job_service.submit_jobs(ctx, cluster_id, body.jobs)
    if not created:
        response.status_code = status.HTTP_200_OK
    return JobBatchRead(jobs=jobs)


@router.get(
    "",
    response_model=Page[JobRead],
    summary="List jobs",
    description="The cluster's jobs in submission order, optionally of one state.",
)
async def list_jobs(
    cluster_id: ClusterId,
    ctx: CtxDep,
    state: Annotated[JobStateName | None, Query(description="Only jobs in this state")] = None,
    limit: Limit = DEFAULT_PAGE_LIMIT,
    cursor: Cursor = None,
) -> Page[JobRead]:
    return await job_service.list_jobs(ctx, cluster_id, state=state, limit=limit, cursor=cursor)


@router.get(
    "/{job_id}",
    response_model=JobRead,
    summary="Get a job",
    description="The job with its state, placements, start/end times and deciding decision.",
)
async def get_job(cluster_id: ClusterId, job_id: JobId, ctx: CtxDep) -> JobRead:
    return await job_service.get_job(ctx, cluster_id, job_id)


@router.post(
    "/{job_id}/events",
    response_model=JobRead,
    summary="Report a job event",
    description=(
        "`finished` (running -> finished), `failed` (running or pending -> failed), `released` "
        "(running -> pending: the orchestrator could not launch it), `cancelled` (pending or "
        "running -> cancelled). Ending a running job frees its nodes. Repeating the event that "
        "ended a job is a no-op; any other transition is 409."
    ),
)
async def create_job_event(
    cluster_id: ClusterId,
    job_id: JobId,
    body: Annotated[
        JobEventCreate,
        Body(openapi_examples={"finished": example("The job finished", {"type": "finished"})}),
    ],
    ctx: CtxDep,
) -> JobRead:
    return await job_service.record_event(ctx, cluster_id, job_id, body)


@router.delete(
    "/{job_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Cancel a pending job",
    description="Cancels a pending job (204). A job that already started is 409: send an event.",
)
async def cancel_job(cluster_id: ClusterId, job_id: JobId, ctx: CtxDep) -> Response:
    await job_service.cancel_job(ctx, cluster_id, job_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
