"""Scheduling rounds: ``POST /v1/clusters/{id}/schedule`` (stateful) and ``POST /v1/decide``.

A stateful round is one transaction (opened and committed by the request boundary):

1. lock the cluster (Postgres: ``SELECT ... FOR NO KEY UPDATE`` on the cluster row; SQLite: the
   write transaction is ``BEGIN IMMEDIATE`` behind a per-process lock),
2. load the snapshot (nodes, running and pending jobs, finished dependencies),
3. ask :class:`~app.services.decision.DecisionService` for a decision (off the event loop),
4. store the decision and, unless ``dry_run``, apply it: jobs become ``running`` with their
   placements, start time and decision id; node ``allocated`` grows.

Every other writer of node allocations or job states takes the same lock, so two rounds on one
cluster never see the same pending job or the same free capacity.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import IntegrityError

from app.db.decision_writer import DecisionWriter, DuplicateRequestError
from app.db.engine import backend_unavailable
from app.db.orm import ClusterRecord, DecisionRecord, JobRecord, NodeRecord
from app.db.repositories.decision_repository import DecisionRepository
from app.db.repositories.job_repository import JobRepository
from app.db.repositories.node_repository import NodeRepository
from app.domains.hpc.types import (
    Backfill,
    ClusterState,
    Job,
    JobState,
    Node,
    NodeState,
    Placement,
    PlacementStrategy,
    RunningJob,
)
from app.kernel.clock import epoch_now, utc_now
from app.kernel.resources import FIT_EPS
from app.outcomes import DecisionOutcome
from app.schemas.decision import DecideRequest, DecisionRead, ScheduleRequest
from app.schemas.job import JobSpec
from app.services.amounts import check_snapshot_amounts
from app.services.clusters import require_cluster
from app.services.context import Ctx
from app.services.convert import (
    add,
    decision_read,
    finite_json,
    job_from_spec,
    node_from_record,
    placement_demand,
    placements_of,
    running_from_record,
)
from app.services.decision import (
    DecisionService,
    DecisionSpec,
    InvalidSnapshotError,
    allocations_json,
)
from app.services.dependencies import check_snapshot_dependencies
from app.services.errors import ConflictError, ErrorItem, UnprocessableError
from app.settings import Settings

logger = logging.getLogger(__name__)


def new_decision_id() -> str:
    return f"dec_{uuid.uuid4().hex}"


def new_request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


def snapshot_json(state: ClusterState, spec: DecisionSpec) -> dict[str, Any]:
    """The decision's input, in ``/v1/decide`` request shape (so it can be replayed).

    Resource amounts in a snapshot are floats already (validated bodies, cleaned records),
    so mappings are copied as they are.
    """

    def job_json(job: Job) -> dict[str, Any]:
        return {
            "id": job.id,
            "tasks": job.tasks,
            "per_task": dict(job.per_task),
            "walltime_s": job.walltime_s,
            "submit_time": job.submit_time,
            "priority": job.priority,
            "user": job.user,
            "queue": job.queue,
            "depends_on": list(job.depends_on),
            "labels": dict(job.labels),
        }

    return {
        "now": state.now,
        "nodes": [
            {
                "id": n.id,
                "capacity": dict(n.capacity),
                "allocated": dict(n.allocated),
                "state": n.state.value,
                "labels": dict(n.labels),
            }
            for n in state.nodes
        ],
        "running": [
            {
                "job": job_json(r.job),
                "placements": [{"node_id": p.node_id, "tasks": p.tasks} for p in r.placements],
                "start_time": r.start_time,
            }
            for r in state.running
        ],
        "pending": [job_json(j) for j in state.pending],
        "finished": sorted(state.finished),
        "policy": spec.policy,
        "fallback": spec.fallback,
        "backfill": spec.backfill.value,
        "placement": spec.placement.value,
        "explain": spec.explain,
    }


def decision_record(
    *,
    tenant: str,
    cluster: ClusterRecord | None,
    state: ClusterState,
    spec: DecisionSpec,
    outcome: DecisionOutcome,
    request_id: str,
    dry_run: bool,
) -> DecisionRecord:
    d = outcome.decision
    assert d is not None  # the service always answers with a decision
    return DecisionRecord(
        id=new_decision_id(),
        request_id=request_id,
        tenant=tenant,
        cluster_pk=None if cluster is None else cluster.pk,
        cluster_id=None if cluster is None else cluster.id,
        policy_name=outcome.policy.name,
        policy_version=outcome.policy.version,
        policy_kind=outcome.policy.kind,
        fallback_used=outcome.fallback_used,
        fallback_reason=outcome.fallback_reason,
        shadow_policy=None if outcome.shadow is None else outcome.shadow.policy,
        shadow_allocations=None
        if outcome.shadow is None
        else allocations_json(outcome.shadow.allocations),
        allocations=allocations_json(d.allocations),
        reservations=[
            {"job_id": r.job_id, "start_at": r.start_at}
            for r in d.reservations
            if math.isfinite(r.start_at)
        ],
        queue_length=d.queue_length,
        latency_ms=outcome.latency_ms,
        dry_run=dry_run,
        explain=finite_json(dict(d.explain)) if spec.explain else None,
        input_snapshot=snapshot_json(state, spec),
    )


async def _store(ctx: Ctx, record: DecisionRecord) -> None:
    try:
        async with ctx.session.begin_nested():
            await DecisionRepository(ctx.session).add(record)
    except IntegrityError:
        raise ConflictError(
            f"request {record.request_id!r} was already decided", code="duplicate_request"
        ) from None


def _snapshot_error(exc: InvalidSnapshotError, prefix: str) -> UnprocessableError:
    return UnprocessableError(
        f"the cluster snapshot is inconsistent: {exc.message}",
        code="invalid_snapshot",
        details=[ErrorItem(f"{prefix}{exc.field}", exc.message, "invalid_snapshot")],
    )


async def _decide(
    decisions: DecisionService,
    state: ClusterState,
    spec: DecisionSpec,
    request_id: str,
    deadline_ms: float,
    *,
    field_prefix: str,
) -> DecisionOutcome:
    """The one call into the decision seam shared by ``/schedule`` and ``/v1/decide``; an
    inconsistent snapshot becomes a 422 naming the field under ``field_prefix``."""
    try:
        return await decisions.decide(
            state, spec, request_id=request_id, deadline_s=deadline_ms / 1000.0
        )
    except InvalidSnapshotError as exc:
        raise _snapshot_error(exc, field_prefix) from None


# -- stateful: /v1/clusters/{id}/schedule ----------------------------------------------------------


def _running_use(running: Sequence[JobRecord]) -> dict[str, dict[str, float]]:
    """Per node, what the running jobs' placements hold (``per_task`` x tasks)."""
    use: dict[str, dict[str, float]] = {}
    for job in running:
        for p in placements_of(job.placements):
            use[p.node_id] = add(
                use.get(p.node_id, {}), placement_demand(job.spec["per_task"], p.tasks)
            )
    return use


def _drifted(allocated: Mapping[str, float], used: Mapping[str, float]) -> bool:
    return any(
        abs(float(allocated.get(k, 0.0)) - float(used.get(k, 0.0)))
        > FIT_EPS * max(1.0, abs(float(used.get(k, 0.0))))
        for k in {*allocated, *used}
    )


def _node_view(record: NodeRecord, used: Mapping[str, float]) -> Node:
    """The node as a round sees it: allocated is what its running jobs hold, and its capacity is
    at least that (nothing new fits on a node running more than its capacity)."""
    node = node_from_record(record)
    allocated = {k: float(v) for k, v in used.items()}
    capacity = {k: float(v) for k, v in record.capacity.items()}  # not lifted to the stale value
    for name, a in allocated.items():
        capacity[name] = max(capacity.get(name, 0.0), a)
    return dataclasses.replace(node, capacity=capacity, allocated=allocated)


@dataclass(frozen=True, slots=True)
class _Loaded:
    state: ClusterState
    nodes: list[NodeRecord]
    pending: dict[str, JobRecord]
    #: the nodes whose stored ``allocated`` differs from what their running jobs hold, with it
    drift: dict[str, dict[str, float]]


async def _load_state(ctx: Ctx, cluster: ClusterRecord, now: float) -> _Loaded:
    """The round's snapshot. Node allocations are derived from the running jobs' placements,
    the source of truth that ``allocated`` caches: a stored allocation that drifted from them
    can neither wedge the cluster (an inconsistent snapshot) nor hide capacity in use."""
    nodes = await NodeRepository(ctx.session).all(cluster.pk)
    jobs = JobRepository(ctx.session)
    active = await jobs.in_states(cluster.pk, [JobState.PENDING.value, JobState.RUNNING.value])
    pending = [j for j in active if j.state == JobState.PENDING]
    running = [j for j in active if j.state == JobState.RUNNING]
    wanted = sorted({d for j in pending for d in j.spec.get("depends_on", [])})
    finished = await jobs.ids_in_state(cluster.pk, JobState.FINISHED.value, wanted)
    use = _running_use(running)
    drift = {n.id: use.get(n.id, {}) for n in nodes if _drifted(n.allocated, use.get(n.id, {}))}
    state = ClusterState(
        now=now,
        nodes=tuple(
            _node_view(n, drift[n.id]) if n.id in drift else node_from_record(n) for n in nodes
        ),
        running=tuple(running_from_record(j) for j in running),
        pending=tuple(job_from_spec(j.spec) for j in pending),
        finished=frozenset(finished),
    )
    return _Loaded(state, nodes, {j.id: j for j in pending}, drift)


def _repair(cluster: ClusterRecord, nodes: Sequence[NodeRecord], drift: Mapping[str, Any]) -> None:
    """Store what the running jobs hold as the drifted nodes' allocations."""
    for node in nodes:
        if node.id in drift:
            logger.warning(
                "cluster %s node %s: allocated %s, running jobs hold %s; stored the latter",
                cluster.id,
                node.id,
                node.allocated,
                drift[node.id],
            )
            node.allocated = dict(drift[node.id])


def _apply(
    outcome: DecisionOutcome,
    record: DecisionRecord,
    now: float,
    nodes: Sequence[NodeRecord],
    pending: dict[str, JobRecord],
) -> None:
    by_id = {n.id: n for n in nodes}
    assert outcome.decision is not None  # the service always answers with a decision
    for alloc in outcome.decision.allocations:
        job = pending[alloc.job_id]
        job.state = JobState.RUNNING.value
        job.placements = [{"node_id": p.node_id, "tasks": p.tasks} for p in alloc.placements]
        job.start_time = now
        job.end_time = None
        job.decision_id = record.id
        for p in alloc.placements:
            node = by_id[p.node_id]
            node.allocated = add(node.allocated, placement_demand(job.spec["per_task"], p.tasks))


async def schedule_cluster(
    ctx: Ctx,
    cluster_id: str,
    body: ScheduleRequest,
    *,
    decisions: DecisionService,
    settings: Settings,
    request_id: str | None = None,
) -> DecisionRead:
    if body.policy is not None and not decisions.knows(body.policy, ctx.tenant):
        raise UnprocessableError(
            f"unknown policy {body.policy!r}",
            details=[ErrorItem("body.policy", "unknown policy", "unknown")],
        )
    cluster = await require_cluster(ctx, cluster_id, lock=True)
    now = body.now if body.now is not None else epoch_now()
    loaded = await _load_state(ctx, cluster, now)
    state = loaded.state
    spec = DecisionSpec(
        policy=body.policy or cluster.policy,
        fallback=cluster.fallback,
        backfill=Backfill(cluster.backfill),
        placement=PlacementStrategy(cluster.placement),
        explain=body.explain,
        shadow_policy=cluster.shadow_policy,
        tenant=ctx.tenant,
    )
    request_id = request_id or new_request_id()
    outcome = await _decide(
        decisions,
        state,
        spec,
        request_id,
        body.deadline_ms or settings.DEFAULT_DEADLINE_MS,
        field_prefix="cluster.",
    )
    record = decision_record(
        tenant=ctx.tenant,
        cluster=cluster,
        state=state,
        spec=spec,
        outcome=outcome,
        request_id=request_id,
        dry_run=body.dry_run,
    )
    await _store(ctx, record)
    if not body.dry_run:
        _repair(cluster, loaded.nodes, loaded.drift)
        _apply(outcome, record, now, loaded.nodes, loaded.pending)
        await ctx.session.flush()
    return decision_read(record)


# -- stateless: /v1/decide -------------------------------------------------------------------------


def state_from_request(body: DecideRequest) -> ClusterState:
    """The snapshot of a validated body. Its numbers are already ``float``/``int`` and nothing
    mutates a snapshot, so the body's mappings are used as they are (no per-item copies)."""
    now = body.now
    return ClusterState(
        now=now,
        nodes=tuple(
            Node(
                id=n.id,
                capacity=n.capacity,
                allocated=n.allocated,
                state=NodeState(n.state),
                labels=n.labels,
            )
            for n in body.nodes
        ),
        running=tuple(
            RunningJob(
                job=_job(r.job, r.start_time),
                placements=tuple(Placement(p.node_id, p.tasks) for p in r.placements),
                start_time=r.start_time,
            )
            for r in body.running
        ),
        pending=tuple(_job(j, now) for j in body.pending),
        finished=frozenset(body.finished),
    )


def _job(spec: JobSpec, default_submit: float) -> Job:
    """``job_from_spec`` straight from the validated model (no ``model_dump`` per job)."""
    return Job(
        id=spec.id,
        per_task=spec.per_task,
        walltime_s=spec.walltime_s,
        submit_time=default_submit if spec.submit_time is None else spec.submit_time,
        tasks=spec.tasks,
        priority=spec.priority,
        user=spec.user,
        queue=spec.queue,
        depends_on=tuple(spec.depends_on),
        labels=spec.labels,
    )


async def decide_snapshot(
    tenant: str,
    body: DecideRequest,
    *,
    decisions: DecisionService,
    writer: DecisionWriter,
    settings: Settings,
    request_id: str | None = None,
    store: bool = True,
) -> DecisionRead:
    """Decide a snapshot and store the decision (group commit, ADR 0026).

    No transaction is open while the decision is computed: the record is handed to the
    :class:`DecisionWriter`, which returns once it is committed. When the database cannot be
    reached, or ``store`` is false (the request's ``Idempotency-Key`` could not be claimed),
    the decision is answered with ``stored: false``: it is not known to be in the log, and a
    retry can never make it two stored decisions for one key (ADR 0087).
    """
    problems = []
    for field, name in (("policy", body.policy), ("fallback", body.fallback)):
        if name is not None and not decisions.knows(name, tenant):
            problems.append(ErrorItem(f"body.{field}", f"unknown policy {name!r}", "unknown"))
    if body.fallback is not None and not decisions.is_heuristic(body.fallback):
        problems.append(ErrorItem("body.fallback", "the fallback must be a heuristic", "unknown"))
    if problems:
        raise UnprocessableError("the decide request is invalid", details=problems)
    check_snapshot_amounts(body)
    check_snapshot_dependencies(body.pending)
    state = state_from_request(body)
    backfill = body.backfill or settings.DEFAULT_BACKFILL
    spec = DecisionSpec(
        policy=body.policy or settings.default_policy_for(backfill),
        fallback=body.fallback or settings.DEFAULT_FALLBACK,
        backfill=Backfill(backfill),
        placement=PlacementStrategy(body.placement or settings.DEFAULT_PLACEMENT),
        explain=body.explain,
        tenant=tenant,
    )
    request_id = request_id or new_request_id()
    outcome = await _decide(
        decisions,
        state,
        spec,
        request_id,
        body.deadline_ms or settings.DEFAULT_DEADLINE_MS,
        field_prefix="body.",
    )
    record = decision_record(
        tenant=tenant,
        cluster=None,
        state=state,
        spec=spec,
        outcome=outcome,
        request_id=request_id,
        dry_run=True,
    )
    if not store:
        record.created_at = utc_now()
        return decision_read(record).model_copy(update={"stored": False})
    try:
        await writer.add(record)
    except DuplicateRequestError:
        raise ConflictError(
            f"request {record.request_id!r} was already decided", code="duplicate_request"
        ) from None
    except Exception as exc:
        if not backend_unavailable(exc):
            raise
        logger.warning("decision %s answered unstored: database unavailable: %r", record.id, exc)
        return decision_read(record).model_copy(update={"stored": False})
    return decision_read(record)
