"""Scheduling rounds of ``dag`` clusters (``POST /v1/clusters/{id}/schedule``, handed over by
:mod:`app.services.rounds` with the cluster locked) and ``POST /v1/decide`` with a DAG snapshot.

Both build the same input, a ``/v1/decide`` DAG body (:class:`~app.schemas.dag.DagDecideRequest`
shape, the DAGs in the DAG codec's JSON form), turn it into the domain's snapshot with one
function (:func:`snapshot_of`) and decide it through :mod:`app.domains.dag`; the input is the
decision's stored input, so ``GET /v1/decisions/{id}`` replays it through ``/v1/decide``.

Executor slots (:mod:`app.services.dags`): an ``up`` node's free slots are
``floor(min over resources of (capacity - allocated) / executor_capacity)``; the round's free
slots are their sum, and its executors the ``up`` nodes' slots plus the slots held on other
nodes. Granted slots go to the nodes first-fit in node-id order.

The fallback chain (:mod:`app.policy.deciders`, shared by every domain's round, run by the
decision pipeline in this process or on a ``kairos worker``): the cluster's (or the request's)
policy, a DAG heuristic or a learned DAG model (the registry's ``app.policy.dag_onnx`` model, a
fresh policy per decision), decides off the event loop within the deadline; a missing or refused
model, an error, a refused pick, a timeout or a decision that breaks an invariant
(:func:`~app.domains.dag.explain.check_decision`) hands the round to the fallback heuristic
(default ``fair``) and the decision says why (:class:`~app.outcomes.FallbackReason`). A fallback
decision that breaks an invariant is replaced by an empty one: nothing unsafe is ever applied.

A stateful round applies its decision in the transaction that stores it: each granted stage
launches one task per slot (``launched``/``running`` grow, its job is ``running`` with the
slots in its ``placements``), node allocations grow by one ``executor_capacity`` per slot,
reservations and parallelism limits are recorded on the stages, and the DAGs' pending trigger
(``released_at``) is consumed.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.db.decision_input import pack as pack_input
from app.db.decision_writer import DecisionWriter
from app.db.orm import ClusterRecord, DagRecord, DagStageRecord, DecisionRecord, JobRecord
from app.db.repositories.dag_repository import DagRepository
from app.db.repositories.node_repository import NodeRepository
from app.domains.dag import codec
from app.domains.dag.domain import DOMAIN
from app.domains.dag.heuristics import HEURISTIC_NAMES
from app.domains.dag.types import (
    DagClusterState,
    DagConfig,
    DagDecision,
    DagState,
    StageGrant,
    StageProgress,
)
from app.domains.dag.types import DagSpec as DomainDagSpec
from app.domains.dag.types import StageSpec as DomainStageSpec
from app.kernel.clock import epoch_now, utc_now
from app.kernel.errors import InvalidPickError, SnapshotError
from app.outcomes import DecisionRequest, FallbackReason
from app.schemas.dag import DagDecideRequest
from app.schemas.decision import DecisionRead, ScheduleRequest
from app.services.context import Ctx
from app.services.convert import clean, dag_settings, decision_read, finite_json
from app.services.dags import (
    add_slots,
    executor_capacity,
    free_slots_of,
    held_slots,
    node_slots,
    slot_amounts,
    stage_job_id,
)
from app.services.decision import DecisionService
from app.services.errors import UnprocessableError
from app.services.policy_names import check_fallback_name, check_policy_name, default_policy
from app.services.rounds import (
    new_decision_id,
    new_request_id,
    snapshot_error,
    store_decision,
    store_stateless,
)
from app.settings import Settings

logger = logging.getLogger(__name__)

__all__ = [
    "Snapshot",
    "decide_snapshot",
    "schedule_round",
    "snapshot_of",
]

DEFAULT_SLOT: Final = {"cpu": 1.0}


# -- the snapshot ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Snapshot:
    state: DagClusterState
    #: ``(node_id, free slots)`` of the ``up`` nodes with a free slot, in placement order
    free: tuple[tuple[str, int], ...]
    slot: dict[str, float]


def _trigger_dag(raw: Mapping[str, Any]) -> str | None:
    trigger = raw.get("trigger")
    if not trigger or trigger.get("type") != "stage_released" or not trigger.get("job_id"):
        return None
    return str(trigger["job_id"]).partition(":")[0]


def snapshot_of(raw: Mapping[str, Any]) -> Snapshot:
    """The domain snapshot of a DAG decide body (a validated request, or a stateful round's
    input); :class:`SnapshotError` naming the field when it cannot be decided."""
    slot = clean(raw.get("executor_capacity") or DEFAULT_SLOT)
    free: list[tuple[str, int]] = []
    executors = 0
    for node in sorted(raw["nodes"], key=lambda n: str(n["id"])):
        allocated = node.get("allocated") or {}
        if node.get("state", "up") == "up":
            executors += node_slots(node["capacity"], slot)
            n_free = free_slots_of(node["capacity"], allocated, slot)
            if n_free > 0:
                free.append((str(node["id"]), n_free))
        else:
            executors += held_slots(allocated, slot)
    dags = [
        {
            "spec": d["spec"],
            "progress": [
                {
                    "stage_id": p["stage_id"],
                    "launched": p.get("launched", 0),
                    "finished": p.get("finished", 0),
                    "running": p.get("running_slots", 0),
                }
                for p in d.get("stage_progress", [])
            ],
        }
        for d in raw.get("dags", [])
    ]
    total_free = sum(n for _, n in free)
    running = sum(
        p["running"] for d in dags for p in d["progress"] if isinstance(p["running"], int)
    )
    state = codec.state_from_json(
        {
            "now": raw["now"],
            "executors": max(executors, total_free + running, 1),
            "free_slots": total_free,
            "executor_capacity": slot,
            "trigger_dag": _trigger_dag(raw),
            "dags": dags,
        }
    )
    return Snapshot(state, tuple(free), slot)


# -- invariants ------------------------------------------------------------------------------------


def place(free: Sequence[tuple[str, int]], grants: Sequence[StageGrant]) -> list[list[list[Any]]]:
    """Per grant, its ``[node_id, slots]`` placements: first-fit over ``free`` (the grants'
    slots sum to at most the free slots, :func:`check_decision`)."""
    nodes = [node_id for node_id, _ in free]
    left = [n for _, n in free]
    out: list[list[list[Any]]] = []
    for g in grants:
        need = g.slots
        placements: list[list[Any]] = []
        for i, node_id in enumerate(nodes):
            if need <= 0:
                break
            take = min(need, left[i])
            if take > 0:
                placements.append([node_id, take])
                left[i] -= take
                need -= take
        if need > 0:
            raise InvalidPickError(f"no free slot left for {g.dag_id}:{g.stage_id}")
        out.append(placements)
    return out


# -- the fallback chain ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Outcome:
    decision: DagDecision
    name: str
    version: str
    kind: str
    fallback_used: bool
    fallback_reason: FallbackReason | None
    fallback_detail: str | None
    steps: list[dict[str, Any]] | None
    latency_ms: float
    #: the shadow policy's decision (never applied), ``None`` when it could not decide safely
    shadow: DagDecision | None = None


def _spec(name: str, decisions: DecisionService, tenant: str | None) -> str:
    """The registry's spec of ``name`` for ``tenant`` (a heuristic's name unchanged)."""
    return name if is_dag_heuristic(name) else decisions.resolve_spec(name, tenant)


def is_dag_heuristic(name: str) -> bool:
    return name.partition("@")[0].strip().lower() in HEURISTIC_NAMES


async def decide_dag(
    state: DagClusterState,
    *,
    policy: str,
    fallback: str,
    alpha: float,
    explain: bool,
    deadline_s: float,
    decisions: DecisionService,
    tenant: str | None,
    request_id: str,
    shadow: str | None = None,
) -> _Outcome:
    """The fallback chain on a valid snapshot, through the decision pipeline (in this process
    or on a ``kairos worker``: :mod:`app.policy.deciders`)."""
    started = time.perf_counter()
    request = DecisionRequest(
        request_id=request_id,
        state=state,
        config=DagConfig(alpha=alpha, explain=explain),
        policy=_spec(policy, decisions, tenant),
        fallback=fallback,
        shadow=None if shadow is None else _spec(shadow, decisions, tenant),
        deadline=time.time() + deadline_s,
        domain=DOMAIN.name,
    )
    outcome = await decisions.decide_request(request)
    assert outcome.decision is not None
    ref = outcome.policy
    return _Outcome(
        outcome.decision,
        ref.name,
        ref.version,
        ref.kind,
        outcome.fallback_used,
        outcome.fallback_reason,
        outcome.fallback_detail,
        outcome.explanation,
        (time.perf_counter() - started) * 1000.0,
        None if outcome.shadow is None else outcome.shadow.decision,
    )


def _shadow_allocations(
    decision: DagDecision | None, free: Sequence[tuple[str, int]]
) -> list[dict[str, Any]] | None:
    """The shadow's grants placed like the primary's, or ``None`` when it could not decide."""
    if decision is None:
        return None
    try:
        placements = place(free, decision.allocations)
    except InvalidPickError:
        return None
    return [_grant_allocation(g, p) for g, p in zip(decision.allocations, placements, strict=True)]


# -- the decision record ---------------------------------------------------------------------------


def _grant_allocation(g: StageGrant, placements: Sequence[Sequence[Any]]) -> dict[str, Any]:
    return {
        "job_id": stage_job_id(g.dag_id, g.stage_id),
        "placements": [{"node_id": n, "tasks": k} for n, k in placements],
        "parallelism_limit": g.parallelism_limit,
    }


def _record(
    *,
    tenant: str,
    cluster: ClusterRecord | None,
    snapshot: Snapshot,
    raw: Mapping[str, Any],
    outcome: _Outcome,
    placements: Sequence[Sequence[Sequence[Any]]],
    request_id: str,
    dry_run: bool,
    shadow: tuple[str, list[dict[str, Any]] | None] | None = None,
) -> DecisionRecord:
    d = outcome.decision
    explain = None
    if raw.get("explain"):
        explain = finite_json(
            {
                "domain": "dag",
                "policy": outcome.name,
                "free_slots": snapshot.state.free_slots,
                "executors": snapshot.state.executors,
                "idle_slots": d.idle_slots,
                "fallback_detail": outcome.fallback_detail,
                "steps": outcome.steps or [],
            }
        )
    return DecisionRecord(
        id=new_decision_id(),
        request_id=request_id,
        tenant=tenant,
        cluster_pk=None if cluster is None else cluster.pk,
        cluster_id=None if cluster is None else cluster.id,
        policy_name=outcome.name,
        policy_version=outcome.version,
        policy_kind=outcome.kind,
        fallback_used=outcome.fallback_used,
        fallback_reason=None if outcome.fallback_reason is None else outcome.fallback_reason.value,
        shadow_policy=None if shadow is None else shadow[0],
        shadow_allocations=None if shadow is None else shadow[1],
        allocations=[
            _grant_allocation(g, p) for g, p in zip(d.allocations, placements, strict=True)
        ],
        reservations=[
            {
                "job_id": stage_job_id(g.dag_id, g.stage_id),
                "start_at": None,
                "slots": g.slots,
                "parallelism_limit": g.parallelism_limit,
            }
            for g in d.reservations
        ],
        queue_length=sum(
            1
            for dag in snapshot.state.dags
            if any(
                dag.progress_of().get(s.id, StageProgress(s.id)).launched < s.tasks
                for s in dag.spec.stages
            )
        ),
        latency_ms=outcome.latency_ms,
        dry_run=dry_run,
        explain=explain,
        input_blob=pack_input(raw),
    )


def _snapshot_error(exc: SnapshotError, prefix: str) -> UnprocessableError:
    field_ = "trigger.job_id" if exc.field == "trigger_dag" else exc.field
    field_ = re.sub(r"\.progress\[", ".stage_progress[", field_)
    field_ = re.sub(r"(stage_progress\[\d+\])\.running$", r"\1.running_slots", field_)
    return snapshot_error("DAG", f"{prefix}{field_}", exc.message)


def _snapshot(raw: Mapping[str, Any], prefix: str) -> Snapshot:
    try:
        snapshot = snapshot_of(raw)
        DOMAIN.validate(snapshot.state)
    except SnapshotError as exc:
        raise _snapshot_error(exc, prefix) from None
    return snapshot


def _deadline_s(body_ms: float | None, settings: Settings, state: DagClusterState) -> float:
    if body_ms is not None:
        return body_ms / 1000.0
    stages = sum(len(d.spec.stages) for d in state.dags)
    steps = min(state.free_slots, stages)  # the most stage picks one round can make
    ms = settings.default_deadline_ms(len(state.dags) + stages)
    return (ms + settings.DEADLINE_MS_PER_DAG_STEP * steps) / 1000.0


# -- stateful: /v1/clusters/{id}/schedule ----------------------------------------------------------


@dataclass(slots=True)
class _Rows:
    dags: list[DagRecord]
    stages: dict[int, list[tuple[DagStageRecord, JobRecord]]]
    used: dict[str, int]


def _domain_dag(dag: DagRecord, stages: Sequence[tuple[DagStageRecord, JobRecord]]) -> DagState:
    spec = dag.spec
    return DagState(
        DomainDagSpec(
            id=dag.id,
            submit_time=dag.submit_time,
            stages=tuple(
                DomainStageSpec(
                    id=s["id"],
                    tasks=int(s["tasks"]),
                    task_duration_s=float(s["task_duration_s"]),
                    depends_on=tuple(s["depends_on"]),
                    per_task=clean(s["per_task"]),
                    max_parallelism=s.get("max_parallelism"),
                )
                for s in spec["stages"]
            ),
        ),
        tuple(
            StageProgress(st.stage_id, st.launched, st.finished, st.running)
            for st, _ in stages
            if st.launched or st.finished or st.running
        ),
    )


async def _load(
    ctx: Ctx, cluster: ClusterRecord, body: ScheduleRequest, now: float, policy: str
) -> tuple[dict[str, Any], _Rows]:
    """The round's input (``/v1/decide`` DAG body) from the cluster's rows; node allocations
    are derived from the stages' placements (the truth they cache)."""
    settings = dag_settings(cluster)
    slot = executor_capacity(cluster)
    repo = DagRepository(ctx.session)
    dags = await repo.active(cluster.pk)
    stages = await repo.stages_of([d.pk for d in dags])
    used: dict[str, int] = {}
    for rows in stages.values():
        for _, job in rows:
            for p in job.placements or ():
                used[str(p["node_id"])] = used.get(str(p["node_id"]), 0) + int(p["tasks"])
    nodes = await NodeRepository(ctx.session).all(cluster.pk)
    trigger = None if body.trigger is None else body.trigger.model_dump(mode="json")
    state_json = codec.state_to_json(
        DagClusterState(
            now=now,
            executors=1,
            free_slots=0,
            dags=tuple(_domain_dag(d, stages.get(d.pk, [])) for d in dags),
            executor_capacity=slot,
        )
    )
    raw: dict[str, Any] = {
        "domain": "dag",
        "now": now,
        "nodes": [
            {
                "id": n.id,
                "capacity": clean(n.capacity),
                "allocated": slot_amounts(slot, used[n.id]) if used.get(n.id) else {},
                "state": n.state,
            }
            for n in nodes
        ],
        "executor_capacity": slot,
        "dags": [
            {
                "spec": d["spec"],
                "stage_progress": [
                    {
                        "stage_id": p["stage_id"],
                        "launched": p["launched"],
                        "finished": p["finished"],
                        "running_slots": p["running"],
                    }
                    for p in d["progress"]
                ],
            }
            for d in state_json["dags"]
        ],
        "trigger": trigger,
        "policy": policy,
        "fallback": cluster.fallback,
        "weighted_fair_alpha": settings.weighted_fair_alpha,
        "explain": body.explain,
    }
    if trigger is None:
        released = [d for d in dags if d.released_at is not None]
        if released:
            last = max(released, key=lambda d: (d.released_at or 0.0, d.pk))
            # the source job owns the round's free slots: only when they are all its own
            if last.released_slots >= snapshot_of(raw).state.free_slots:
                raw["trigger"] = {"type": "stage_released", "job_id": last.id}
    return raw, _Rows(dags, stages, used)


async def _apply(
    ctx: Ctx,
    cluster: ClusterRecord,
    rows: _Rows,
    decision: DagDecision,
    placements: Sequence[Sequence[Sequence[Any]]],
    decision_id: str,
    now: float,
) -> None:
    by_key: dict[tuple[str, str], tuple[DagRecord, DagStageRecord, JobRecord]] = {}
    for dag in rows.dags:
        for stage, job in rows.stages.get(dag.pk, []):
            by_key[(dag.id, stage.stage_id)] = (dag, stage, job)
            stage.reserved = 0
    used = dict(rows.used)
    for grant, where in zip(decision.allocations, placements, strict=True):
        dag, stage, job = by_key[(grant.dag_id, grant.stage_id)]
        stage.launched += grant.slots
        stage.running += grant.slots
        stage.parallelism_limit = grant.parallelism_limit
        job.placements = add_slots(job.placements, [{"node_id": n, "tasks": k} for n, k in where])
        job.state = "running"
        job.start_time = job.start_time if job.start_time is not None else now
        job.decision_id = decision_id
        dag.state = "running"
        dag.start_time = dag.start_time if dag.start_time is not None else now
        for node_id, k in where:
            used[node_id] = used.get(node_id, 0) + int(k)
    for grant in decision.reservations:
        _, stage, _ = by_key[(grant.dag_id, grant.stage_id)]
        stage.reserved = grant.slots
        stage.parallelism_limit = grant.parallelism_limit
    for dag in rows.dags:
        dag.released_at = None
        dag.released_slots = 0
    slot = executor_capacity(cluster)
    for node in await NodeRepository(ctx.session).all(cluster.pk):
        held = slot_amounts(slot, used[node.id]) if used.get(node.id) else {}
        if clean(node.allocated) != held and (held or any(v for v in node.allocated.values())):
            node.allocated = held
    await ctx.session.flush()


async def schedule_round(
    ctx: Ctx,
    cluster: ClusterRecord,
    body: ScheduleRequest,
    *,
    decisions: DecisionService,
    settings: Settings,
    request_id: str | None,
) -> DecisionRead:
    """One round on a locked dag cluster (see the module doc)."""
    if body.policy is not None:
        problem = check_policy_name("body.policy", body.policy, "dag", decisions, ctx.tenant)
        if problem is not None:
            raise UnprocessableError(f"unknown policy {body.policy!r}", details=[problem])
    now = body.now if body.now is not None else epoch_now()
    raw, rows = await _load(ctx, cluster, body, now, body.policy or cluster.policy)
    snapshot = _snapshot(raw, "cluster.")
    request_id = request_id or new_request_id()
    outcome = await decide_dag(
        snapshot.state,
        policy=str(raw["policy"]),
        fallback=cluster.fallback,
        alpha=float(raw["weighted_fair_alpha"]),
        explain=body.explain,
        deadline_s=_deadline_s(body.deadline_ms, settings, snapshot.state),
        decisions=decisions,
        tenant=ctx.tenant,
        request_id=request_id,
        shadow=cluster.shadow_policy or None,
    )
    placements = place(snapshot.free, outcome.decision.allocations)
    shadow = None
    if cluster.shadow_policy:
        shadow = (cluster.shadow_policy, _shadow_allocations(outcome.shadow, snapshot.free))
    record = _record(
        tenant=ctx.tenant,
        cluster=cluster,
        snapshot=snapshot,
        raw=raw,
        outcome=outcome,
        placements=placements,
        request_id=request_id,
        dry_run=body.dry_run,
        shadow=shadow,
    )
    record.created_at = utc_now()
    await store_decision(ctx, record)
    if not body.dry_run:
        await _apply(ctx, cluster, rows, outcome.decision, placements, record.id, now)
    return decision_read(record)


# -- stateless: /v1/decide -------------------------------------------------------------------------


async def decide_snapshot(
    tenant: str,
    body: DagDecideRequest,
    *,
    decisions: DecisionService,
    writer: DecisionWriter,
    settings: Settings,
    request_id: str | None = None,
    store: bool = True,
) -> DecisionRead:
    """Decide a DAG snapshot and store the decision (``cluster_id: null``), like the HPC
    ``/v1/decide``: answered ``stored: false`` when the database is unavailable or ``store``
    is false."""
    problems = [
        p
        for p in (
            None
            if body.policy is None
            else check_policy_name("body.policy", body.policy, "dag", decisions, tenant),
            None
            if body.fallback is None
            else check_fallback_name("body.fallback", body.fallback, "dag", decisions),
        )
        if p is not None
    ]
    if problems:
        raise UnprocessableError("the decide request is invalid", details=problems)
    raw = body.model_dump(mode="json")
    for dag in raw["dags"]:  # a DAG without a submit time arrived now (as HPC jobs do)
        if dag["spec"].get("submit_time") is None:
            dag["spec"]["submit_time"] = raw["now"]
    raw["policy"] = body.policy or default_policy("dag", "easy", decisions, settings, tenant)
    raw["fallback"] = body.fallback or DOMAIN.default_fallback
    snapshot = _snapshot(raw, "body.")
    request_id = request_id or new_request_id()
    outcome = await decide_dag(
        snapshot.state,
        policy=raw["policy"],
        fallback=raw["fallback"],
        alpha=body.weighted_fair_alpha,
        explain=body.explain,
        deadline_s=_deadline_s(body.deadline_ms, settings, snapshot.state),
        decisions=decisions,
        tenant=tenant,
        request_id=request_id,
    )
    placements = place(snapshot.free, outcome.decision.allocations)
    record = _record(
        tenant=tenant,
        cluster=None,
        snapshot=snapshot,
        raw=raw,
        outcome=outcome,
        placements=placements,
        request_id=request_id,
        dry_run=True,
    )
    record.created_at = utc_now()
    return await store_stateless(record, writer=writer, store=store)
