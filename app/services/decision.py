"""The decision seam: every scheduling round (``/schedule`` and ``/v1/decide``) goes through here.

:class:`DecisionService` owns *how* a decision is computed: which policy a name resolves to, where
the computation runs (the pipeline's micro-batcher or Redis workers), the deadline, and the
fallback chain. Callers hand it a snapshot and a :class:`DecisionSpec` and
get a :class:`DecisionOutcome`; they never call ``app.domains.hpc.decision.decide`` themselves.

Fallback reasons (``DecisionOutcome.fallback_reason``) are machine-readable
:class:`~app.outcomes.FallbackReason` values (one vocabulary, :mod:`app.outcomes`). The fallback
is always a heuristic, run without a deadline; its output is checked like the primary's, and an
unsafe result degrades to an empty decision rather than reaching the database.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import anyio
import anyio.to_thread

from app.domains.hpc.decision import DecisionConfig, decide, validate_snapshot
from app.domains.hpc.heuristics import (
    HEURISTIC_CLASSES,
    HEURISTIC_DESCRIPTIONS,
    HEURISTIC_VERSION,
    get_heuristic,
)
from app.domains.hpc.policy import OrderingPolicy, RankingPolicy, SteppingPolicy
from app.domains.hpc.types import (
    Allocation,
    Backfill,
    ClusterState,
    Decision,
    Job,
    PlacementStrategy,
)
from app.kernel.errors import DomainError, UnknownHeuristicError
from app.kernel.resources import FIT_EPS
from app.outcomes import (
    DEFAULT_FALLBACK,
    DecisionOutcome,
    DecisionRequest,
    FallbackReason,
)
from app.policy.deciders import fallback_for
from app.policy.pipeline import DecisionPipeline
from app.policy.registry import (
    OWNER_SEP,
    ModelEntry,
    PreparedModel,
    owner_of,
    qualified,
    version_key,
)
from app.services.chain import run_fallback
from app.services.errors import TooManyRequestsError
from app.settings import Settings
from app.tuning.card import is_heuristic_card

logger = logging.getLogger(__name__)

Health = Literal["ok", "degraded", "down"]
Policy = OrderingPolicy | RankingPolicy | SteppingPolicy


@dataclass(frozen=True, slots=True)
class DecisionSpec:
    """What to decide with: resolved from the cluster (or the ``/v1/decide`` body)."""

    #: ``"<name>[@<version>]"``
    policy: str
    #: a heuristic name
    fallback: str
    backfill: Backfill = Backfill.EASY
    placement: PlacementStrategy = PlacementStrategy.FIRST_FIT
    explain: bool = False
    #: computed beside the primary, stored, never applied (pipeline issue: shadow mode)
    shadow_policy: str | None = None
    #: the tenant whose uploads ``policy`` and ``shadow_policy`` may name; None: only heuristics
    #: and shipped models (ADR 0088)
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    name: str
    version: str
    kind: str
    domain: str
    loaded: bool
    description: str | None = None
    sha256: str | None = None
    card: dict[str, Any] | None = field(default=None)
    #: the registry's owner of a tenant's upload (``owner_of(tenant)``); ``""``: a heuristic or
    #: a shipped model, visible to every tenant
    owner: str = ""
    #: the heuristic it decides as (``kind == "heuristic"``): a catalogue heuristic's own name,
    #: a heuristic card's recommendation; ``None`` for a model
    heuristic: str | None = None

    @property
    def scope(self) -> Literal["shared", "tenant"]:
        return "tenant" if self.owner else "shared"

    @property
    def builtin_heuristic(self) -> bool:
        """One of the catalogue's heuristics, which a name resolves by itself (a heuristic card
        is a registry entry: it has a card, and its spec is the entry's)."""
        return self.kind == "heuristic" and self.card is None


@dataclass(frozen=True, slots=True)
class _Catalogue:
    """Every policy of one registry generation: heuristics, then shipped models, then uploads;
    ``by_name`` maps each lowercased name to its entries in that order."""

    generation: int
    infos: list[PolicyInfo]
    by_name: dict[str, list[PolicyInfo]]


def _preference(typed: str) -> Callable[[PolicyInfo], tuple[bool, bool, bool]]:
    """Which of several policies one name matches is meant: a heuristic, then a shipped model,
    then the tenant's upload (uploads never take the others' names; this orders those placed on
    disk by hand), and the exact spelling first."""
    return lambda i: (not i.builtin_heuristic, i.owner != "", i.name != typed)


def _info(entry: ModelEntry) -> PolicyInfo:
    """A registry entry as the catalogue lists it: kind ``heuristic`` for a heuristic card (naming
    the heuristic it decides as, or refused naming why), ``onnx`` for a model of the card's
    domain (loaded or refused)."""
    if entry.heuristic is None and entry.card is not None and is_heuristic_card(entry.card):
        return PolicyInfo(
            name=entry.name,
            version=entry.version,
            kind="heuristic",
            domain=entry.domain or "unknown",
            loaded=False,
            description=f"refused: {entry.reason}: {entry.message}",
            card=entry.card,
            owner=entry.owner,
        )
    if entry.heuristic is not None:
        return PolicyInfo(
            name=entry.name,
            version=entry.version,
            kind="heuristic",
            domain=entry.domain or "unknown",
            loaded=True,
            description=f"decides as the heuristic {entry.heuristic!r} (a heuristic card)",
            sha256=entry.sha256,
            card=entry.card,
            owner=entry.owner,
            heuristic=entry.heuristic,
        )
    return PolicyInfo(
        name=entry.name,
        version=entry.version,
        kind="onnx",
        domain=entry.domain or "unknown",
        loaded=entry.loaded,
        description=None if entry.loaded else f"refused: {entry.reason}: {entry.message}",
        sha256=entry.sha256,
        card=entry.card,
        owner=entry.owner,
    )


class InvalidSnapshotError(Exception):
    """The snapshot itself is inconsistent: the caller sent it (422), no policy is to blame."""

    def __init__(self, field_: str, message: str) -> None:
        super().__init__(f"{field_}: {message}")
        self.field = field_
        self.message = message


def split_policy(name: str) -> tuple[str, str | None]:
    base, _, version = name.partition("@")
    return base.strip().lower(), (version or None)


def _names_heuristic(name: str) -> bool:
    """``name`` is a heuristic (``f1``, ``F1@1``): the per-request check, without listing every
    policy (:meth:`DecisionService.get_policy`)."""
    base, version = split_policy(name)
    return base in HEURISTIC_CLASSES and (version is None or version == HEURISTIC_VERSION)


def _check_shape(
    job: Job, alloc: Allocation, finished: frozenset[str], problems: list[str]
) -> None:
    """Dependencies, task count and single-node of one allocation."""
    if job.depends_on and any(d not in finished for d in job.depends_on):
        problems.append(f"job {job.id!r} has unfinished dependencies")
    placements = alloc.placements
    total = 0
    nonpositive = False
    for p in placements:
        total += p.tasks
        nonpositive = nonpositive or p.tasks < 1
    if total != job.tasks or nonpositive:
        problems.append(f"job {job.id!r}: placements do not hold exactly {job.tasks} tasks")
    if job.single_node and len(placements) > 1 and len({p.node_id for p in placements}) > 1:
        problems.append(f"job {job.id!r} is single-node but spans nodes")


def check_decision(state: ClusterState, decision: Decision) -> list[str]:
    """Invariant violations of ``decision`` on ``state`` (empty when safe to apply).

    Runs on every decision the pipeline returns (a worker's reply crossed a process boundary),
    so it is written for speed: one pass over the placements, capacity checked only on the
    nodes that receive tasks.
    """
    problems: list[str] = []
    allocations = decision.allocations
    if not allocations:
        return problems
    pending = {j.id: j for j in state.pending}
    nodes = {n.id: n for n in state.nodes}
    finished = state.finished
    added: dict[str, dict[str, float]] = {}
    seen: set[str] = set()
    for alloc in allocations:
        job = pending.get(alloc.job_id)
        if job is None or alloc.job_id in seen:
            problems.append(f"job {alloc.job_id!r} is not pending or allocated twice")
            continue
        seen.add(alloc.job_id)
        _check_shape(job, alloc, finished, problems)
        per_task = job.per_task.items()
        for p in alloc.placements:
            node = nodes.get(p.node_id)
            if node is None or node.state != "up":
                problems.append(f"job {job.id!r} placed on unavailable node {p.node_id!r}")
                continue
            grown = added.get(p.node_id)
            if grown is None:
                grown = added[p.node_id] = {}
            for name, d in per_task:
                grown[name] = grown.get(name, 0.0) + d * p.tasks
    for node_id, grown in added.items():
        node = nodes[node_id]
        cap = node.capacity
        before = node.allocated
        for name, extra in grown.items():
            b = float(before.get(name, 0.0))
            a = b + extra
            c = float(cap.get(name, 0.0))
            if a > b + FIT_EPS and a > c + FIT_EPS * max(1.0, c):
                problems.append(f"node {node_id!r} over capacity on {name}")
    return problems


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why :class:`DecisionGate` would refuse a decision: ``reason`` (``limit``), the label of
    ``kairos_admission_refused_total``, and the message for the caller."""

    reason: str
    message: str


class DecisionGate:
    """Admission to the decisions of one process (ADR 0024).

    Past ``limit`` decisions at once the next is refused at once (429 ``overloaded``,
    ``Retry-After``) instead of queueing behind work that already misses its deadlines: a
    refused caller retries on another replica or a little later, and the admitted ones keep
    their latency. Only the event loop touches the gate.
    """

    #: seconds a refused caller is told to wait
    RETRY_AFTER_S = 1

    def __init__(self, limit: int, *, retry_after_s: int = RETRY_AFTER_S) -> None:
        if retry_after_s < 1:
            raise ValueError(f"retry_after_s must be at least 1 ({retry_after_s})")
        #: 0: no limit
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.in_flight = 0
        #: decisions refused since start, by reason
        self.refused: dict[str, int] = {"limit": 0}
        #: called with the reason of each refusal (the metrics' counter)
        self.on_refused: Callable[[str], None] | None = None

    def refusal(self) -> Refusal | None:
        """Why a decision arriving now would be refused, or None; counts nothing."""
        if self.limit and self.in_flight >= self.limit:
            return Refusal(
                "limit",
                f"this replica is already working on {self.in_flight} decisions, its limit "
                "(KAIROS_MAX_DECISIONS_IN_FLIGHT)",
            )
        return None

    def refuse(self, refusal: Refusal) -> TooManyRequestsError:
        """Count ``refusal`` and give the error that answers it (429 ``overloaded``)."""
        self.refused[refusal.reason] += 1
        if self.on_refused is not None:
            self.on_refused(refusal.reason)
        return TooManyRequestsError(
            f"{refusal.message}; retry after Retry-After seconds",
            code="overloaded",
            headers={"Retry-After": str(self.retry_after_s)},
        )

    def check(self) -> None:
        """Raise :class:`TooManyRequestsError` if a decision arriving now would be refused
        (counted as refused)."""
        refusal = self.refusal()
        if refusal is not None:
            raise self.refuse(refusal)

    @contextlib.contextmanager
    def admit(self) -> Iterator[None]:
        """Count one decision in flight for its duration (refused as :meth:`check` says)."""
        self.check()
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1


def gate_from_settings(settings: Settings) -> DecisionGate:
    """The admission gate ``KAIROS_MAX_DECISIONS_IN_FLIGHT`` and ``KAIROS_RETRY_AFTER_S``
    describe."""
    return DecisionGate(settings.MAX_DECISIONS_IN_FLIGHT, retry_after_s=settings.RETRY_AFTER_S)


class DecisionService:
    """Computes decisions; one instance per process, built in ``lifespan``.

    The pipeline (ONNX runtime, fallback chain, micro-batcher, Redis workers) decides;
    ``decide``, ``policies``, ``get_policy``, ``knows`` and ``health`` are the interface the API
    and services rely on; the catalogue is per tenant (ADR 0088).
    """

    def __init__(
        self,
        *,
        default_deadline_s: float,
        pipeline: DecisionPipeline,
        max_threads: int = 4,
        gate: DecisionGate | None = None,
    ) -> None:
        self.default_deadline_s = default_deadline_s
        #: admission to this process's decisions (default: no limit)
        self.gate = gate if gate is not None else DecisionGate(0)
        self._limiter = anyio.CapacityLimiter(max_threads)
        self._observers: list[Callable[[DecisionOutcome], None]] = []
        #: the decision pipeline (ONNX models, batching, Redis)
        self.pipeline = pipeline
        #: the catalogue of the registry's last generation seen
        self._policies: _Catalogue | None = None

    async def start(self) -> None:
        """Load policies, connect transports."""
        await self.pipeline.start()

    async def close(self) -> None:
        """Release what ``start`` acquired."""
        await self.pipeline.close()

    def add_observer(self, observer: Callable[[DecisionOutcome], None]) -> None:
        """Called with every outcome (metrics)."""
        self._observers.append(observer)

    # -- catalogue -----------------------------------------------------------------------------
    #
    # A tenant sees, and may decide with, the heuristics, the shipped models and its own uploads
    # (``tenant`` None: the first two only); another tenant's upload is unknown to it (ADR 0088).

    def _catalogue(self) -> _Catalogue:
        # asked on every decide (``knows``): rebuilt only when the registry changed
        generation = self.pipeline.registry.generation
        cached = self._policies
        if cached is None or cached.generation != generation:
            infos = self._list_policies()
            by_name: dict[str, list[PolicyInfo]] = {}
            for info in infos:
                by_name.setdefault(info.name.lower(), []).append(info)
            cached = self._policies = _Catalogue(generation, infos, by_name)
        return cached

    def _list_policies(self) -> list[PolicyInfo]:
        heuristics = [
            PolicyInfo(
                name=name,
                version=HEURISTIC_VERSION,
                kind="heuristic",
                domain="any",
                loaded=True,
                description=HEURISTIC_DESCRIPTIONS[name],
                heuristic=name,
            )
            for name in HEURISTIC_CLASSES
        ]
        return heuristics + [_info(e) for e in self.pipeline.registry.entries()]

    def policies(self, tenant: str | None) -> list[PolicyInfo]:
        """The policies ``tenant`` may see: heuristics, shipped models, its own uploads."""
        owner = "" if tenant is None else owner_of(tenant)
        return [i for i in self._catalogue().infos if i.owner in ("", owner)]

    def get_policy(self, name: str, tenant: str | None) -> PolicyInfo | None:
        """The policy ``name`` (``name@version``; any case) means to ``tenant``; without a version
        the newest loaded (else newest) version, as the registry resolves it."""
        base, version = split_policy(name)
        owner = "" if tenant is None else owner_of(tenant)
        matches = [
            i
            for i in self._catalogue().by_name.get(base, ())
            if i.owner in ("", owner) and (version is None or i.version == version)
        ]
        if not matches:
            return None
        first = min(matches, key=_preference(name.partition("@")[0].strip()))
        if version is not None:
            return first
        same = [
            i for i in matches if (i.owner, i.name, i.kind) == (first.owner, first.name, first.kind)
        ]
        pool = [i for i in same if i.loaded] or same
        return max(pool, key=lambda i: version_key(i.version))

    def resolve_spec(self, name: str, tenant: str | None) -> str:
        """The spec the decision pipeline resolves for ``name`` as ``tenant`` means it: a
        heuristic's or shipped model's name as it is spelt on disk, an upload's qualified
        (``<owner>:<name>[@<version>]``). A name ``tenant`` does not know stays as it is (the
        pipeline falls back: ``model_missing``); one holding the qualifier's separator, which no
        caller may write, is made one that can name nothing."""
        if _names_heuristic(name):
            return name
        info = self.get_policy(name, tenant)
        if info is None or info.builtin_heuristic:
            return name.replace(OWNER_SEP, "%3A")
        has_version = "@" in name
        return qualified(info.owner, f"{info.name}@{info.version}" if has_version else info.name)

    def _reserved(self) -> frozenset[str]:
        return frozenset(name.lower() for name in HEURISTIC_CLASSES)

    async def prepare_policy(self, model: bytes, card: bytes, *, tenant: str) -> PreparedModel:
        """Validate an upload of ``tenant`` in memory (``POST /v1/policies``); nothing is written.

        Raises ``app.policy.onnx_policy.PolicyRefusedError`` (with its reason),
        ``app.policy.registry.ReservedNameError`` (a heuristic's or shipped model's name) or
        ``app.policy.registry.ModelExistsError``.
        """
        registry = self.pipeline.registry
        return await anyio.to_thread.run_sync(
            lambda: registry.prepare(model, card, tenant=tenant, reserved=self._reserved())
        )

    async def commit_policy(self, prepared: PreparedModel, *, tenant: str) -> PolicyInfo:
        """Store a prepared upload; ``ModelExistsError`` if its name@version appeared since."""
        entry = await anyio.to_thread.run_sync(self.pipeline.registry.commit, prepared)
        info = self.get_policy(f"{entry.name}@{entry.version}", tenant)
        assert info is not None
        return info

    async def install_policy(self, model: bytes, card: bytes, *, tenant: str) -> PolicyInfo:
        """:meth:`prepare_policy` then :meth:`commit_policy`."""
        prepared = await self.prepare_policy(model, card, tenant=tenant)
        return await self.commit_policy(prepared, tenant=tenant)

    def knows(self, name: str, tenant: str | None) -> bool:
        return _names_heuristic(name) or self.get_policy(name, tenant) is not None

    def is_heuristic(self, name: str) -> bool:
        if _names_heuristic(name):  # a heuristic name always decides as the heuristic
            return True
        info = self.get_policy(name, None)
        return info is not None and info.builtin_heuristic

    def health(self) -> dict[str, Health]:
        """``queue`` and ``policies`` parts of ``/readyz``."""
        return {"queue": self.pipeline.queue_health(), "policies": "ok"}

    # -- deciding ------------------------------------------------------------------------------

    def _resolve(self, name: str) -> Policy | None:
        base, version = split_policy(name)
        try:
            policy = get_heuristic(base)
        except UnknownHeuristicError:
            return None
        if version is not None and version != policy.ref.version:
            return None
        return policy

    async def decide(
        self,
        state: ClusterState,
        spec: DecisionSpec,
        *,
        request_id: str,
        deadline_s: float | None = None,
    ) -> DecisionOutcome:
        """Decide ``state`` with ``spec.policy``, falling back to ``spec.fallback``.

        ``request_id`` identifies the request end to end (the pipeline's idempotency key).
        Raises :class:`InvalidSnapshotError` for an inconsistent snapshot and
        :class:`TooManyRequestsError` when this process is at its limit (nothing is decided).
        """
        deadline = self.default_deadline_s if deadline_s is None else deadline_s
        with self.gate.admit():
            return await self._decide(state, spec, request_id, deadline)

    async def _decide(
        self,
        state: ClusterState,
        spec: DecisionSpec,
        request_id: str,
        deadline_s: float | None,
    ) -> DecisionOutcome:
        started = time.perf_counter()
        try:
            validate_snapshot(state)
        except DomainError as exc:
            field_ = getattr(exc, "field", "snapshot")
            raise InvalidSnapshotError(str(field_), getattr(exc, "message", str(exc))) from exc
        config = DecisionConfig(
            backfill=spec.backfill, placement=spec.placement, explain=spec.explain
        )
        deadline = self.default_deadline_s if deadline_s is None else deadline_s
        outcome = await self._via_pipeline(state, spec, config, deadline, request_id)
        outcome = replace(outcome, latency_ms=(time.perf_counter() - started) * 1000.0)
        for observer in self._observers:
            observer(outcome)
        return outcome

    async def decide_request(self, request: DecisionRequest) -> DecisionOutcome:
        """A gpu or dag round's request (its snapshot validated at the boundary), through the
        pipeline; an error answer is replaced by the domain's fallback decided here. The
        outcome always holds a decision."""
        outcome = await self.pipeline.decide(request)
        if outcome.decision is None:
            logger.error(
                "%s request %s: the pipeline answered %s",
                request.domain,
                request.request_id,
                outcome.error,
            )
            outcome = await anyio.to_thread.run_sync(
                fallback_for, request, FallbackReason.POLICY_ERROR, outcome.error
            )
            if outcome.decision is None:
                raise RuntimeError(
                    f"the {request.domain} fallback could not decide: {outcome.error}"
                )
        return outcome

    async def _via_pipeline(
        self,
        state: ClusterState,
        spec: DecisionSpec,
        config: DecisionConfig,
        deadline_s: float,
        request_id: str,
    ) -> DecisionOutcome:
        """The pipeline decides (ONNX or heuristic, batched, maybe on a worker; ADR 0042); an
        error or a decision that breaks an invariant is replaced by the fallback's here."""
        shadow_name = spec.shadow_policy
        result = await self.pipeline.decide(
            DecisionRequest(
                request_id=request_id,
                state=state,
                config=config,
                policy=self.resolve_spec(spec.policy, spec.tenant),
                fallback=spec.fallback,
                shadow=None if shadow_name is None else self.resolve_spec(shadow_name, spec.tenant),
                deadline=time.time() + deadline_s,
            )
        )
        reason, detail = result.fallback_reason, result.fallback_detail
        decision: Decision | None = result.decision
        if decision is None:
            logger.error("request %s: %s: %s", request_id, result.error_type, result.error)
            reason, detail = FallbackReason.POLICY_ERROR, result.error
        elif problems := check_decision(state, decision):
            logger.error(
                "request %s: %s broke invariants: %s", request_id, decision.policy.name, problems
            )
            reason, detail, decision = FallbackReason.INVALID_DECISION, "; ".join(problems), None
        if decision is None:
            decision = await self._fallback(state, spec.fallback, config, request_id)
        shadow = None
        if shadow_name is not None and result.shadow is not None:
            # stored under the name the cluster gave, not the registry's qualified spec
            shadow = replace(result.shadow, policy=shadow_name)
        return DecisionOutcome(
            request_id=request_id,
            decision=decision,
            fallback_used=reason is not None,
            fallback_reason=reason,
            fallback_detail=detail,
            shadow=shadow,
            batch_size=result.batch_size,
        )

    async def _fallback(
        self, state: ClusterState, name: str, config: DecisionConfig, request_id: str
    ) -> Decision:
        policy = self._resolve(name) or get_heuristic(DEFAULT_FALLBACK)
        return await run_fallback(
            lambda: decide(state, policy, config),
            check=lambda d: check_decision(state, d),
            empty=lambda: Decision((), (), len(state.pending), policy.ref),
            label=f"{name} on {request_id}",
            limiter=self._limiter,
        )


def allocations_json(allocations: Sequence[Allocation]) -> list[dict[str, Any]]:
    return [
        {
            "job_id": a.job_id,
            "placements": [{"node_id": p.node_id, "tasks": p.tasks} for p in a.placements],
        }
        for a in allocations
    ]
