"""Use-cases for jobs: submission (idempotent by id), listing, events, cancellation.

State changes of existing jobs take the cluster lock, like schedule rounds: a job cannot be
cancelled while a round is allocating it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy.exc import IntegrityError

from app.db.orm import ClusterRecord, JobEventRecord, JobRecord
from app.db.repositories.job_repository import JobRepository
from app.db.repositories.node_repository import NodeRepository
from app.domains.hpc.types import JobState
from app.kernel.clock import epoch_now
from app.schemas.common import Page
from app.schemas.job import JobCreate, JobEventCreate, JobRead
from app.services.amounts import all_zero, zero_amount_error
from app.services.clusters import require_cluster
from app.services.context import Ctx
from app.services.convert import (
    job_read,
    placement_demand,
    placements_of,
    release,
    spec_hash,
    stored_spec,
)
from app.services.dags import DAG_DOMAIN, record_stage_event
from app.services.dependencies import cycle_error, find_cycle, unknown_dependencies
from app.services.errors import ConflictError, ErrorItem, UnprocessableError, not_found
from app.services.fit import FitLimits
from app.services.gpu_jobs import GPU_DOMAIN, with_service
from app.services.gpu_jobs import check_specs as check_domain_specs
from app.services.paging import cursor_arg

#: event type -> states it may be applied to -> resulting state
TRANSITIONS: dict[str, tuple[frozenset[JobState], JobState]] = {
    "finished": (frozenset({JobState.RUNNING}), JobState.FINISHED),
    "failed": (frozenset({JobState.RUNNING, JobState.PENDING}), JobState.FAILED),
    "released": (frozenset({JobState.RUNNING}), JobState.PENDING),
    "cancelled": (frozenset({JobState.RUNNING, JobState.PENDING}), JobState.CANCELLED),
}


def _check_specs(cluster: ClusterRecord, specs: Sequence[JobCreate], prefix: str) -> None:
    """422 naming every field of ``specs`` the cluster cannot take: a resource it does not
    have, a demand of zero, a dependency on the job itself, and, on a cluster that is not gpu,
    a missing ``walltime_s`` (only gpu clusters decide jobs without a run-time estimate)."""
    allowed = set(cluster.resources)
    estimate_required = cluster.domain != GPU_DOMAIN
    problems: list[ErrorItem] = []
    for i, spec in enumerate(specs):
        where = prefix.format(i=i)
        if estimate_required and spec.walltime_s is None:
            problems.append(
                ErrorItem(
                    f"{where}.walltime_s",
                    f"required on {cluster.domain} clusters (only gpu clusters take jobs "
                    "without a run-time estimate)",
                    "missing",
                )
            )
        for name in spec.per_task:
            if name not in allowed:
                problems.append(
                    ErrorItem(
                        f"{where}.per_task.{name}",
                        f"cluster {cluster.id!r} has no resource {name!r}",
                        "unknown_resource",
                    )
                )
        if all_zero(spec.per_task):
            problems.append(zero_amount_error(f"{where}.per_task"))
        if spec.id in spec.depends_on:
            problems.append(ErrorItem(f"{where}.depends_on", "a job cannot depend on itself"))
        if len(problems) >= 100:
            break
    if problems:
        raise UnprocessableError("the job spec is invalid", details=problems)


def _differences(
    sent: Mapping[str, Any], other: Mapping[str, Any], where: str, whose: str
) -> list[ErrorItem]:
    """One item per top-level field whose value in ``sent`` differs from ``other``'s. A
    ``submit_time`` left out of ``sent`` is compared by the hash only (the stored spec holds the
    time it was filled with), so it is named when nothing else differs."""
    items = [
        ErrorItem(f"{where}.{key}", f"differs from {whose}: {other.get(key)!r}", "differs")
        for key, value in sent.items()
        if other.get(key) != value and not (key == "submit_time" and value is None)
    ]
    return items or [
        ErrorItem(f"{where}.submit_time", f"differs from {whose}: left out here", "differs")
    ]


def _conflict(job_id: str, problem: str, where: str, differences: list[ErrorItem]) -> ConflictError:
    """409 ``job_conflict``: the first detail is on the id, one more per differing field."""
    names = ", ".join(d.field.rsplit(".", 1)[-1] for d in differences if d.field is not None)
    return ConflictError(
        f"job {job_id!r} {problem}; these fields differ: {names}. Resubmit the same spec, "
        "or use a new id for another job",
        code="job_conflict",
        details=[ErrorItem(f"{where}.id", f"{problem} (fields differ: {names})"), *differences],
    )


def _check_same_specs(
    found: Mapping[str, JobRecord],
    first: Mapping[str, int],
    hashes: Sequence[str],
    specs: Sequence[JobCreate],
    prefix: str,
) -> None:
    """409 unless every stored job of ``found`` has the spec its id is submitted with; the
    details name each field that differs."""
    for job_id, i in first.items():
        old = found.get(job_id)
        if old is not None and old.spec_hash != hashes[i]:
            sent = specs[i].model_dump(mode="json")
            differences = _differences(sent, old.spec, prefix.format(i=i), "the stored job")
            raise _conflict(
                job_id, "already exists with a different spec", prefix.format(i=i), differences
            )


async def _check_dependencies(
    repo: JobRepository,
    cluster: ClusterRecord,
    specs: Sequence[JobCreate],
    first: Mapping[str, int],
    existing: Mapping[str, JobRecord],
    prefix: str,
) -> None:
    """422 ``unknown_dependency`` for a new job's dependency that is neither stored in the
    cluster nor in this request, and ``dependency_cycle`` for a cycle among the request's jobs
    (see :mod:`app.services.dependencies` for why that keeps the cluster's graph acyclic).
    Jobs already stored with the same spec are resubmissions: their dependencies are not
    checked again."""
    graph = {job_id: specs[i].depends_on for job_id, i in first.items() if specs[i].depends_on}
    if not graph:
        return
    field_of = {job_id: prefix.format(i=i) for job_id, i in first.items()}
    new = {job_id: deps for job_id, deps in graph.items() if job_id not in existing}
    outside = sorted({d for deps in new.values() for d in deps if d not in first})
    known = set(first) | set(await repo.get_many(cluster.pk, outside) if outside else ())
    problems = unknown_dependencies(new, known, field_of)
    if problems:
        raise UnprocessableError(
            f"a dependency names no job of cluster {cluster.id!r}",
            code="unknown_dependency",
            details=problems,
        )
    cycle = find_cycle(graph)
    if cycle is not None:
        raise UnprocessableError(
            "the jobs' dependencies form a cycle",
            code="dependency_cycle",
            details=[cycle_error(cycle, field_of)],
        )


async def submit_jobs(
    ctx: Ctx, cluster_id: str, specs: Sequence[JobCreate], *, prefix: str = "body.jobs[{i}]"
) -> tuple[list[JobRead], bool]:
    """Submit all of ``specs`` or none; ``True`` when at least one job was created.

    A job id already present with the same spec is returned as it is (idempotent resubmission);
    with another spec the whole call is a 409.
    """
    cluster = await require_cluster(ctx, cluster_id)
    if cluster.domain == DAG_DOMAIN:
        raise ConflictError(
            f"cluster {cluster.id!r} is a dag cluster: submit DAGs of stages with POST "
            f"/v1/clusters/{cluster.id}/dags (each stage is then a job)",
            code="dag_cluster",
        )
    _check_specs(cluster, specs, prefix)
    await check_domain_specs(ctx, cluster, specs, prefix)
    hashes = [spec_hash(s) for s in specs]
    first: dict[str, int] = {}
    for i, spec in enumerate(specs):
        j = first.setdefault(spec.id, i)
        if j != i and hashes[j] != hashes[i]:
            sent = spec.model_dump(mode="json")
            earlier = specs[j].model_dump(mode="json")
            whose = f"the same id at {prefix.format(i=j)}"
            differences = _differences(sent, earlier, prefix.format(i=i), whose)
            raise _conflict(
                spec.id, "appears twice with different specs", prefix.format(i=i), differences
            )
    repo = JobRepository(ctx.session)
    existing = await repo.get_many(cluster.pk, list(first))
    _check_same_specs(existing, first, hashes, specs, prefix)
    await _check_dependencies(repo, cluster, specs, first, existing, prefix)
    now = epoch_now()
    rows: list[dict[str, Any]] = []
    for job_id, i in first.items():
        if job_id in existing:
            continue
        data = stored_spec(specs[i], now)
        rows.append(
            {
                "cluster_pk": cluster.pk,
                "id": job_id,
                "spec": data,
                "spec_hash": hashes[i],
                "state": JobState.PENDING.value,
                "submit_time": float(data["submit_time"]),
            }
        )
    try:
        async with ctx.session.begin_nested():
            created = await repo.create_missing(rows)
    except IntegrityError:  # the cluster went away meanwhile (its jobs' foreign key)
        raise ConflictError(
            f"cluster {cluster.id!r} changed while these jobs were submitted; retry",
            code="concurrent_submission",
        ) from None
    stored = await repo.get_many(cluster.pk, [r["id"] for r in rows])
    # the ids another request created between our read and our insert: the same rule applies
    _check_same_specs(
        {k: v for k, v in stored.items() if k not in created}, first, hashes, specs, prefix
    )
    by_id = {**existing, **stored}
    if len(by_id) < len(first):  # a cluster deleted meanwhile takes its jobs with it
        raise ConflictError(
            f"cluster {cluster.id!r} changed while these jobs were submitted; retry",
            code="concurrent_submission",
        )
    limits = await _limits(ctx, cluster, by_id.values())
    records = [by_id[s.id] for s in specs]
    reads = [_read(r, cluster.id, limits) for r in records]
    return await with_service(ctx, cluster, records, reads), bool(created)


async def submit_job(ctx: Ctx, cluster_id: str, spec: JobCreate) -> tuple[JobRead, bool]:
    jobs, created = await submit_jobs(ctx, cluster_id, [spec], prefix="body")
    return jobs[0], created


async def get_job(ctx: Ctx, cluster_id: str, job_id: str) -> JobRead:
    cluster = await require_cluster(ctx, cluster_id)
    record = await JobRepository(ctx.session).get(cluster.pk, job_id)
    if record is None:
        raise not_found("job", job_id)
    read = _read(record, cluster.id, await _limits(ctx, cluster, [record]))
    return (await with_service(ctx, cluster, [record], [read]))[0]


async def list_jobs(
    ctx: Ctx, cluster_id: str, *, state: str | None, limit: int, cursor: str | None
) -> Page[JobRead]:
    cluster = await require_cluster(ctx, cluster_id)
    page = await JobRepository(ctx.session).page(
        cluster.pk, state=state, after_pk=cursor_arg(cursor), limit=limit
    )
    limits = await _limits(ctx, cluster, page.items)
    reads = [_read(j, cluster.id, limits) for j in page.items]
    items = await with_service(ctx, cluster, page.items, reads)
    return Page[JobRead](items=items, next_cursor=page.next_cursor)


async def _limits(ctx: Ctx, cluster: ClusterRecord, jobs: Iterable[JobRecord]) -> FitLimits | None:
    """The cluster's fit limits when one of ``jobs`` is pending (only pending jobs are warned
    about); one query over the nodes per request."""
    if not any(j.state == JobState.PENDING for j in jobs):
        return None
    return FitLimits.of(await NodeRepository(ctx.session).capacities(cluster.pk))


def _read(record: JobRecord, cluster_id: str, limits: FitLimits | None) -> JobRead:
    if limits is None or record.state != JobState.PENDING:
        return job_read(record, cluster_id)
    spec = record.spec
    warnings = limits.warnings(spec["per_task"], int(spec.get("tasks", 1)))
    return job_read(record, cluster_id, warnings)


async def _release_nodes(ctx: Ctx, cluster: ClusterRecord, job: JobRecord) -> None:
    placements = placements_of(job.placements)
    nodes = await NodeRepository(ctx.session).get_many(cluster.pk, [p.node_id for p in placements])
    per_task = job.spec["per_task"]
    for p in placements:
        node = nodes.get(p.node_id)
        if node is not None:
            node.allocated = release(node.allocated, placement_demand(per_task, p.tasks))


def _check_job_event(event: JobEventCreate) -> None:
    """``task_finished`` and the fields ``count``, ``slots``, ``node_id`` are for DAG stages."""
    problems = [
        ErrorItem(f"body.{name}", "only for stages of a DAG on a dag cluster", "not_allowed")
        for name in ("count", "slots", "node_id")
        if getattr(event, name) is not None
    ]
    if event.type == "task_finished":
        problems.insert(
            0, ErrorItem("body.type", "only for stages of a DAG on a dag cluster", "not_allowed")
        )
    if problems:
        raise UnprocessableError("the event is for DAG stages only", details=problems)


async def record_event(ctx: Ctx, cluster_id: str, job_id: str, event: JobEventCreate) -> JobRead:
    """Apply an orchestrator event. Repeating the event that put the job in its current
    terminal state is a no-op (at-least-once delivery); any other disallowed transition is 409."""
    cluster = await require_cluster(ctx, cluster_id, lock=True)
    repo = JobRepository(ctx.session)
    job = await repo.get(cluster.pk, job_id)
    if job is None:
        raise not_found("job", job_id)
    if cluster.domain == DAG_DOMAIN:
        return await record_stage_event(ctx, cluster, job, event)
    _check_job_event(event)
    allowed, target = TRANSITIONS[event.type]
    current = JobState(job.state)
    if current == target and target != JobState.PENDING:
        return job_read(job, cluster.id)
    if current not in allowed:
        raise ConflictError(
            f"a {current.value} job cannot be {event.type}",
            code="invalid_transition",
            details=[ErrorItem("body.type", f"not allowed from {current.value}")],
        )
    at = event.at if event.at is not None else epoch_now()
    if current == JobState.RUNNING:
        await _release_nodes(ctx, cluster, job)
    job.state = target.value
    if target == JobState.PENDING:
        job.placements = None
        job.start_time = None
        job.decision_id = None
    else:
        job.end_time = at
    await repo.add_event(
        JobEventRecord(
            job_pk=job.pk, type=event.type, at=at, from_state=current.value, to_state=target.value
        )
    )
    return job_read(job, cluster.id)


async def cancel_job(ctx: Ctx, cluster_id: str, job_id: str) -> None:
    """Cancel a pending job (204); already cancelled is fine; anything else is 409."""
    cluster = await require_cluster(ctx, cluster_id, lock=True)
    repo = JobRepository(ctx.session)
    job = await repo.get(cluster.pk, job_id)
    if job is None:
        raise not_found("job", job_id)
    if cluster.domain == DAG_DOMAIN:
        raise ConflictError(
            f"job {job_id!r} is a stage of a DAG: cancel the DAG with DELETE "
            f"/v1/clusters/{cluster.id}/dags/{{dag_id}}",
            code="invalid_transition",
        )
    if job.state == JobState.CANCELLED:
        return
    if job.state != JobState.PENDING:
        raise ConflictError(
            f"only pending jobs can be cancelled with DELETE; this one is {job.state}",
            code="invalid_transition",
        )
    at = epoch_now()
    job.state = JobState.CANCELLED.value
    job.end_time = at
    await repo.add_event(
        JobEventRecord(
            job_pk=job.pk, type="cancelled", at=at, from_state="pending", to_state="cancelled"
        )
    )
