"""Every domain's decision of a batch of requests, written once against the request's ``domain``.

:func:`decide_requests` is the handler of the in-process batcher and of ``kairos worker``: it
splits a batch by domain and hands each part to that domain's decider. The HPC part is decided
step-synchronously by :func:`app.policy.selector.decide_many` (one inference scores every request
of the batch at each step); a ``gpu`` or ``dag`` request is decided on its own, through the same
fallback chain:

* the primary policy (a heuristic of the domain's library, or the registry's model of that
  domain) decides unless the request's deadline (less ``fallback_reserve_s``) has passed; a
  model that is missing, refused or of another domain, that raises, that refuses its pick, that
  answers after the deadline or whose decision breaks an invariant gives way to the fallback
  heuristic, with the :class:`~app.outcomes.FallbackReason` and a detail;
* the fallback heuristic runs without a deadline; a fallback decision that breaks an invariant
  (a bug in the domain) is replaced by the domain's empty decision: nothing unsafe is answered;
* a shadow policy decides the same snapshot after it; it never falls back (a failing shadow is
  recorded as ``None`` with its reason) and is never answered as the decision;
* the snapshot was validated where the request came in (the service answers a 422 naming the
  field), once: a decider trusts it, and the decision check guards whatever is answered; a
  snapshot on which even the fallback raises is an error outcome for that request only.

The request's deadline bounds its primary, heuristic or model; a service that trusts a
heuristic to answer in time sends none (the GPU rounds, for a heuristic primary). Synchronous and
CPU-bound: call it from a thread (the batcher and the worker do).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

from app.domains.dag import heuristics as dag_heuristics
from app.domains.dag.domain import DOMAIN as DAG
from app.domains.dag.explain import Explainer, check_decision, stage_ids_of
from app.domains.dag.policy import DagPolicy
from app.domains.dag.types import DagClusterState, DagConfig, DagDecision
from app.domains.gpu import heuristics as gpu_heuristics
from app.domains.gpu.domain import DOMAIN as GPU
from app.domains.gpu.types import ClusterSnapshot, GpuDecision
from app.domains.gpu.validation import InvalidDecisionError, validate_decision
from app.domains.hpc.heuristics import HEURISTIC_CLASSES
from app.kernel.errors import InvalidPickError
from app.kernel.types import PolicyRef
from app.outcomes import (
    ABANDONED,
    DecisionOutcome,
    DecisionRequest,
    Deliver,
    FallbackReason,
    ShadowOutcome,
    Wanted,
)
from app.policy import selector
from app.policy.registry import PolicyRegistry

__all__ = [
    "batches_nothing",
    "cells",
    "decide_requests",
    "fallback_for",
    "heuristics_only",
]

logger = logging.getLogger(__name__)

#: how many invariant problems a fallback detail quotes
_PROBLEMS_QUOTED: Final = 5


def _base(name: str) -> str:
    return name.partition("@")[0].strip().lower()


def _error(request: DecisionRequest, exc: Exception) -> DecisionOutcome:
    return DecisionOutcome(
        request.request_id,
        None,
        error=str(exc),
        error_type=type(exc).__name__,
        domain=request.domain,
    )


@dataclass(frozen=True, slots=True)
class _Primary:
    """A resolved primary: a runnable policy and who it is, or why there is none."""

    policy: Any = None
    ref: PolicyRef | None = None
    reason: FallbackReason | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class _Ran:
    decision: Any
    explanation: list[dict[str, Any]] | None = None


class _Decider(Protocol):
    """One domain's part of the chain (its policies, its decision run, its invariants)."""

    def resolve(self, request: DecisionRequest, registry: PolicyRegistry | None) -> _Primary: ...

    def fallback_policy(self, request: DecisionRequest) -> tuple[Any, PolicyRef]: ...

    def run(self, request: DecisionRequest, policy: Any) -> _Ran: ...

    def problems(self, request: DecisionRequest, decision: Any) -> list[str]: ...

    def empty(self, request: DecisionRequest, ref: PolicyRef) -> _Ran: ...

    def classify(self, exc: Exception) -> FallbackReason: ...

    def cells(self, request: DecisionRequest) -> int: ...

    def is_heuristic(self, name: str) -> bool: ...


# -- gpu -------------------------------------------------------------------------------------------


class _Gpu:
    def resolve(self, request: DecisionRequest, registry: PolicyRegistry | None) -> _Primary:
        """A learned policy scores every running job (each is kept or preempted by its score)
        and the model's window of pending candidates beyond them."""
        base = _base(request.policy)
        if self.is_heuristic(base):
            h = gpu_heuristics.get_heuristic(base)
            return _Primary(h, h.ref)
        entry = None if registry is None else registry.find_or_load(request.policy)
        if entry is None:
            return _Primary(
                reason=FallbackReason.MODEL_MISSING,
                detail=f"no model {request.policy!r} is installed",
            )
        if entry.domain != GPU.name:
            return _Primary(
                reason=FallbackReason.MODEL_REFUSED,
                detail=f"{request.policy!r} decides {entry.domain or 'hpc'} clusters",
            )
        if entry.gpu is None:
            return _Primary(
                reason=FallbackReason.MODEL_REFUSED, detail=entry.message or "refused at load"
            )
        state: ClusterSnapshot = request.state
        running = sum(1 for j in state.jobs if j.running)
        model = entry.gpu
        policy = model.policy(model.window + running if running else None)
        return _Primary(policy, policy.ref)

    def fallback_policy(self, request: DecisionRequest) -> tuple[Any, PolicyRef]:
        base = _base(request.fallback)
        if not self.is_heuristic(base):
            base = GPU.default_fallback
        h = gpu_heuristics.get_heuristic(base)
        return h, h.ref

    def run(self, request: DecisionRequest, policy: Any) -> _Ran:
        return _Ran(GPU.decide(request.state, policy, request.config))

    def problems(self, request: DecisionRequest, decision: Any) -> list[str]:
        try:
            validate_decision(request.state, decision)
        except InvalidDecisionError as exc:
            return [str(exc)]
        return []

    def empty(self, request: DecisionRequest, ref: PolicyRef) -> _Ran:
        del request
        return _Ran(GpuDecision(policy=ref))

    def classify(self, exc: Exception) -> FallbackReason:
        if type(exc).__name__ == "PolicyOutputError":
            if "non-finite" in str(exc):
                return FallbackReason.NON_FINITE_OUTPUT
            return FallbackReason.INVALID_OUTPUT
        if isinstance(exc, InvalidPickError):
            return FallbackReason.INVALID_PICK
        return FallbackReason.INFERENCE_ERROR

    def cells(self, request: DecisionRequest) -> int:
        state: ClusterSnapshot = request.state
        return max(1, len(state.jobs)) * max(1, len(state.nodes))

    def is_heuristic(self, name: str) -> bool:
        return _base(name) in gpu_heuristics.heuristic_names()


# -- dag -------------------------------------------------------------------------------------------


class _Dag:
    def _heuristic(self, name: str, config: DagConfig) -> tuple[DagPolicy, PolicyRef]:
        base = _base(name)
        if base == "weighted_fair" and config.alpha != 0.0:
            policy = dag_heuristics.get_heuristic(f"weighted_fair({config.alpha!r})")
            policy.name = "weighted_fair"
        else:
            policy = dag_heuristics.get_heuristic(base)
        return policy, PolicyRef(base, dag_heuristics.HEURISTIC_VERSION, "heuristic")

    def resolve(self, request: DecisionRequest, registry: PolicyRegistry | None) -> _Primary:
        if self.is_heuristic(request.policy):
            policy, ref = self._heuristic(request.policy, request.config)
            return _Primary(policy, ref)
        entry = None if registry is None else registry.find_or_load(request.policy)
        if entry is None or (entry.dag is None and entry.domain != DAG.name):
            return _Primary(reason=FallbackReason.MODEL_MISSING, detail=request.policy)
        if entry.dag is None:
            return _Primary(
                reason=FallbackReason.MODEL_REFUSED, detail=f"{entry.reason}: {entry.message}"
            )
        # a fresh policy per decision (it holds its sampling generator); the session is shared
        return _Primary(entry.dag.policy(), PolicyRef(entry.name, entry.version, "onnx"))

    def fallback_policy(self, request: DecisionRequest) -> tuple[Any, PolicyRef]:
        name = request.fallback if self.is_heuristic(request.fallback) else DAG.default_fallback
        return self._heuristic(name, request.config)

    def run(self, request: DecisionRequest, policy: Any) -> _Ran:
        state: DagClusterState = request.state
        config: DagConfig = request.config
        explainer = Explainer(policy, stage_ids_of(state)) if config.explain else None
        decision = DAG.decide(state, explainer or policy)
        return _Ran(decision, None if explainer is None else explainer.steps)

    def problems(self, request: DecisionRequest, decision: Any) -> list[str]:
        return check_decision(request.state, decision)

    def empty(self, request: DecisionRequest, ref: PolicyRef) -> _Ran:
        state: DagClusterState = request.state
        config: DagConfig = request.config
        return _Ran(DagDecision(ref.name, (), (), state.free_slots), [] if config.explain else None)

    def classify(self, exc: Exception) -> FallbackReason:
        if isinstance(exc, InvalidPickError):
            return FallbackReason.INVALID_PICK
        return FallbackReason.INFERENCE_ERROR

    def cells(self, request: DecisionRequest) -> int:
        state: DagClusterState = request.state
        stages = sum(len(d.spec.stages) for d in state.dags)
        return max(1, stages) * max(1, state.free_slots)

    def is_heuristic(self, name: str) -> bool:
        return _base(name) in dag_heuristics.HEURISTIC_NAMES


_DECIDERS: Final[dict[str, _Decider]] = {GPU.name: _Gpu(), DAG.name: _Dag()}


# -- the chain -------------------------------------------------------------------------------------


def _decide_one(
    request: DecisionRequest,
    decider: _Decider,
    registry: PolicyRegistry | None,
    clock: Callable[[], float],
    reserve_s: float,
) -> DecisionOutcome:
    outcome = _chain(request, decider, registry, clock, reserve_s)
    if request.shadow is None:
        return outcome
    return replace(outcome, shadow=_shadow(request, request.shadow, decider, registry))


def _shadow(
    request: DecisionRequest, name: str, decider: _Decider, registry: PolicyRegistry | None
) -> ShadowOutcome:
    """The shadow policy's decision of the same snapshot: never a fallback, never applied."""
    shadow = decider.resolve(replace(request, policy=name), registry)
    if shadow.policy is None:
        return ShadowOutcome(name, None, shadow.detail or "unavailable")
    try:
        ran = decider.run(request, shadow.policy)
    except Exception as exc:
        logger.warning("%s shadow policy %s failed: %r", request.domain, name, exc)
        return ShadowOutcome(name, None, f"{type(exc).__name__}: {exc}")
    problems = decider.problems(request, ran.decision)
    if problems:
        return ShadowOutcome(name, None, "; ".join(problems[:_PROBLEMS_QUOTED]))
    return ShadowOutcome(name, ran.decision)


def _chain(
    request: DecisionRequest,
    decider: _Decider,
    registry: PolicyRegistry | None,
    clock: Callable[[], float],
    reserve_s: float,
) -> DecisionOutcome:
    primary = decider.resolve(request, registry)
    reason, detail = primary.reason, primary.detail
    if primary.policy is not None:
        assert primary.ref is not None
        deadline = request.deadline
        if deadline is not None and clock() + reserve_s > deadline:
            reason, detail = FallbackReason.DEADLINE_EXCEEDED, "no time left for the primary"
        else:
            try:
                ran = decider.run(request, primary.policy)
            except Exception as exc:
                logger.warning(
                    "%s policy %s failed, the fallback decides: %r",
                    request.domain,
                    request.policy,
                    exc,
                )
                reason, detail = decider.classify(exc), f"{type(exc).__name__}: {exc}"
            else:
                problems = decider.problems(request, ran.decision)
                if deadline is not None and clock() > deadline:
                    reason = FallbackReason.DEADLINE_EXCEEDED
                    detail = "the primary answered after the deadline"
                elif problems:
                    logger.error("policy %s broke invariants: %s", request.policy, problems)
                    reason = FallbackReason.INVALID_DECISION
                    detail = "; ".join(problems[:_PROBLEMS_QUOTED])
                else:
                    return DecisionOutcome(
                        request.request_id,
                        ran.decision,
                        decided_by=primary.ref,
                        explanation=ran.explanation,
                        domain=request.domain,
                    )
    return _fallback(request, decider, reason, detail)


def _fallback(
    request: DecisionRequest,
    decider: _Decider,
    reason: FallbackReason | None,
    detail: str | None,
) -> DecisionOutcome:
    try:
        policy, ref = decider.fallback_policy(request)
        ran = decider.run(request, policy)
        problems = decider.problems(request, ran.decision)
        if problems:
            logger.error("fallback %s broke invariants: %s", ref.name, problems)
            ran = decider.empty(request, ref)
    except Exception as exc:  # the snapshot itself is bad
        return _error(request, exc)
    return DecisionOutcome(
        request.request_id,
        ran.decision,
        fallback_used=True,
        fallback_reason=reason,
        fallback_detail=detail,
        decided_by=ref,
        explanation=ran.explanation,
        domain=request.domain,
    )


def fallback_for(
    request: DecisionRequest, reason: FallbackReason, detail: str | None
) -> DecisionOutcome:
    """The fallback heuristic's outcome for ``request`` of any domain (an error outcome if the
    snapshot is bad)."""
    decider = _DECIDERS.get(request.domain)
    if decider is None:
        return selector.fallback_outcome(request, reason, detail)
    return _fallback(request, decider, reason, detail)


def cells(request: DecisionRequest) -> int:
    """The size of ``request``'s snapshot in (candidate, node) pairs, for choosing where it is
    decided (on the event loop, in a thread)."""
    decider = _DECIDERS.get(request.domain)
    if decider is None:
        state = request.state
        return max(1, len(state.pending) + len(state.running)) * max(1, len(state.nodes))
    return decider.cells(request)


def batches_nothing(request: DecisionRequest) -> bool:
    """True when ``request`` shares no inference with others: a domain decided request by
    request, or an HPC request whose policies are all heuristics."""
    return request.domain in _DECIDERS or heuristics_only(request)


def heuristics_only(request: DecisionRequest) -> bool:
    """True when no policy of ``request`` is a model (nothing to run off the event loop for
    inference's sake)."""
    decider = _DECIDERS.get(request.domain)
    if decider is not None:
        return decider.is_heuristic(request.policy) and (
            request.shadow is None or decider.is_heuristic(request.shadow)
        )
    return _is_hpc_heuristic(request.policy) and (
        request.shadow is None or _is_hpc_heuristic(request.shadow)
    )


def _is_hpc_heuristic(name: str) -> bool:
    return name.strip().lower() in HEURISTIC_CLASSES


def _always(_index: int) -> bool:
    return True


def decide_requests(
    requests: Sequence[DecisionRequest],
    registry: PolicyRegistry | None,
    *,
    clock: Callable[[], float] = time.time,
    fallback_reserve_s: float = selector.DEFAULT_FALLBACK_RESERVE_S,
    wanted: Wanted | None = None,
    deliver: Deliver | None = None,
) -> list[DecisionOutcome]:
    """Decide every request of any mix of domains, in order; ``wanted`` and ``deliver`` as in
    :func:`~app.policy.selector.decide_many`. Never raises for one request's fault."""
    hpc = [i for i, r in enumerate(requests) if r.domain not in _DECIDERS]
    if len(hpc) == len(requests):  # an HPC batch: its indices are the batch's own
        return selector.decide_many(
            requests,
            registry,
            clock=clock,
            fallback_reserve_s=fallback_reserve_s,
            wanted=wanted,
            deliver=deliver,
        )
    outcomes: list[DecisionOutcome | None] = [None] * len(requests)
    if hpc:
        part = [requests[i] for i in hpc]
        part_wanted = None if wanted is None else (lambda k: wanted(hpc[k]))
        part_deliver = None if deliver is None else (lambda k, o: deliver(hpc[k], o))
        for i, outcome in zip(
            hpc,
            selector.decide_many(
                part,
                registry,
                clock=clock,
                fallback_reserve_s=fallback_reserve_s,
                wanted=part_wanted,
                deliver=part_deliver,
            ),
            strict=True,
        ):
            outcomes[i] = outcome
    is_wanted = wanted or _always
    for i, request in enumerate(requests):
        decider = _DECIDERS.get(request.domain)
        if decider is None:
            continue
        if not is_wanted(i):
            outcomes[i] = DecisionOutcome(
                request.request_id,
                None,
                error="the caller gave up before this request was decided",
                error_type=ABANDONED,
                domain=request.domain,
            )
            continue
        try:
            outcome = _decide_one(request, decider, registry, clock, fallback_reserve_s)
        except Exception as exc:  # isolate this request from its batch-mates
            logger.exception("%s request %s failed", request.domain, request.request_id)
            outcome = _error(request, exc)
        outcomes[i] = outcome
        if deliver is not None:
            deliver(i, outcome)
    assert all(o is not None for o in outcomes)
    return [o for o in outcomes if o is not None]
