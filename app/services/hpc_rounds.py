"""The HPC domain's rounds: ``POST /v1/clusters/{id}/schedule`` on an ``hpc`` cluster and
``POST /v1/decide`` with an HPC snapshot (registered in :mod:`app.services.rounds`).

A stateful round runs inside the transaction that :func:`app.services.scheduling.schedule_cluster`
opened with the cluster locked:

1. load the snapshot (nodes, running and pending jobs, finished dependencies),
2. ask :class:`~app.services.decision.DecisionService` for a decision (off the event loop),
3. store the decision and, unless ``dry_run``, apply it: jobs become ``running`` with their
   placements, start time and decision id; node ``allocated`` grows.

Every other writer of node allocations or job states takes the same lock, so two rounds on one
cluster never see the same pending job or the same free capacity.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.db.decision_input import pack as pack_input
from app.db.decision_writer import DecisionWriter
from app.db.orm import ClusterRecord, DecisionRecord
from app.db.repositories.job_repository import JobRepository, JobRow, JobStart, job_rows, start_jobs
from app.db.repositories.node_repository import NodeRow, node_rows, set_allocated
from app.domains.hpc.codec import state_to_json
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
from app.services.context import Ctx
from app.services.convert import (
    clean,
    decision_read,
    finite_json,
    job_from_spec,
    placements_of,
)
from app.services.decision import (
    DecisionService,
    DecisionSpec,
    InvalidSnapshotError,
    allocations_json,
)
from app.services.decisions import SNAPSHOT_CODEC, SNAPSHOT_CODEC_KEY
from app.services.dependencies import check_snapshot_dependencies
from app.services.errors import ErrorItem, UnprocessableError
from app.services.gpu_jobs import check_hpc_snapshot
from app.services.rounds import (
    new_decision_id,
    new_request_id,
    round_timings,
    snapshot_error,
    store_decision,
    store_stateless,
)
from app.settings import Settings

logger = logging.getLogger(__name__)


def snapshot_json(state: ClusterState, spec: DecisionSpec) -> dict[str, Any]:
    """The decision's stored input: the snapshot in the HPC codec's form
    (:func:`~app.domains.hpc.codec.state_to_json`) under ``state``, beside what it was decided
    with. :func:`app.services.decisions.replayable_input` gives it back in ``/v1/decide``
    request shape."""
    return {
        SNAPSHOT_CODEC_KEY: SNAPSHOT_CODEC,
        "state": state_to_json(state),
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
        input_blob=pack_input(snapshot_json(state, spec)),
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
        raise snapshot_error("cluster", f"{field_prefix}{exc.field}", exc.message) from None


# -- stateful: /v1/clusters/{id}/schedule ----------------------------------------------------------


def _running_use(running: Sequence[JobRow]) -> dict[str, dict[str, float]]:
    """Per node, what the running jobs' placements hold (``per_task`` x tasks)."""
    use: dict[str, dict[str, float]] = {}
    for job in running:
        per_task = job.spec["per_task"]
        for p in placements_of(job.placements):
            held = use.get(p.node_id)
            if held is None:
                held = use[p.node_id] = {}
            for name, v in per_task.items():
                held[name] = held.get(name, 0.0) + float(v) * p.tasks
    return use


def _drifted(allocated: Mapping[str, float], used: Mapping[str, float]) -> bool:
    return any(
        abs(float(allocated.get(k, 0.0)) - float(used.get(k, 0.0)))
        > FIT_EPS * max(1.0, abs(float(used.get(k, 0.0))))
        for k in {*allocated, *used}
    )


def _node(row: NodeRow, allocated: Mapping[str, float]) -> Node:
    """The node as a round sees it, holding ``allocated``: its capacity is at least that
    (nothing new fits on a node running more than its capacity, and the snapshot stays
    consistent until the running jobs end)."""
    capacity = {k: float(v) for k, v in row.capacity.items()}
    held = {k: float(v) for k, v in allocated.items()}
    for name, a in held.items():
        if a > capacity.get(name, 0.0):
            capacity[name] = a
    return Node(
        id=row.id,
        capacity=capacity,
        allocated=held,
        state=NodeState(row.state),
        labels=dict(row.labels),
    )


@dataclass(frozen=True, slots=True)
class _Loaded:
    state: ClusterState
    nodes: list[NodeRow]
    pending: dict[str, JobRow]
    #: the nodes whose stored ``allocated`` differs from what their running jobs hold, with it
    drift: dict[str, dict[str, float]]


async def _load_state(ctx: Ctx, cluster: ClusterRecord, now: float) -> _Loaded:
    """The round's snapshot, read as rows (no ORM objects). Node allocations are derived from
    the running jobs' placements, the source of truth that ``allocated`` caches: a stored
    allocation that drifted from them can neither wedge the cluster (an inconsistent snapshot)
    nor hide capacity in use."""
    nodes = await node_rows(ctx.session, cluster.pk)
    active = await job_rows(
        ctx.session, cluster.pk, [JobState.PENDING.value, JobState.RUNNING.value]
    )
    pending = [j for j in active if j.state == JobState.PENDING]
    running = [j for j in active if j.state == JobState.RUNNING]
    wanted = sorted({d for j in pending for d in j.spec.get("depends_on", ())})
    finished = await JobRepository(ctx.session).ids_in_state(
        cluster.pk, JobState.FINISHED.value, wanted
    )
    use = _running_use(running)
    drift = {n.id: use.get(n.id, {}) for n in nodes if _drifted(n.allocated, use.get(n.id, {}))}
    state = ClusterState(
        now=now,
        nodes=tuple(_node(n, drift.get(n.id, n.allocated)) for n in nodes),
        running=tuple(
            RunningJob(
                job=job_from_spec(j.spec),
                placements=placements_of(j.placements),
                start_time=float(j.start_time or 0.0),
            )
            for j in running
        ),
        pending=tuple(job_from_spec(j.spec) for j in pending),
        finished=frozenset(finished),
    )
    return _Loaded(state, nodes, {j.id: j for j in pending}, drift)


async def _apply(
    ctx: Ctx,
    cluster: ClusterRecord,
    loaded: _Loaded,
    allocations: Sequence[Mapping[str, Any]],
    decision_id: str,
    now: float,
) -> None:
    """Start the allocated jobs (``allocations`` as the decision record stores them:
    ``{"job_id", "placements": [{"node_id", "tasks"}]}``) and store the nodes' new allocations
    (the drifted nodes' ones repaired to what their running jobs hold), each in one bulk
    update."""
    held: dict[str, dict[str, float]] = {}
    for node_id, used in loaded.drift.items():
        logger.warning(
            "cluster %s node %s: running jobs hold %s, not the stored allocation; stored theirs",
            cluster.id,
            node_id,
            used,
        )
        held[node_id] = dict(used)
    by_id = {n.id: n for n in loaded.nodes}
    starts: list[JobStart] = []
    for alloc in allocations:
        job = loaded.pending[alloc["job_id"]]
        per_task = job.spec["per_task"]
        placements = alloc["placements"]
        starts.append(JobStart(job.pk, placements))
        for p in placements:
            node_id, tasks = p["node_id"], p["tasks"]
            node = held.get(node_id)
            if node is None:
                node = held[node_id] = clean(by_id[node_id].allocated)
            for name, v in per_task.items():
                node[name] = node.get(name, 0.0) + float(v) * tasks
    await start_jobs(ctx.session, starts, start_time=now, decision_id=decision_id)
    await set_allocated(ctx.session, {by_id[node_id].pk: a for node_id, a in held.items()})


def _deadline_ms(body_ms: float | None, settings: Settings, state: ClusterState) -> float:
    if body_ms is not None:
        return body_ms
    return settings.default_deadline_ms(len(state.nodes) + len(state.pending) + len(state.running))


async def schedule_round(
    ctx: Ctx,
    cluster: ClusterRecord,
    body: ScheduleRequest,
    *,
    decisions: DecisionService,
    settings: Settings,
    request_id: str | None,
) -> DecisionRead:
    """One round on the hpc ``cluster`` (locked by the caller, in the request's transaction)."""
    timings = round_timings.get()
    started = time.perf_counter()
    if body.policy is not None and not decisions.knows(body.policy, ctx.tenant):
        raise UnprocessableError(
            f"unknown policy {body.policy!r}",
            details=[ErrorItem("body.policy", "unknown policy", "unknown")],
        )
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
    loaded_at = time.perf_counter()
    outcome = await _decide(
        decisions,
        state,
        spec,
        request_id,
        _deadline_ms(body.deadline_ms, settings, state),
        field_prefix="cluster.",
    )
    decided_at = time.perf_counter()
    record = decision_record(
        tenant=ctx.tenant,
        cluster=cluster,
        state=state,
        spec=spec,
        outcome=outcome,
        request_id=request_id,
        dry_run=body.dry_run,
    )
    record.created_at = utc_now()
    await store_decision(ctx, record)
    if not body.dry_run and outcome.decision is not None:
        await _apply(ctx, cluster, loaded, record.allocations, record.id, now)
    answer = decision_read(record)
    if timings is not None:
        timings.load_s = loaded_at - started
        timings.decide_s = decided_at - loaded_at
        timings.persist_s = time.perf_counter() - decided_at
    return answer


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
    timings = round_timings.get()
    started = time.perf_counter()
    check_hpc_snapshot(body)
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
    loaded_at = time.perf_counter()
    outcome = await _decide(
        decisions,
        state,
        spec,
        request_id,
        _deadline_ms(body.deadline_ms, settings, state),
        field_prefix="body.",
    )
    decided_at = time.perf_counter()
    if timings is not None:
        timings.load_s = loaded_at - started
        timings.decide_s = decided_at - loaded_at
    record = decision_record(
        tenant=tenant,
        cluster=None,
        state=state,
        spec=spec,
        outcome=outcome,
        request_id=request_id,
        dry_run=True,
    )
    answer = await store_stateless(record, writer=writer, store=store)
    if timings is not None:
        timings.persist_s = time.perf_counter() - decided_at
    return answer
