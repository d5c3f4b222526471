"""A request's deadline as a budget for its own decision, not for its wait in a queue.

A :class:`~app.outcomes.DecisionRequest` carries an absolute deadline, set when the request
entered the pipeline. Behind a busy decision thread (or worker) it may wait in a queue for a
while; counting that wait against the deadline would hand the request to the fallback for
having queued, although the fallback waits in the same queue and costs what the learned
policy's walk costs. So the transport turns the deadline into a budget when it queues the
request (:func:`budget_of`) and back into a deadline when the request's batch starts
(:func:`started`): the primary policy has the whole budget from the batch's start, plus the
time the batch spends on the request's batch-mates (``shared_s``: a batch decides its members
one after the other around one shared inference, so a member's own work starts only after
theirs). A budget still binds a primary policy that is slow on its own snapshot: the decision
falls back when that one request's work would not fit.

The wait itself stays bounded by the transport: a request whose batch has not started within
the pipeline's queue bound (``start_by``), or whose requester would stop waiting first, is
decided by the fallback (``deadline_exceeded``) as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from app.outcomes import DecisionRequest


@dataclass(frozen=True, slots=True)
class Budgeted:
    """A queued request and the seconds its primary policy has once its batch starts
    (``None``: no deadline)."""

    request: DecisionRequest
    budget_s: float | None
    #: the latest batch start that still gets the whole budget (``None``: any); a later start
    #: keeps the deadline ``start_by + budget_s``, since the requester waits no longer than that
    start_by: float | None = None


def budget_of(request: DecisionRequest, now: float) -> float | None:
    """Seconds left of ``request``'s deadline at ``now`` (``None`` without a deadline)."""
    if request.deadline is None:
        return None
    return max(0.0, request.deadline - now)


def deadline_from(item: Budgeted, started_at: float, shared_s: float = 0.0) -> float | None:
    """The deadline of ``item`` whose batch started at ``started_at`` and spends ``shared_s``
    on its other members; never past ``start_by + budget_s``, when its requester stops
    waiting."""
    if item.budget_s is None:
        return item.request.deadline
    deadline = started_at + item.budget_s + max(0.0, shared_s)
    if item.start_by is not None:
        deadline = min(deadline, item.start_by + item.budget_s)
    return deadline


def started(
    items: Sequence[Budgeted], started_at: float, shared_s: float = 0.0
) -> list[DecisionRequest]:
    """The requests of a batch that started at ``started_at`` and spends ``shared_s`` on each
    member's batch-mates, each with its deadline from :func:`deadline_from`."""
    out: list[DecisionRequest] = []
    for item in items:
        deadline = deadline_from(item, started_at, shared_s)
        request = item.request
        out.append(request if deadline == request.deadline else replace(request, deadline=deadline))
    return out
