"""The decision vocabulary: what is asked of the decision pipeline and what it answers.

One definition for every layer that carries a decision: the fallback chain
(:mod:`app.policy.selector`), the transport (:mod:`app.batching`: micro-batcher, Redis wire
codec) and the service (:mod:`app.services.decision`). Pure data: no I/O, no policy.

* :class:`DecisionRequest`: a domain's snapshot and round configuration, the policies to decide
  it with and the deadline.
* :class:`DecisionOutcome`: the answer for one request: a decision (``None`` only when the
  request itself is bad, ``error`` then says why), who decided it, whether and why the fallback
  did (:class:`FallbackReason`), and the shadow policy's :class:`ShadowOutcome`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.domains import DEFAULT_DOMAIN
from app.domains.hpc.decision import DecisionConfig
from app.domains.hpc.domain import DOMAIN
from app.kernel.types import PolicyRef

#: the fallback heuristic of a request that names none, and the last resort when the named one
#: is unknown: the HPC domain's default
DEFAULT_FALLBACK: str = DOMAIN.default_fallback

#: A domain's cluster snapshot, round configuration and decision, as its package defines them
#: (``hpc``: ``ClusterState``, ``DecisionConfig``, ``Decision``; ``gpu``: ``ClusterSnapshot``,
#: ``GpuConfig``, ``GpuDecision``; ``dag``: ``DagClusterState``, ``DagConfig``,
#: ``DagDecision``). The transport carries them without looking inside; each layer that does
#: look is that domain's own code, reached by the request's ``domain``.
DomainState = Any
DomainConfig = Any
DomainDecision = Any
#: ``error_type`` of the outcome of a request dropped because its caller gave up
ABANDONED = "RequestAbandoned"


class FallbackReason(StrEnum):
    """Why the fallback heuristic decided instead of the primary policy (ADR 0042)."""

    #: no policy of that name (or version) is known to the process that decided
    MODEL_MISSING = "model_missing"
    #: the model is known but was refused at load (its reason is in the detail)
    MODEL_REFUSED = "model_refused"
    #: inference raised
    INFERENCE_ERROR = "inference_error"
    #: inference returned the wrong shape or type
    INVALID_OUTPUT = "invalid_output"
    #: a logit is NaN or infinite where the mask is true
    NON_FINITE_OUTPUT = "non_finite_output"
    #: every candidate is masked
    ALL_MASKED = "all_masked"
    #: the decision loop refused the policy's pick
    INVALID_PICK = "invalid_pick"
    #: the primary would not answer before the request's deadline
    DEADLINE_EXCEEDED = "deadline_exceeded"
    #: the pipeline answered with an error instead of a decision
    POLICY_ERROR = "policy_error"
    #: the primary's decision broke an invariant (over-allocation, duplicate job, ...)
    INVALID_DECISION = "invalid_decision"


@dataclass(frozen=True, slots=True)
class DecisionRequest:
    request_id: str
    #: the ``domain``'s snapshot
    state: DomainState
    #: the ``domain``'s round configuration (the HPC default when the domain is ``hpc``)
    config: DomainConfig = field(default_factory=DecisionConfig)
    policy: str = DEFAULT_FALLBACK
    fallback: str = DEFAULT_FALLBACK
    shadow: str | None = None
    #: absolute deadline on the clock of the process that decides (``time.time`` by default)
    deadline: float | None = None
    #: the scheduling domain (:mod:`app.domains`) of ``state``, ``config`` and the policies
    domain: str = DEFAULT_DOMAIN


@dataclass(frozen=True, slots=True)
class ShadowOutcome:
    """The shadow policy's decision of the same snapshot: stored, never applied; ``None`` with
    ``reason`` when the shadow could not decide (a shadow never falls back)."""

    policy: str
    decision: DomainDecision | None
    reason: str | None = None

    @property
    def allocations(self) -> tuple[Any, ...]:
        return () if self.decision is None else tuple(self.decision.allocations)


@dataclass(frozen=True, slots=True)
class DecisionOutcome:
    request_id: str
    #: the request's domain's decision; ``None`` only with ``error`` set (the request itself
    #: is bad); the service never returns an outcome without a decision
    decision: DomainDecision | None
    fallback_used: bool = False
    fallback_reason: FallbackReason | None = None
    #: human detail for the fallback (e.g. the refusal message)
    fallback_detail: str | None = None
    shadow: ShadowOutcome | None = None
    #: set when the request itself is bad (no decision at all): ``"<ErrorClass>: message"``
    error: str | None = None
    error_type: str | None = None
    #: requests scored together in this request's inference batch (1 for heuristics)
    batch_size: int = 1
    #: the service's time for the whole decision, fallback included (0 inside the pipeline)
    latency_ms: float = 0.0
    #: who decided, for a domain whose decision does not name it as a :class:`PolicyRef`
    decided_by: PolicyRef | None = None
    #: per-step explanation records of a domain that keeps them beside its decision (``dag``)
    explanation: list[dict[str, Any]] | None = None
    #: the request's domain (the codec of ``decision``)
    domain: str = DEFAULT_DOMAIN

    @property
    def policy(self) -> PolicyRef:
        """Who decided: the primary, or the fallback when ``fallback_used``."""
        if self.decided_by is not None:
            return self.decided_by
        if self.decision is None:
            raise ValueError(f"request {self.request_id!r} has no decision: {self.error}")
        ref: PolicyRef = self.decision.policy
        return ref


#: ``wanted(i)``: is request ``i``'s caller still waiting? (see ``decide_many``)
Wanted = Callable[[int], bool]
#: ``deliver(i, outcome)``: answer request ``i`` now (see ``decide_many``)
Deliver = Callable[[int, DecisionOutcome], None]

__all__ = [
    "ABANDONED",
    "DEFAULT_FALLBACK",
    "DecisionOutcome",
    "DecisionRequest",
    "Deliver",
    "DomainConfig",
    "DomainDecision",
    "DomainState",
    "FallbackReason",
    "ShadowOutcome",
    "Wanted",
]
