"""Use-cases for DAG jobs of ``dag`` clusters: submission (idempotent by id), reading, listing,
cancellation and the stages' progress events.

A DAG's stage is also a job ``"{dag_id}:{stage_id}"`` (spec 7.2): ``tasks``, ``per_task``,
``walltime_s = task_duration_s``, ``depends_on`` = its parents' job ids and the labels
``kairos/dag-id``, ``kairos/kind: stage``, ``kairos/gang: "false"``. Its ``placements`` are the
executor slots it holds per node (``tasks`` = slots) and its state follows its progress: pending
(no slot), running (slots held), finished (every task finished), cancelled or failed.

Executor slots: a dag cluster's slot is ``executor_capacity`` (cluster setting; default one unit
of ``cpu``, else of the first resource). A node holds ``floor(min over resources of capacity /
slot)`` slots and a held slot allocates one ``executor_capacity`` on its node, whatever the
task's smaller ``per_task``. Every change of slots takes the cluster lock, so node allocations,
stage placements and progress change together (invariants in :class:`DagStageRecord`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from app.db.orm import ClusterRecord, DagRecord, DagStageRecord, JobEventRecord, JobRecord
from app.db.repositories.dag_repository import DagRepository
from app.db.repositories.job_repository import JobRepository
from app.db.repositories.node_repository import NodeRepository
from app.domains import get_domain
from app.domains.dag.explain import stage_job_id
from app.domains.dag.types import DagClusterState, DagState
from app.domains.dag.types import DagSpec as DomainDagSpec
from app.domains.dag.types import StageSpec as DomainStageSpec
from app.kernel.clock import epoch_now
from app.kernel.errors import SnapshotError
from app.schemas.common import Page
from app.schemas.dag import (
    DagRead,
    DagSpec,
    DagStateName,
    StageRead,
    StageStateName,
)
from app.schemas.job import JobEventCreate, JobRead
from app.services.amounts import all_zero, zero_amount_error
from app.services.clusters import require_cluster
from app.services.context import Ctx
from app.services.convert import canonical_hash, clean, dag_settings, job_read, release
from app.services.errors import ConflictError, ErrorItem, UnprocessableError, not_found
from app.services.paging import cursor_arg

DAG_DOMAIN = "dag"
DAG_ID_LABEL = "kairos/dag-id"
KIND_LABEL = "kairos/kind"
GANG_LABEL = "kairos/gang"
#: the longest job id (``app.schemas.common.ID_PATTERN``)
MAX_JOB_ID = 128
_EPS = 1e-9

__all__ = [
    "cancel_dag",
    "executor_capacity",
    "free_slots_of",
    "get_dag",
    "list_dags",
    "node_slots",
    "record_stage_event",
    "require_dag_cluster",
    "slot_amounts",
    "stage_job_id",
    "submit_dag",
]


# -- executor slots --------------------------------------------------------------------------------


def executor_capacity(cluster: ClusterRecord) -> dict[str, float]:
    configured = dag_settings(cluster).executor_capacity
    if configured:
        return clean(configured)
    resources = list(cluster.resources)
    name = "cpu" if "cpu" in resources else resources[0]
    return {name: 1.0}


def node_slots(capacity: Mapping[str, float], slot: Mapping[str, float]) -> int:
    """Slots of ``slot`` that fit ``capacity`` (0 when a positive amount of the slot is
    missing)."""
    fits = math.inf
    for name, amount in slot.items():
        if amount > 0:
            fits = min(fits, float(capacity.get(name, 0.0)) / float(amount))
    if math.isinf(fits):
        return 0
    return max(0, math.floor(fits + _EPS))


def held_slots(allocated: Mapping[str, float], slot: Mapping[str, float]) -> int:
    """Slots an allocation holds (``allocated`` = slots x ``slot``, rounded up)."""
    held = 0.0
    for name, amount in slot.items():
        if amount > 0:
            held = max(held, float(allocated.get(name, 0.0)) / float(amount))
    return max(0, math.ceil(held - _EPS))


def free_slots_of(
    capacity: Mapping[str, float], allocated: Mapping[str, float], slot: Mapping[str, float]
) -> int:
    free = {k: float(v) - float(allocated.get(k, 0.0)) for k, v in capacity.items()}
    return node_slots(free, slot)


def slot_amounts(slot: Mapping[str, float], slots: int) -> dict[str, float]:
    return {k: float(v) * slots for k, v in slot.items()}


def take_slots(
    placements: Sequence[Mapping[str, Any]], count: int, node_id: str | None
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """``placements`` less ``count`` slots (those on ``node_id`` first, then the last placements
    first), and the slots freed per node. ``count`` is at most what ``placements`` hold."""
    nodes = [str(p["node_id"]) for p in placements]
    counts = [int(p["tasks"]) for p in placements]
    freed: dict[str, int] = {}
    order = [i for i, n in enumerate(nodes) if n == node_id]
    order += [i for i in reversed(range(len(nodes))) if i not in order]
    for i in order:
        if count <= 0:
            break
        n = min(count, counts[i])
        counts[i] -= n
        freed[nodes[i]] = freed.get(nodes[i], 0) + n
        count -= n
    return [{"node_id": n, "tasks": k} for n, k in zip(nodes, counts, strict=True) if k > 0], freed


def add_slots(
    placements: Sequence[Mapping[str, Any]] | None, added: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    nodes = [str(p["node_id"]) for p in placements or ()]
    counts = [int(p["tasks"]) for p in placements or ()]
    for p in added:
        node_id = str(p["node_id"])
        if node_id in nodes:
            counts[nodes.index(node_id)] += int(p["tasks"])
        else:
            nodes.append(node_id)
            counts.append(int(p["tasks"]))
    return [{"node_id": n, "tasks": k} for n, k in zip(nodes, counts, strict=True)]


async def free_node_slots(
    ctx: Ctx, cluster: ClusterRecord, freed: Mapping[str, int], slot: Mapping[str, float]
) -> None:
    """Release ``freed`` slots (per node id) from the nodes' allocations."""
    if not freed:
        return
    nodes = await NodeRepository(ctx.session).get_many(cluster.pk, sorted(freed))
    for node_id, n in freed.items():
        node = nodes.get(node_id)
        if node is not None and n > 0:
            node.allocated = release(node.allocated, slot_amounts(slot, n))


# -- submission ------------------------------------------------------------------------------------


def require_dag_cluster(cluster: ClusterRecord, what: str) -> None:
    if cluster.domain != DAG_DOMAIN:
        raise ConflictError(
            f"cluster {cluster.id!r} is a {cluster.domain} cluster: {what} exist on dag "
            'clusters only (create one with "domain": "dag")',
            code="not_a_dag_cluster",
        )


def _domain_spec(spec: DagSpec, submit_time: float) -> DomainDagSpec:
    return DomainDagSpec(
        id=spec.id,
        submit_time=submit_time,
        stages=tuple(
            DomainStageSpec(
                id=s.id,
                tasks=s.tasks,
                task_duration_s=s.task_duration_s,
                depends_on=tuple(s.depends_on),
                per_task=dict(s.per_task),
                max_parallelism=s.max_parallelism,
            )
            for s in spec.stages
        ),
    )


def _check_spec(cluster: ClusterRecord, spec: DagSpec) -> None:
    """422 naming the field: resources the cluster lacks, all-zero demands, job ids too long,
    and the domain's own checks (duplicate stage, unknown parent, cycle, a task larger than an
    executor slot)."""
    allowed = set(cluster.resources)
    problems: list[ErrorItem] = []
    for k, st in enumerate(spec.stages):
        where = f"body.stages[{k}]"
        for name in st.per_task:
            if name not in allowed:
                problems.append(
                    ErrorItem(
                        f"{where}.per_task.{name}",
                        f"cluster {cluster.id!r} has no resource {name!r}",
                        "unknown_resource",
                    )
                )
        if all_zero(st.per_task):
            problems.append(zero_amount_error(f"{where}.per_task"))
        if len(stage_job_id(spec.id, st.id)) > MAX_JOB_ID:
            problems.append(
                ErrorItem(
                    f"{where}.id",
                    f"the stage's job id {stage_job_id(spec.id, st.id)!r} is longer than "
                    f"{MAX_JOB_ID} characters",
                    "too_long",
                )
            )
    if problems:
        raise UnprocessableError("the DAG spec is invalid", details=problems)
    state = DagClusterState(
        now=0.0,
        executors=1,
        free_slots=0,
        dags=(DagState(_domain_spec(spec, 0.0)),),
        executor_capacity=executor_capacity(cluster),
    )
    try:
        get_domain(DAG_DOMAIN).validate(state)
    except SnapshotError as exc:
        field = exc.field.removeprefix("dags[0].spec")
        raise UnprocessableError(
            f"the DAG spec is invalid: {exc.message}",
            code="invalid_dag",
            details=[ErrorItem(f"body{field}", exc.message, "invalid_dag")],
        ) from None


def _stage_job_spec(dag: Mapping[str, Any], k: int) -> dict[str, Any]:
    st = dag["stages"][k]
    return {
        "id": stage_job_id(dag["id"], st["id"]),
        "tasks": st["tasks"],
        "per_task": st["per_task"],
        "walltime_s": st["task_duration_s"],
        "submit_time": dag["submit_time"],
        "priority": dag["priority"],
        "user": dag["user"],
        "queue": dag["queue"],
        "depends_on": [stage_job_id(dag["id"], p) for p in st["depends_on"]],
        "labels": {
            **dag["labels"],
            DAG_ID_LABEL: dag["id"],
            KIND_LABEL: "stage",
            GANG_LABEL: "false",
        },
    }


def _conflict(dag_id: str, sent: Mapping[str, Any], stored: Mapping[str, Any]) -> ConflictError:
    differs = [
        key
        for key, value in sent.items()
        if stored.get(key) != value and not (key == "submit_time" and value is None)
    ] or ["submit_time"]
    return ConflictError(
        f"DAG {dag_id!r} already exists with a different spec; these fields differ: "
        f"{', '.join(differs)}. Resubmit the same spec, or use a new id for another DAG",
        code="dag_conflict",
        details=[
            ErrorItem("body.id", "already exists with a different spec"),
            *(ErrorItem(f"body.{k}", "differs from the stored DAG", "differs") for k in differs),
        ],
    )


async def submit_dag(ctx: Ctx, cluster_id: str, spec: DagSpec) -> tuple[DagRead, bool]:
    """Submit a DAG with its stage jobs; ``True`` when created. The same id with the same spec
    again returns the stored DAG; another spec is 409. Takes the cluster lock, so concurrent
    submissions of one id create it once."""
    cluster = await require_cluster(ctx, cluster_id, lock=True)
    require_dag_cluster(cluster, "DAGs")
    sent = spec.model_dump(mode="json")
    digest = canonical_hash(sent)
    repo = DagRepository(ctx.session)
    found = await repo.get(cluster.pk, spec.id)
    if found is not None:
        if found.spec_hash != digest:
            raise _conflict(spec.id, sent, found.spec)
        return await _read_one(ctx, cluster, found), False
    _check_spec(cluster, spec)
    now = epoch_now()
    data = dict(sent)
    if data["submit_time"] is None:
        data["submit_time"] = now
    dag = await repo.add(
        DagRecord(
            cluster_pk=cluster.pk,
            id=spec.id,
            spec=data,
            spec_hash=digest,
            state="pending",
            submit_time=float(data["submit_time"]),
            released_slots=0,
        )
    )
    jobs = [
        JobRecord(
            cluster_pk=cluster.pk,
            id=(job_spec := _stage_job_spec(data, k))["id"],
            spec=job_spec,
            spec_hash=canonical_hash(job_spec),
            state="pending",
            submit_time=float(data["submit_time"]),
        )
        for k in range(len(spec.stages))
    ]
    existing = await JobRepository(ctx.session).get_many(cluster.pk, [j.id for j in jobs])
    if existing:
        taken = sorted(existing)
        raise ConflictError(
            f"job ids {taken} already exist in cluster {cluster.id!r}",
            code="job_conflict",
            details=[ErrorItem("body.id", f"the stage job ids {taken} are taken")],
        )
    await repo.add_all(jobs)
    await repo.add_all(
        [
            DagStageRecord(
                dag_pk=dag.pk,
                job_pk=job.pk,
                stage_id=st.id,
                position=k,
                launched=0,
                finished=0,
                running=0,
                reserved=0,
            )
            for k, (st, job) in enumerate(zip(spec.stages, jobs, strict=True))
        ]
    )
    return await _read_one(ctx, cluster, dag), True


# -- reading ---------------------------------------------------------------------------------------


def _stage_read(
    dag: DagRecord,
    stage: DagStageRecord,
    job: JobRecord,
    finished: set[str],
) -> StageRead:
    st = dag.spec["stages"][stage.position]
    tasks = int(st["tasks"])
    return StageRead(
        id=stage.stage_id,
        job_id=job.id,
        state=cast(StageStateName, job.state),
        runnable=job.state in ("pending", "running")
        and stage.launched < tasks
        and all(p in finished for p in st["depends_on"]),
        tasks=tasks,
        launched=stage.launched,
        finished=stage.finished,
        running_slots=stage.running,
        unlaunched=tasks - stage.launched,
        per_task=clean(st["per_task"]),
        task_duration_s=float(st["task_duration_s"]),
        depends_on=list(st["depends_on"]),
        max_parallelism=st.get("max_parallelism"),
        parallelism_limit=stage.parallelism_limit,
        reserved_slots=stage.reserved,
        placements=list(job.placements or []),
        start_time=job.start_time,
        end_time=job.end_time,
    )


def dag_read(
    cluster_id: str, dag: DagRecord, stages: Iterable[tuple[DagStageRecord, JobRecord]]
) -> DagRead:
    rows = list(stages)
    done = {s.stage_id for s, j in rows if j.state == "finished"}
    reads = [_stage_read(dag, s, j, done) for s, j in rows]
    spec = dag.spec
    return DagRead(
        id=dag.id,
        cluster_id=cluster_id,
        state=cast(DagStateName, dag.state),
        submit_time=dag.submit_time,
        start_time=dag.start_time,
        end_time=dag.end_time,
        jct_s=dag.end_time - dag.submit_time
        if dag.state == "finished" and dag.end_time is not None
        else None,
        priority=int(spec.get("priority", 0)),
        user=spec.get("user"),
        queue=spec.get("queue"),
        labels=dict(spec.get("labels", {})),
        tasks=sum(s.tasks for s in reads),
        finished_tasks=sum(s.finished for s in reads),
        running_slots=sum(s.running_slots for s in reads),
        stages=reads,
    )


async def _read_one(ctx: Ctx, cluster: ClusterRecord, dag: DagRecord) -> DagRead:
    stages = await DagRepository(ctx.session).stages_of([dag.pk])
    return dag_read(cluster.id, dag, stages.get(dag.pk, []))


async def get_dag(ctx: Ctx, cluster_id: str, dag_id: str) -> DagRead:
    cluster = await require_cluster(ctx, cluster_id)
    require_dag_cluster(cluster, "DAGs")
    dag = await DagRepository(ctx.session).get(cluster.pk, dag_id)
    if dag is None:
        raise not_found("DAG", dag_id)
    return await _read_one(ctx, cluster, dag)


async def list_dags(
    ctx: Ctx, cluster_id: str, *, state: str | None, limit: int, cursor: str | None
) -> Page[DagRead]:
    cluster = await require_cluster(ctx, cluster_id)
    require_dag_cluster(cluster, "DAGs")
    repo = DagRepository(ctx.session)
    page = await repo.page(cluster.pk, state=state, after_pk=cursor_arg(cursor), limit=limit)
    stages = await repo.stages_of([d.pk for d in page.items])
    return Page[DagRead](
        items=[dag_read(cluster.id, d, stages.get(d.pk, [])) for d in page.items],
        next_cursor=page.next_cursor,
    )


# -- state changes ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Loaded:
    cluster: ClusterRecord
    dag: DagRecord
    stages: list[tuple[DagStageRecord, JobRecord]]


async def _event(
    ctx: Ctx, job: JobRecord, type_: str, at: float, before: str, after: str | None = None
) -> None:
    await JobRepository(ctx.session).add_event(
        JobEventRecord(
            job_pk=job.pk,
            type=type_,
            at=at,
            from_state=before,
            to_state=after if after is not None else job.state,
        )
    )


async def _end_dag(
    ctx: Ctx, loaded: _Loaded, state: str, at: float, failed_job_pk: int | None = None
) -> None:
    """Free every slot of the DAG and end its unfinished stages (``cancelled``; the stage job
    ``failed_job_pk`` ``failed``) and the DAG (``state``)."""
    slot = executor_capacity(loaded.cluster)
    freed: dict[str, int] = {}
    for stage, job in loaded.stages:
        if job.state in ("finished", "cancelled", "failed"):
            continue
        for p in job.placements or ():
            freed[str(p["node_id"])] = freed.get(str(p["node_id"]), 0) + int(p["tasks"])
        before = job.state
        job.state = "failed" if job.pk == failed_job_pk else "cancelled"
        job.placements = None
        job.end_time = at
        stage.launched = stage.finished
        stage.running = 0
        stage.reserved = 0
        await _event(ctx, job, job.state if job.pk == failed_job_pk else "cancelled", at, before)
    await free_node_slots(ctx, loaded.cluster, freed, slot)
    loaded.dag.state = state
    loaded.dag.end_time = at
    loaded.dag.released_at = None
    loaded.dag.released_slots = 0


async def cancel_dag(ctx: Ctx, cluster_id: str, dag_id: str) -> None:
    """Cancel a pending or running DAG: its slots are freed, its unfinished stages cancelled.
    Already cancelled is fine (204); a finished or failed DAG is 409."""
    cluster = await require_cluster(ctx, cluster_id, lock=True)
    require_dag_cluster(cluster, "DAGs")
    repo = DagRepository(ctx.session)
    dag = await repo.get(cluster.pk, dag_id)
    if dag is None:
        raise not_found("DAG", dag_id)
    if dag.state == "cancelled":
        return
    if dag.state in ("finished", "failed"):
        raise ConflictError(
            f"DAG {dag_id!r} is {dag.state}; only pending or running DAGs can be cancelled",
            code="invalid_transition",
        )
    stages = (await repo.stages_of([dag.pk])).get(dag.pk, [])
    await _end_dag(ctx, _Loaded(cluster, dag, stages), "cancelled", epoch_now())


def _invalid(message: str, field: str) -> ConflictError:
    return ConflictError(
        message, code="invalid_transition", details=[ErrorItem(field, message, "not_allowed")]
    )


def _check_node(job: JobRecord, node_id: str | None) -> None:
    if node_id is not None and not any(p["node_id"] == node_id for p in job.placements or ()):
        raise UnprocessableError(
            f"stage job {job.id!r} holds no slot on node {node_id!r}",
            details=[ErrorItem("body.node_id", f"no slot of the stage on {node_id!r}")],
        )


async def _free(
    ctx: Ctx, loaded: _Loaded, job: JobRecord, count: int, node_id: str | None, at: float
) -> None:
    if count <= 0:
        return
    job.placements, freed = take_slots(job.placements or [], count, node_id)
    await free_node_slots(ctx, loaded.cluster, freed, executor_capacity(loaded.cluster))
    loaded.dag.released_at = at
    loaded.dag.released_slots = (loaded.dag.released_slots or 0) + count


async def _task_finished(
    ctx: Ctx, loaded: _Loaded, stage: DagStageRecord, job: JobRecord, event: JobEventCreate
) -> None:
    if job.state == "finished":
        return  # at-least-once delivery of the stage's last tasks
    count = event.count or 1
    if count > stage.running:
        raise _invalid(
            f"stage job {job.id!r} runs {stage.running} task(s); {count} cannot finish",
            "body.count",
        )
    _check_node(job, event.node_id)
    at = event.at if event.at is not None else epoch_now()
    tasks = int(job.spec["tasks"])
    before = job.state
    stage.finished += count
    continuing = min(count, tasks - stage.launched)
    stage.launched += continuing
    freed = count - continuing
    stage.running -= freed
    await _free(ctx, loaded, job, freed, event.node_id, at)
    if stage.finished >= tasks:
        job.state = "finished"
        job.end_time = at
        job.placements = None
    elif stage.running == 0:
        job.state = "pending"
    await _event(ctx, job, "task_finished", at, before)
    if all(j.state == "finished" for _, j in loaded.stages):
        loaded.dag.state = "finished"
        loaded.dag.end_time = at
        loaded.dag.released_at = None
        loaded.dag.released_slots = 0


async def _released(
    ctx: Ctx, loaded: _Loaded, stage: DagStageRecord, job: JobRecord, event: JobEventCreate
) -> None:
    if stage.running == 0:
        raise _invalid(f"stage job {job.id!r} holds no slot to release", "body.type")
    slots = event.slots or stage.running
    if slots > stage.running:
        raise _invalid(
            f"stage job {job.id!r} holds {stage.running} slot(s); {slots} cannot be released",
            "body.slots",
        )
    _check_node(job, event.node_id)
    at = event.at if event.at is not None else epoch_now()
    before = job.state
    stage.launched -= slots
    stage.running -= slots
    await _free(ctx, loaded, job, slots, event.node_id, at)
    if stage.running == 0:
        job.state = "pending"
    await _event(ctx, job, "released", at, before)


async def record_stage_event(
    ctx: Ctx, cluster: ClusterRecord, job: JobRecord, event: JobEventCreate
) -> JobRead:
    """An event on a stage job (the cluster is locked by the caller): ``task_finished`` (count),
    ``released`` (slots) or ``failed`` (the whole DAG fails, its slots are freed)."""
    repo = DagRepository(ctx.session)
    stage = await repo.stage_of_job(job.pk)
    dag = None if stage is None else await repo.get_by_pk(stage.dag_pk)
    if stage is None or dag is None:
        raise ConflictError(
            f"job {job.id!r} is no stage of a DAG; submit DAGs to dag clusters",
            code="not_a_stage",
        )
    if event.type in ("finished", "cancelled"):
        hint = "send task_finished events" if event.type == "finished" else "DELETE the DAG"
        raise _invalid(f"a DAG stage is not {event.type} as a job: {hint}", "body.type")
    loaded = _Loaded(cluster, dag, (await repo.stages_of([dag.pk])).get(dag.pk, []))
    # the stage's job object in the loaded rows is the same identity-mapped record
    if dag.state in ("cancelled", "failed") or (
        dag.state == "finished" and event.type != "task_finished"
    ):
        if event.type == "failed" and dag.state == "failed":
            return job_read(job, cluster.id)
        raise _invalid(f"DAG {dag.id!r} is {dag.state}", "body.type")
    if event.type == "task_finished":
        await _task_finished(ctx, loaded, stage, job, event)
    elif event.type == "released":
        await _released(ctx, loaded, stage, job, event)
    else:  # failed
        at = event.at if event.at is not None else epoch_now()
        if job.state == "finished":
            raise _invalid(f"stage job {job.id!r} already finished", "body.type")
        await _end_dag(ctx, loaded, "failed", at, failed_job_pk=job.pk)
    return job_read(job, cluster.id)
