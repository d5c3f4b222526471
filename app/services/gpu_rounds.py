"""GPU-domain rounds: ``POST /v1/clusters/{id}/schedule`` on a ``gpu`` cluster and
``POST /v1/decide`` with a GPU snapshot, both deciding through :mod:`app.domains.gpu`.

A stateful round runs inside the request's transaction, the cluster row locked by the caller
(:func:`app.services.scheduling.schedule_cluster`):

1. load the nodes (GPUs = ``capacity["gpu"]``) and the pending and running jobs with their
   attained service, advanced to ``now`` for the running ones (a running job accrues its GPUs x
   the seconds since its counters were last advanced; its restart delay runs down meanwhile);
2. decide with the cluster's policy off the event loop, through the decision pipeline and the
   fallback chain every domain shares (:mod:`app.policy.deciders`; in this process or on a
   ``kairos worker``): a policy that is missing, is refused, fails, misses the
   deadline or breaks an invariant (:func:`~app.domains.gpu.validation.validate_decision`)
   gives way to the cluster's fallback heuristic, and the decision says why
   (:class:`~app.outcomes.FallbackReason`); a fallback decision that breaks an invariant is
   replaced by the empty one (every running job kept, nothing started);
3. store the decision with its input (the GPU codec's snapshot in ``/v1/decide`` shape) and,
   unless ``dry_run``, apply it in the same transaction: preempted jobs return to pending
   keeping their service (``preemptions`` + 1), allocated jobs start (``starts`` + 1), resized
   jobs get their new placements; every started or resized job is charged the cluster's
   restart cost; node allocations are recomputed from the running jobs' placements.

A job's counters change only here, from Kairos's own decisions; the caller never sends them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import anyio

from app.db.decision_input import pack as pack_input
from app.db.decision_writer import DecisionWriter
from app.db.orm import ClusterRecord, DecisionRecord
from app.db.repositories.gpu_service_repository import (
    ServiceRow,
    preempt_jobs,
    resize_jobs,
    save_service,
    service_rows,
)
from app.db.repositories.job_repository import JobRow, JobStart, job_rows, start_jobs
from app.db.repositories.node_repository import NodeRow, node_rows, set_allocated
from app.domains.gpu import codec
from app.domains.gpu.heuristics import (
    DEFAULT_FALLBACK,
    GpuConfig,
    Placement,
    heuristic_names,
)
from app.domains.gpu.types import (
    GPU,
    Allocation,
    ClusterSnapshot,
    GpuDecision,
    GpuJob,
    Node,
    NodeState,
    PolicyRef,
)
from app.domains.gpu.types import Placement as GpuPlacement
from app.domains.gpu.validation import (
    validate_snapshot,
)
from app.kernel.clock import epoch_now, utc_now
from app.kernel.errors import SnapshotError
from app.outcomes import DecisionRequest, FallbackReason
from app.schemas.decision import DecisionRead, ScheduleRequest
from app.schemas.gpu import APP_LABEL, GpuClusterSettings, GpuDecideRequest
from app.services.context import Ctx
from app.services.convert import clean, decision_read, estimate_of, finite_json, gpu_settings
from app.services.decision import DecisionService, split_policy
from app.services.errors import UnprocessableError
from app.services.policy_names import check_fallback_name, check_policy_name, default_policy
from app.services.rounds import (
    new_decision_id,
    new_request_id,
    round_timings,
    snapshot_error,
    store_decision,
    store_stateless,
)
from app.settings import Settings

__all__ = [
    "GPU_CODEC",
    "decide_snapshot",
    "job_size",
    "schedule_round",
    "settings_of",
]

logger = logging.getLogger(__name__)

#: ``input.domain`` of a stored GPU decision (its input is a ``/v1/decide`` GPU body)
GPU_CODEC = "gpu"
DEFAULT_TENANT = "default"


def settings_of(cluster: ClusterRecord) -> GpuClusterSettings:
    """The cluster's GPU settings (``domain_config["gpu"]``; the defaults when none are set)."""
    return gpu_settings(cluster)


def _config(s: GpuClusterSettings) -> GpuConfig:
    return GpuConfig(
        placement=Placement(s.placement),
        las_thresholds=tuple(sorted(float(t) for t in s.las_thresholds_gpu_s)),
    )


def job_size(spec: Mapping[str, Any]) -> tuple[int, int]:
    """``(min_gpus, max_gpus)`` of a stored JobSpec on a gpu cluster: ``min_tasks`` (default
    ``tasks``) .. ``max_tasks`` (default ``max(tasks, min)``); rigid when they are equal."""
    tasks = int(spec.get("tasks", 1))
    low = int(spec.get("min_tasks") or tasks)
    high = int(spec.get("max_tasks") or max(tasks, low))
    return low, high


# -- the fallback chain --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Outcome:
    decision: GpuDecision
    fallback_used: bool
    reason: FallbackReason | None
    detail: str | None
    latency_ms: float


async def _decide(
    state: ClusterSnapshot,
    *,
    policy: str,
    fallback: str,
    config: GpuConfig,
    decisions: DecisionService,
    tenant: str,
    deadline_ms: float,
    field_prefix: str,
    request_id: str,
) -> _Outcome:
    """``policy`` with ``fallback`` behind it, through the decision pipeline (in this process or
    on a ``kairos worker``: :mod:`app.policy.deciders`). The snapshot is validated here first
    (an inconsistent one is a 422 naming the field under ``field_prefix``); the chain checks
    every decision against it."""
    started = time.perf_counter()
    try:
        await anyio.to_thread.run_sync(validate_snapshot, state)
    except SnapshotError as exc:
        raise snapshot_error("GPU", f"{field_prefix}{exc.field}", exc.message) from None
    base = split_policy(policy)[0]
    heuristic = base in heuristic_names()
    request = DecisionRequest(
        request_id=request_id,
        state=state,
        config=config,
        policy=base if heuristic else decisions.resolve_spec(policy, tenant),
        fallback=split_policy(fallback)[0],
        # a heuristic answers in time linear in the jobs: only a model has a deadline
        deadline=None if heuristic else time.time() + deadline_ms / 1000,
        domain=GPU_CODEC,
    )
    outcome = await decisions.decide_request(request)
    assert outcome.decision is not None
    return _Outcome(
        outcome.decision,
        outcome.fallback_used,
        outcome.fallback_reason,
        outcome.fallback_detail,
        _ms(started),
    )


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


# -- decision records ----------------------------------------------------------------------------


def _alloc_json(allocs: Sequence[Allocation]) -> list[dict[str, Any]]:
    return [
        {
            "job_id": a.job_id,
            "placements": [{"node_id": p.node_id, "tasks": p.tasks} for p in a.placements],
        }
        for a in allocs
    ]


def stored_input(
    state: ClusterSnapshot,
    *,
    policy: str,
    fallback: str,
    settings: GpuClusterSettings,
    explain: bool,
) -> dict[str, Any]:
    """The decision's input as a ``POST /v1/decide`` GPU body (replays as it is)."""
    return {
        "domain": GPU_CODEC,
        **codec.state_to_json(state),
        "policy": policy,
        "fallback": fallback,
        "gpu": settings.model_dump(mode="json"),
        "explain": explain,
    }


def _explain(state: ClusterSnapshot, outcome: _Outcome) -> dict[str, Any]:
    d = outcome.decision
    explained: dict[str, Any] = finite_json(
        {
            "domain": GPU_CODEC,
            "policy": d.policy.name,
            "fallback_detail": outcome.detail,
            "jobs": {j.id: d.reasons.get(j.id, "") for j in state.jobs},
        }
    )
    return explained


def _queue_length(state: ClusterSnapshot, d: GpuDecision) -> int:
    started = {a.job_id for a in d.allocations}
    pending = sum(1 for j in state.jobs if not j.running and j.id not in started)
    return pending + len(d.preemptions)


def _record(
    *,
    tenant: str,
    cluster: ClusterRecord | None,
    state: ClusterSnapshot,
    outcome: _Outcome,
    request_id: str,
    dry_run: bool,
    explain: bool,
    input_body: Mapping[str, Any],
) -> DecisionRecord:
    d = outcome.decision
    ref: PolicyRef = d.policy
    return DecisionRecord(
        id=new_decision_id(),
        request_id=request_id,
        tenant=tenant,
        cluster_pk=None if cluster is None else cluster.pk,
        cluster_id=None if cluster is None else cluster.id,
        policy_name=ref.name,
        policy_version=ref.version,
        policy_kind=ref.kind,
        fallback_used=outcome.fallback_used,
        fallback_reason=None if outcome.reason is None else outcome.reason.value,
        shadow_policy=None,
        shadow_allocations=None,
        allocations=_alloc_json(d.allocations),
        reservations=[],
        queue_length=_queue_length(state, d),
        latency_ms=outcome.latency_ms,
        dry_run=dry_run,
        explain=_explain(state, outcome) if explain else None,
        input_blob=pack_input(input_body),
        preemptions=list(d.preemptions),
        resizes=_alloc_json(d.resizes),
        created_at=utc_now(),
    )


def _request_id(request_id: str | None) -> str:
    return request_id or new_request_id()


def _deadline(body_ms: float | None, settings: Settings, state: ClusterSnapshot) -> float:
    if body_ms is not None:
        return body_ms
    return settings.default_deadline_ms(len(state.nodes) + len(state.jobs))


# -- stateful: /v1/clusters/{id}/schedule on a gpu cluster ---------------------------------------


@dataclass(frozen=True, slots=True)
class _Loaded:
    state: ClusterSnapshot
    nodes: list[NodeRow]
    jobs: dict[str, JobRow]
    #: every active job's counters advanced to ``now`` (running) or as stored (pending)
    service: dict[str, ServiceRow]


def _advance(row: ServiceRow, gpus: int, now: float) -> ServiceRow:
    """``row`` advanced to ``now`` for a job holding ``gpus`` since ``row.accounted_at`` (time
    never runs backwards: an earlier ``now`` advances nothing)."""
    if row.accounted_at is None or gpus <= 0:
        return replace(row, accounted_at=max(now, row.accounted_at or now))
    dt = max(0.0, now - row.accounted_at)
    return replace(
        row,
        attained_gpu_s=row.attained_gpu_s + gpus * dt,
        executed_s=row.executed_s + dt,
        restart_left_s=max(0.0, row.restart_left_s - dt),
        accounted_at=max(now, row.accounted_at),
    )


def _job(row: JobRow, service: ServiceRow) -> GpuJob:
    spec = row.spec
    low, high = job_size(spec)
    labels = {str(k): str(v) for k, v in spec.get("labels", {}).items()}
    allocation = tuple(
        GpuPlacement(str(p["node_id"]), int(p["tasks"])) for p in (row.placements or ())
    )
    return GpuJob(
        id=row.id,
        arrival=float(spec["submit_time"]),
        min_gpus=low,
        max_gpus=high,
        tenant=str(spec.get("user") or DEFAULT_TENANT),
        app=labels.get(APP_LABEL),
        estimate_s=estimate_of(spec),
        allocation=allocation if row.state == "running" else (),
        attained_gpu_s=service.attained_gpu_s,
        executed_s=service.executed_s,
        starts=service.starts,
        preemptions=service.preemptions,
        restart_left_s=service.restart_left_s,
        labels=labels,
    )


async def _load(ctx: Ctx, cluster: ClusterRecord, now: float) -> _Loaded:
    nodes = await node_rows(ctx.session, cluster.pk)
    active = await job_rows(ctx.session, cluster.pk, ["pending", "running"])
    stored = await service_rows(ctx.session, [j.pk for j in active])
    held: dict[str, int] = {}
    service: dict[str, ServiceRow] = {}
    jobs: list[GpuJob] = []
    for row in active:
        base = stored.get(row.pk) or ServiceRow(
            row.pk, accounted_at=row.start_time if row.state == "running" else None
        )
        gpus = 0
        if row.state == "running":
            for p in row.placements or ():
                held[str(p["node_id"])] = held.get(str(p["node_id"]), 0) + int(p["tasks"])
                gpus += int(p["tasks"])
            base = _advance(base, gpus, now)
        service[row.id] = base
        jobs.append(_job(row, base))
    snapshot_nodes = []
    for n in nodes:
        # a node whose capacity was lowered below what runs there still holds its jobs
        capacity = max(float(n.capacity.get(GPU, 0.0)), float(held.get(n.id, 0)))
        snapshot_nodes.append(Node(id=n.id, capacity={GPU: capacity}, state=NodeState(n.state)))
    state = ClusterSnapshot(now=now, nodes=tuple(snapshot_nodes), jobs=tuple(jobs))
    return _Loaded(state, nodes, {j.id: j for j in active}, service)


async def _apply(
    ctx: Ctx,
    loaded: _Loaded,
    decision: GpuDecision,
    record: DecisionRecord,
    settings: GpuClusterSettings,
    now: float,
) -> None:
    """Apply ``decision`` (already validated) and store every active job's new counters."""
    service = dict(loaded.service)
    placements: dict[str, list[dict[str, Any]]] = {
        jid: list(row.placements or [])
        for jid, row in loaded.jobs.items()
        if row.state == "running"
    }
    for jid in decision.preemptions:
        s = service[jid]
        service[jid] = replace(s, preemptions=s.preemptions + 1, restart_left_s=0.0)
        placements.pop(jid, None)
    starts: list[JobStart] = []
    for a in decision.allocations:
        s = service[a.job_id]
        service[a.job_id] = replace(
            s, starts=s.starts + 1, restart_left_s=settings.restart_cost_s, accounted_at=now
        )
        placements[a.job_id] = _alloc_json([a])[0]["placements"]
        starts.append(JobStart(loaded.jobs[a.job_id].pk, placements[a.job_id]))
    resized: dict[int, list[dict[str, Any]]] = {}
    for a in decision.resizes:
        service[a.job_id] = replace(service[a.job_id], restart_left_s=settings.restart_cost_s)
        placements[a.job_id] = _alloc_json([a])[0]["placements"]
        resized[loaded.jobs[a.job_id].pk] = placements[a.job_id]
    await preempt_jobs(ctx.session, [loaded.jobs[j].pk for j in decision.preemptions], at=now)
    await start_jobs(ctx.session, starts, start_time=now, decision_id=record.id)
    await resize_jobs(ctx.session, resized, decision_id=record.id)
    await set_allocated(ctx.session, _node_allocations(loaded, placements))
    touched = {jid for jid, row in loaded.jobs.items() if row.state == "running"}
    touched.update(a.job_id for a in decision.allocations)
    await save_service(ctx.session, [service[jid] for jid in sorted(touched)])


def _node_allocations(
    loaded: _Loaded, placements: Mapping[str, Sequence[Mapping[str, Any]]]
) -> dict[int, dict[str, float]]:
    """The nodes whose stored allocation differs from what the running jobs now hold, with it."""
    use: dict[str, dict[str, float]] = {n.id: {} for n in loaded.nodes}
    for jid, ps in placements.items():
        per_task = loaded.jobs[jid].spec["per_task"]
        for p in ps:
            held = use.setdefault(str(p["node_id"]), {})
            for name, v in per_task.items():
                held[name] = held.get(name, 0.0) + float(v) * int(p["tasks"])
    out: dict[int, dict[str, float]] = {}
    for n in loaded.nodes:
        before = {k: v for k, v in clean(n.allocated).items() if v}
        after = {k: v for k, v in use.get(n.id, {}).items() if v}
        if before != after:
            out[n.pk] = {**dict.fromkeys(clean(n.allocated), 0.0), **after}
    return out


async def schedule_round(
    ctx: Ctx,
    cluster: ClusterRecord,
    body: ScheduleRequest,
    *,
    decisions: DecisionService,
    settings: Settings,
    request_id: str | None,
) -> DecisionRead:
    """One round on the gpu ``cluster`` (locked by the caller, in the request's transaction)."""
    if body.policy is not None:
        problem = check_policy_name("body.policy", body.policy, GPU_CODEC, decisions, ctx.tenant)
        if problem is not None:
            raise UnprocessableError(f"unknown gpu policy {body.policy!r}", details=[problem])
    gpu_settings = settings_of(cluster)
    now = body.now if body.now is not None else epoch_now()
    timings = round_timings.get()
    started = time.perf_counter()
    loaded = await _load(ctx, cluster, now)
    loaded_at = time.perf_counter()
    policy = body.policy or cluster.policy
    rid = _request_id(request_id)
    outcome = await _decide(
        loaded.state,
        policy=policy,
        fallback=cluster.fallback or DEFAULT_FALLBACK,
        config=_config(gpu_settings),
        decisions=decisions,
        tenant=ctx.tenant,
        deadline_ms=_deadline(body.deadline_ms, settings, loaded.state),
        field_prefix="cluster.",
        request_id=rid,
    )
    decided_at = time.perf_counter()
    record = _record(
        tenant=ctx.tenant,
        cluster=cluster,
        state=loaded.state,
        outcome=outcome,
        request_id=rid,
        dry_run=body.dry_run,
        explain=body.explain,
        input_body=stored_input(
            loaded.state,
            policy=policy,
            fallback=cluster.fallback,
            settings=gpu_settings,
            explain=body.explain,
        ),
    )
    await store_decision(ctx, record)
    if not body.dry_run:
        await _apply(ctx, loaded, outcome.decision, record, gpu_settings, now)
    if timings is not None:
        timings.load_s = loaded_at - started
        timings.decide_s = decided_at - loaded_at
        timings.persist_s = time.perf_counter() - decided_at
    return decision_read(record)


# -- stateless: /v1/decide with domain "gpu" -----------------------------------------------------


def state_from_request(body: GpuDecideRequest) -> ClusterSnapshot:
    """The snapshot of a validated body, through the GPU codec (the body is its JSON form)."""
    raw = body.model_dump(mode="json", include={"now", "nodes", "jobs"}, exclude_none=True)
    return codec.state_from_json(raw)


async def decide_snapshot(
    tenant: str,
    body: GpuDecideRequest,
    *,
    decisions: DecisionService,
    writer: DecisionWriter,
    settings: Settings,
    request_id: str | None = None,
    store: bool = True,
) -> DecisionRead:
    """Decide a GPU snapshot and store the decision (``cluster_id: null``); answered with
    ``stored: false`` when the database is unavailable or ``store`` is false."""
    problems = []
    if body.policy is not None:
        problems.append(check_policy_name("body.policy", body.policy, GPU_CODEC, decisions, tenant))
    if body.fallback is not None:
        problems.append(check_fallback_name("body.fallback", body.fallback, GPU_CODEC, decisions))
    found = [p for p in problems if p is not None]
    if found:
        raise UnprocessableError("the decide request is invalid", details=found)
    timings = round_timings.get()
    started = time.perf_counter()
    try:
        state = state_from_request(body)
    except SnapshotError as exc:
        raise snapshot_error("GPU", f"body.{exc.field}", exc.message) from None
    loaded_at = time.perf_counter()
    gpu_settings = body.gpu or GpuClusterSettings()
    policy = body.policy or default_policy(GPU_CODEC, "easy", decisions, settings, tenant)
    fallback = body.fallback or DEFAULT_FALLBACK
    rid = _request_id(request_id)
    outcome = await _decide(
        state,
        policy=policy,
        fallback=fallback,
        config=_config(gpu_settings),
        decisions=decisions,
        tenant=tenant,
        deadline_ms=_deadline(body.deadline_ms, settings, state),
        field_prefix="body.",
        request_id=rid,
    )
    decided_at = time.perf_counter()
    if timings is not None:
        timings.load_s = loaded_at - started
        timings.decide_s = decided_at - loaded_at
    record = _record(
        tenant=tenant,
        cluster=None,
        state=state,
        outcome=outcome,
        request_id=rid,
        dry_run=True,
        explain=body.explain,
        input_body=stored_input(
            state, policy=policy, fallback=fallback, settings=gpu_settings, explain=body.explain
        ),
    )
    answer = await store_stateless(record, writer=writer, store=store)
    if timings is not None and answer.stored:
        timings.persist_s = time.perf_counter() - decided_at
    return answer
