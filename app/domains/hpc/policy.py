"""The three kinds of policy the decision loop (``app.domains.hpc.decision``) can drive.

* :class:`OrderingPolicy` — a queue-order heuristic: it ranks the eligible jobs once per decision
  (``now`` is fixed within a decision, so the order is too).
* :class:`RankingPolicy` — a learned scorer used as an order (ADR 0065): it sees the decision's
  first :class:`StepView` (the whole queue, the free resources), scores every candidate once, and
  the decision walks that order exactly as it walks a heuristic's.  One inference per decision.
* :class:`SteppingPolicy` — a learned policy: at every step of the decision it sees a
  :class:`StepView` (the candidates, their feasibility mask, the free resources, the reservation)
  and picks one candidate.  Step-synchronous batching drives many :class:`DecisionRun` objects
  at once and scores all their views with one inference.

A pick is always an index into ``view.candidates`` whose ``view.mask`` entry is true.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from app.domains.hpc.types import Job, Node, PolicyRef, Reservation, Resources

if TYPE_CHECKING:
    from app.domains.hpc.encoding import StepArrays


class Phase(StrEnum):
    #: choosing the next job to start, or to reserve if it does not fit now
    HEAD = "head"
    #: a reservation is held; only jobs that start now without delaying it are candidates
    BACKFILL = "backfill"


@dataclass(frozen=True, slots=True)
class StepView:
    """What a stepping policy sees at one step of one decision."""

    now: float
    phase: Phase
    nodes: tuple[Node, ...]
    #: free resources per node id at this step (capacity - allocated - this decision's picks);
    #: every node id of ``nodes`` is a key, and nodes that are not ``up`` map to ``{}`` (all zero)
    free: Mapping[str, Resources]
    #: total capacity of the nodes that can take work (state ``up``)
    schedulable_capacity: Resources
    #: eligible pending jobs not yet allocated in this decision, in FCFS order (submit time, then
    #: id); indices are per view (a job allocated at one step is gone from the next view).
    #: Unschedulable jobs and, in BACKFILL, the reserved job stay listed with ``mask`` false.
    candidates: tuple[Job, ...]
    #: ``mask[i]`` is true when ``candidates[i]`` may be picked now: in HEAD every schedulable
    #: candidate (picking one that does not fit reserves it); in BACKFILL only the jobs that can
    #: start now without delaying the reservation
    mask: tuple[bool, ...]
    #: ``fits_now[i]`` is true when ``candidates[i]`` can be placed on the free resources now
    fits_now: tuple[bool, ...]
    reservation: Reservation | None
    resource_names: tuple[str, ...]
    #: optional per-candidate arrays precomputed by :class:`~app.domains.hpc.decision.DecisionRun`
    #: for
    #: the encoder (same values as reading the jobs); views built elsewhere leave it ``None``.
    #: Not part of equality.
    arrays: StepArrays | None = field(default=None, compare=False, repr=False)


@runtime_checkable
class OrderingPolicy(Protocol):
    @property
    def ref(self) -> PolicyRef: ...

    def order(self, jobs: Sequence[Job], now: float) -> list[Job]:
        """Return ``jobs`` best-first; ties break by submit time, then id."""
        ...


@runtime_checkable
class RankingPolicy(Protocol):
    @property
    def ref(self) -> PolicyRef: ...

    def rank(self, view: StepView) -> list[int]:
        """Indices into ``view.candidates`` (mask true), best first; ties by FCFS order.

        ``view`` is the decision's first view (phase HEAD, no reservation).
        """
        ...


@runtime_checkable
class SteppingPolicy(Protocol):
    @property
    def ref(self) -> PolicyRef: ...

    def pick(self, view: StepView) -> int:
        """Return the index of one candidate whose mask entry is true."""
        ...


Policy = OrderingPolicy | RankingPolicy | SteppingPolicy
