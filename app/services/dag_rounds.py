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

The fallback chain (:mod:`app.services.chain`, shared by every domain's round): the cluster's
(or the request's) policy, a DAG heuristic or a learned DAG model (the registry's
``app.policy.dag_onnx`` model, a fresh policy per decision), decides off the event loop within
the deadline; a missing or refused model, an error, a refused pick, a timeout or a decision that
breaks an invariant (:func:`check_decision`) hands the round to the fallback heuristic (default
``fair``) and the decision says why (:class:`~app.outcomes.FallbackReason`). A fallback decision
that breaks an invariant is replaced by an empty one: nothing unsafe is ever applied.

A stateful round applies its decision in the transaction that stores it: each granted stage
launches one task per slot (``launched``/``running`` grow, its job is ``running`` with the
slots in its ``placements``), node allocations grow by one ``executor_capacity`` per slot,
reservations and parallelism limits are recorded on the stages, and the DAGs' pending trigger
(``released_at``) is consumed.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.to_thread

from app.db.decision_input import pack as pack_input
from app.db.decision_writer import DecisionWriter
from app.db.orm import ClusterRecord, DagRecord, DagStageRecord, DecisionRecord, JobRecord
from app.db.repositories.dag_repository import DagRepository
from app.db.repositories.node_repository import NodeRepository
from app.domains.dag import codec
from app.domains.dag.decima import DecimaPolicy, decima_forward, encode
from app.domains.dag.domain import DOMAIN
from app.domains.dag.heuristics import HEURISTIC_NAMES, get_heuristic
from app.domains.dag.policy import Action, DagPolicy, RoundView
from app.domains.dag.types import (
    DagClusterState,
    DagDecision,
    DagState,
    StageGrant,
    StageProgress,
    topological_order,
)
from app.domains.dag.types import DagSpec as DomainDagSpec
from app.domains.dag.types import StageSpec as DomainStageSpec
from app.kernel.clock import epoch_now, utc_now
from app.kernel.errors import InvalidPickError, SnapshotError
from app.outcomes import FallbackReason
from app.schemas.dag import DagDecideRequest
from app.schemas.decision import DecisionRead, ScheduleRequest
from app.services.chain import run_fallback, run_primary
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
    "check_decision",
    "decide_snapshot",
    "schedule_round",
    "snapshot_of",
]

#: the version every DAG heuristic reports
HEURISTIC_VERSION: Final = "1"
DEFAULT_SLOT: Final = {"cpu": 1.0}
#: runners-up listed per step of an explanation
RUNNERS_UP: Final = 3


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


def check_decision(state: DagClusterState, decision: DagDecision) -> list[str]:
    """Invariant violations of ``decision`` on ``state`` (empty when safe to apply): grants to
    known stages, each at most once, of at least one slot and at most the stage's demand
    (unlaunched tasks not covered by running slots, within ``max_parallelism``); allocations
    only to stages whose parents all finished; no more slots than are free."""
    problems: list[str] = []
    dags = {d.spec.id: d for d in state.dags}
    seen: set[tuple[str, str]] = set()
    total = 0
    kinds = (("allocation", decision.allocations), ("reservation", decision.reservations))
    for kind, grants in kinds:
        for g in grants:
            dag = dags.get(g.dag_id)
            stages = {} if dag is None else {s.id: s for s in dag.spec.stages}
            st = stages.get(g.stage_id)
            if dag is None or st is None or (g.dag_id, g.stage_id) in seen:
                problems.append(f"{kind} {g.dag_id}:{g.stage_id} is unknown or repeated")
                continue
            seen.add((g.dag_id, g.stage_id))
            prog = dag.progress_of()
            p = prog.get(st.id, StageProgress(st.id))
            demand = st.tasks - p.launched - p.running
            if st.max_parallelism is not None:
                demand = min(demand, st.max_parallelism - p.running)
            if g.slots < 1 or g.slots > demand or g.parallelism_limit < 1:
                problems.append(f"{kind} {g.dag_id}:{g.stage_id}: {g.slots} slots of {demand}")
            total += g.slots
            parents_done = all(
                prog.get(q, StageProgress(q)).finished >= stages[q].tasks for q in st.depends_on
            )
            if kind == "allocation" and not parents_done:
                problems.append(f"stage {g.dag_id}:{g.stage_id} placed before its parents finish")
    if total > state.free_slots:
        problems.append(f"{total} slots granted, {state.free_slots} free")
    return problems


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


# -- explanations ----------------------------------------------------------------------------------


def _scores(policy: DagPolicy, view: RoundView) -> dict[tuple[int, int], float]:
    """The policy's own scores of the selectable stages, when it has them (Decima-style
    policies: the stage logits, from ``logits(obs)`` or the dense forward pass on its weights;
    others through a ``stage_scores(view)`` method)."""
    logits_fn = getattr(policy, "logits", None)
    weights = getattr(policy, "weights", None)
    if isinstance(policy, DecimaPolicy) and (callable(logits_fn) or weights is not None):
        obs = encode(view)
        if callable(logits_fn):
            logits = logits_fn(obs)[0]
        else:
            assert weights is not None
            logits = decima_forward(weights, obs)[0]
        return {
            slot: float(logits[j, s])
            for j, row in enumerate(obs.slots)
            for s, slot in enumerate(row)
            if obs.select_mask[j, s]
        }
    score_fn = getattr(policy, "stage_scores", None)
    if callable(score_fn):
        return {(int(j), int(s)): float(v) for (j, s), v in score_fn(view).items()}
    return {}


def _masked(view: RoundView, picks: Sequence[tuple[int, int]]) -> RoundView:
    jobs = list(view.jobs)
    for j, s in picks:
        job = jobs[j]
        stages = list(job.stages)
        stages[s] = dataclasses.replace(stages[s], selectable=False, runnable=False)
        jobs[j] = dataclasses.replace(job, stages=tuple(stages))
    return dataclasses.replace(view, jobs=tuple(jobs))


def _stage_summary(
    view: RoundView,
    j: int,
    s: int,
    scores: Mapping[tuple[int, int], float],
    stage_ids: Mapping[str, tuple[str, ...]],
) -> dict[str, Any]:
    job = view.jobs[j]
    st = job.stages[s]
    return {
        "job_id": stage_job_id(job.id, stage_ids[job.id][s]),
        "score": scores.get((j, s)),
        "runnable": st.runnable,
        "demand": st.demand,
        "unlaunched": st.unlaunched,
        "duration_ms": st.duration_ms,
    }


@dataclass(slots=True)
class _Explainer:
    """Runs ``inner`` and records, per action: the chosen stage with its score, the runners-up
    (what ``inner`` would choose with the chosen stages masked out, asked of copies of it) and
    the jobs' summary values."""

    inner: DagPolicy
    #: per DAG id, its stage ids in the order the views index them
    stage_ids: Mapping[str, tuple[str, ...]]
    steps: list[dict[str, Any]] = field(default_factory=list)
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.inner.name

    def reset(self) -> None:
        self.inner.reset()
        self.steps.clear()

    def _runners_up(
        self,
        probe: DagPolicy | None,
        view: RoundView,
        first: tuple[int, int],
        scores: Mapping[tuple[int, int], float],
    ) -> tuple[list[tuple[int, int]], bool]:
        """The next picks: by the policy's scores when it has them, else what copies of it
        choose with the earlier picks masked out, else unranked."""
        if scores:
            ranked = sorted((k for k in scores if k != first), key=lambda k: (-scores[k], k))
            return ranked[:RUNNERS_UP], True
        picks = [first]
        if probe is not None:
            try:
                while len(picks) <= RUNNERS_UP:
                    action = copy.deepcopy(probe).choose(_masked(view, picks))
                    if action is None:
                        break
                    picks.append((action.job, action.stage))
                return picks[1:], True
            except Exception:  # a policy that cannot be copied or asked twice: list them
                picks = [first]
        others = [
            (j, st.index)
            for j, job in enumerate(view.jobs)
            for st in job.stages
            if st.selectable and (j, st.index) != first
        ]
        return others[:RUNNERS_UP], False

    def choose(self, view: RoundView) -> Action | None:
        probe: DagPolicy | None = None
        if not isinstance(self.inner, DecimaPolicy):  # scored: its runners-up are by score
            try:
                probe = copy.deepcopy(self.inner)
            except Exception:
                probe = None
        action = self.inner.choose(view)
        if action is None:
            return None
        try:
            scores = _scores(self.inner, view)
        except Exception:
            scores = {}
        chosen = (action.job, action.stage)
        others, ranked = self._runners_up(probe, view, chosen, scores)
        self.steps.append(
            {
                "num_source": view.num_source,
                "source_dag": None if view.source_job is None else view.jobs[view.source_job].id,
                "chosen": {
                    **_stage_summary(view, *chosen, scores, self.stage_ids),
                    "slots": action.executors,
                    "parallelism_limit": action.limit,
                },
                "runners_up": [
                    _stage_summary(view, j, s, scores, self.stage_ids) for j, s in others
                ],
                "runners_up_ranked": ranked,
                "jobs": [
                    {
                        "dag_id": job.id,
                        "supply": job.supply,
                        "remaining_work_ms": job.remaining_work_ms(),
                        "selectable_stages": sum(1 for st in job.stages if st.selectable),
                    }
                    for job in view.jobs
                ],
            }
        )
        return action


# -- policies and the fallback chain ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Resolved:
    name: str
    version: str
    kind: str
    policy: DagPolicy | None
    reason: FallbackReason | None = None
    detail: str | None = None


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


def _base(name: str) -> str:
    return name.partition("@")[0].strip().lower()


def is_dag_heuristic(name: str) -> bool:
    return _base(name) in HEURISTIC_NAMES


def _heuristic(name: str, alpha: float) -> DagPolicy:
    base = _base(name)
    if base == "weighted_fair" and alpha != 0.0:
        policy = get_heuristic(f"weighted_fair({alpha!r})")
        policy.name = "weighted_fair"
        return policy
    return get_heuristic(base)


async def _resolve(
    name: str, alpha: float, decisions: DecisionService, tenant: str | None
) -> _Resolved:
    if is_dag_heuristic(name):
        return _Resolved(_base(name), HEURISTIC_VERSION, "heuristic", _heuristic(name, alpha))
    info = decisions.get_policy(name, tenant)
    if info is None or info.kind == "heuristic" or info.domain not in ("dag", "any"):
        return _Resolved(
            name, "unknown", "onnx", None, reason=FallbackReason.MODEL_MISSING, detail=name
        )
    entry = decisions.pipeline.registry.find_or_load(decisions.resolve_spec(name, tenant))
    if entry is None:
        return _Resolved(info.name, info.version, "onnx", None, reason=FallbackReason.MODEL_MISSING)
    if entry.dag is None:
        return _Resolved(
            entry.name,
            entry.version,
            "onnx",
            None,
            reason=FallbackReason.MODEL_REFUSED,
            detail=f"{entry.reason}: {entry.message}",
        )
    # a fresh policy per decision (it holds its sampling generator); the session is shared
    return _Resolved(entry.name, entry.version, "onnx", entry.dag.policy())


def _run(
    state: DagClusterState,
    policy: DagPolicy,
    explain: bool,
    stage_ids: Mapping[str, tuple[str, ...]],
) -> tuple[DagDecision, list[dict[str, Any]] | None]:
    """One domain decision (in a worker thread)."""
    explainer = _Explainer(policy, stage_ids) if explain else None
    decision = DOMAIN.decide(state, explainer or policy)
    return decision, None if explainer is None else explainer.steps


def _stage_ids_of(state: DagClusterState) -> dict[str, tuple[str, ...]]:
    """Stage ids in the order the domain's views index them (topological, ties spec order)."""
    return {
        d.spec.id: tuple(d.spec.stages[i].id for i in topological_order(d.spec)) for d in state.dags
    }


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
) -> _Outcome:
    """The fallback chain on a valid snapshot (see the module doc)."""
    started = time.perf_counter()
    stage_ids = _stage_ids_of(state)
    primary = await _resolve(policy, alpha, decisions, tenant)
    reason, detail = primary.reason, primary.detail

    def check(ran: tuple[DagDecision, list[dict[str, Any]] | None]) -> list[str]:
        return check_decision(state, ran[0])

    if primary.policy is not None:
        chosen = primary.policy
        result = await run_primary(
            lambda: _run(state, chosen, explain, stage_ids),
            check=check,
            deadline_s=deadline_s,
            classify=_failure,
            label=primary.name,
        )
        if result.decision is not None:
            decision, steps = result.decision
            return _Outcome(
                decision,
                primary.name,
                primary.version,
                primary.kind,
                False,
                None,
                None,
                steps,
                (time.perf_counter() - started) * 1000.0,
            )
        reason, detail = result.reason, result.detail
    name = fallback if is_dag_heuristic(fallback) else DOMAIN.default_fallback
    decision, steps = await run_fallback(
        lambda: _run(state, _heuristic(name, alpha), explain, stage_ids),
        check=check,
        empty=lambda: (
            DagDecision(_base(name), (), (), state.free_slots),
            [] if explain else None,
        ),
        label=name,
    )
    return _Outcome(
        decision,
        _base(name),
        HEURISTIC_VERSION,
        "heuristic",
        True,
        reason,
        detail,
        steps,
        (time.perf_counter() - started) * 1000.0,
    )


def _failure(exc: Exception) -> FallbackReason:
    if isinstance(exc, InvalidPickError):
        return FallbackReason.INVALID_PICK
    return FallbackReason.INFERENCE_ERROR


async def shadow_allocations(
    state: DagClusterState,
    free: Sequence[tuple[str, int]],
    *,
    policy: str,
    alpha: float,
    decisions: DecisionService,
    tenant: str | None,
) -> list[dict[str, Any]] | None:
    """The shadow policy's allocations on the same snapshot (placed like the primary's), or
    ``None`` when it cannot decide safely: a shadow never falls back and is never applied."""
    resolved = await _resolve(policy, alpha, decisions, tenant)
    if resolved.policy is None:
        return None
    try:
        decision, _ = await anyio.to_thread.run_sync(
            _run, state, resolved.policy, False, _stage_ids_of(state)
        )
        if check_decision(state, decision):
            return None
        placements = place(free, decision.allocations)
    except Exception as exc:
        logger.warning("DAG shadow policy %s failed: %r", policy, exc)
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
    outcome = await decide_dag(
        snapshot.state,
        policy=str(raw["policy"]),
        fallback=cluster.fallback,
        alpha=float(raw["weighted_fair_alpha"]),
        explain=body.explain,
        deadline_s=_deadline_s(body.deadline_ms, settings, snapshot.state),
        decisions=decisions,
        tenant=ctx.tenant,
    )
    placements = place(snapshot.free, outcome.decision.allocations)
    shadow = None
    if cluster.shadow_policy:
        shadow = (
            cluster.shadow_policy,
            await shadow_allocations(
                snapshot.state,
                snapshot.free,
                policy=cluster.shadow_policy,
                alpha=float(raw["weighted_fair_alpha"]),
                decisions=decisions,
                tenant=ctx.tenant,
            ),
        )
    record = _record(
        tenant=ctx.tenant,
        cluster=cluster,
        snapshot=snapshot,
        raw=raw,
        outcome=outcome,
        placements=placements,
        request_id=request_id or new_request_id(),
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
    outcome = await decide_dag(
        snapshot.state,
        policy=raw["policy"],
        fallback=raw["fallback"],
        alpha=body.weighted_fair_alpha,
        explain=body.explain,
        deadline_s=_deadline_s(body.deadline_ms, settings, snapshot.state),
        decisions=decisions,
        tenant=tenant,
    )
    placements = place(snapshot.free, outcome.decision.allocations)
    record = _record(
        tenant=tenant,
        cluster=None,
        snapshot=snapshot,
        raw=raw,
        outcome=outcome,
        placements=placements,
        request_id=request_id or new_request_id(),
        dry_run=True,
    )
    record.created_at = utc_now()
    return await store_stateless(record, writer=writer, store=store)
