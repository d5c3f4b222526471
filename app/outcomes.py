"""The decision vocabulary: what is asked of the decision pipeline and what it answers.

One definition for every layer that carries a decision: the fallback chain
(:mod:`app.policy.selector`), the transport (:mod:`app.batching`: micro-batcher, Redis wire
codec) and the service (:mod:`app.services.decision`). Pure data: no I/O, no policy.

* :class:`DecisionRequest`: a snapshot, the policies to decide it with and the deadline.
* :class:`DecisionOutcome`: the answer for one request: a decision (``None`` only when the
  request itself is bad, ``error`` then says why), who decided it, whether and why the fallback
  did (:class:`FallbackReason`), and the shadow policy's :class:`ShadowOutcome`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from app.domains.hpc.decision import DecisionConfig
from app.domains.hpc.domain import DOMAIN
from app.domains.hpc.types import Allocation, ClusterState, Decision, PolicyRef

#: the fallback heuristic of a request that names none, and the last resort when the named one
#: is unknown: the HPC domain's default
DEFAULT_FALLBACK: str = DOMAIN.default_fallback
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
    state: ClusterState
    config: DecisionConfig = field(default_factory=DecisionConfig)
    policy: str = DEFAULT_FALLBACK
    fallback: str = DEFAULT_FALLBACK
    shadow: str | None = None
    #: absolute deadline on the clock of the process that decides (``time.time`` by default)
    deadline: float | None = None


@dataclass(frozen=True, slots=True)
class ShadowOutcome:
    """The shadow policy's decision of the same snapshot: stored, never applied; ``None`` with
    ``reason`` when the shadow could not decide (a shadow never falls back)."""

    policy: str
    decision: Decision | None
    reason: str | None = None

    @property
    def allocations(self) -> tuple[Allocation, ...]:
        return () if self.decision is None else self.decision.allocations


@dataclass(frozen=True, slots=True)
class DecisionOutcome:
    request_id: str
    #: ``None`` only with ``error`` set (the request itself is bad); the service never returns
    #: an outcome without a decision
    decision: Decision | None
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

    @property
    def policy(self) -> PolicyRef:
        """Who decided: the primary, or the fallback when ``fallback_used``."""
        if self.decision is None:
            raise ValueError(f"request {self.request_id!r} has no decision: {self.error}")
        return self.decision.policy


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
    "FallbackReason",
    "ShadowOutcome",
    "Wanted",
]
