"""DAG jobs of a dag cluster."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Query, Response, status

from app.api.deps import CtxDep
from app.api.errors import ERROR_RESPONSES
from app.api.v1.params import ClusterId, Cursor, Limit
from app.schemas.common import DEFAULT_PAGE_LIMIT, ErrorResponse, Page, example
from app.schemas.dag import DAG_EXAMPLE, DAG_ID_PATTERN, DagRead, DagSpec, DagStateName
from app.services import dags as dag_service

router = APIRouter(
    prefix="/clusters/{cluster_id}/dags",
    tags=["dags"],
    responses={**ERROR_RESPONSES, 409: {"model": ErrorResponse, "description": "Conflict"}},
)

DagIdPath = Annotated[
    str, Path(pattern=DAG_ID_PATTERN, description="DAG id (no `:`)", examples=["q9-1"])
]


@router.post(
    "",
    response_model=DagRead,
    status_code=status.HTTP_201_CREATED,
    summary="Submit a DAG",
    description=(
        "Queues a DAG job of stages on a dag cluster (409 `not_a_dag_cluster` elsewhere). Each "
        "stage is `tasks` independent tasks that may run on any number of executor slots at "
        "once, and is also a job `{dag_id}:{stage_id}`. 201 when created; the same id with the "
        "same body again answers 200 with the DAG as it is now; another body is 409. 422 names "
        "the field of a cyclic DAG, an unknown parent, a duplicate stage id, a task larger than "
        "an executor slot or an id with `:`."
    ),
    responses={200: {"model": DagRead, "description": "Already submitted with this body"}},
)
async def submit_dag(
    cluster_id: ClusterId,
    body: Annotated[
        DagSpec, Body(openapi_examples={"join": example("Two scans and a join", DAG_EXAMPLE)})
    ],
    ctx: CtxDep,
    response: Response,
) -> DagRead:
    dag, created = await dag_service.submit_dag(ctx, cluster_id, body)
    if not created:
        response.status_code = status.HTTP_200_OK
    return dag


@router.get(
    "",
    response_model=Page[DagRead],
    summary="List DAGs",
    description="The cluster's DAGs in submission order, optionally of one state.",
)
async def list_dags(
    cluster_id: ClusterId,
    ctx: CtxDep,
    state: Annotated[DagStateName | None, Query(description="Only DAGs in this state")] = None,
    limit: Limit = DEFAULT_PAGE_LIMIT,
    cursor: Cursor = None,
) -> Page[DagRead]:
    return await dag_service.list_dags(ctx, cluster_id, state=state, limit=limit, cursor=cursor)


@router.get(
    "/{dag_id}",
    response_model=DagRead,
    summary="Get a DAG",
    description=(
        "The DAG's state and per-stage progress: launched and finished tasks, running slots and "
        "their nodes, the parallelism limit and reservation of the last round, and the job "
        "completion time (`jct_s`) once finished."
    ),
)
async def get_dag(cluster_id: ClusterId, dag_id: DagIdPath, ctx: CtxDep) -> DagRead:
    return await dag_service.get_dag(ctx, cluster_id, dag_id)


@router.delete(
    "/{dag_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Cancel a DAG",
    description=(
        "Cancels a pending or running DAG (204): its slots are freed and its unfinished stages "
        "cancelled. Already cancelled is 204 again; a finished or failed DAG is 409."
    ),
)
async def cancel_dag(cluster_id: ClusterId, dag_id: DagIdPath, ctx: CtxDep) -> Response:
    await dag_service.cancel_dag(ctx, cluster_id, dag_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
