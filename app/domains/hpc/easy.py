"""The EASY backfilling rules of one scheduling round (ADR 0010, ADR 0093), over a resource model.

This module is the only statement of the rules; the resource arithmetic comes from a
:class:`ResourceModel`: the per-node matrix of :class:`app.domains.hpc.decision.DecisionRun`
(any cluster) or the node counts of :class:`app.domains.hpc.pooled.PooledMachine` (a homogeneous
machine of whole-node jobs, the trace simulator's machine).

* **HEAD** (:meth:`EasyRound.head`): the picked job starts if it can be placed now.  Otherwise,
  unless it can never start, it is *reserved* at its earliest start, the *shadow time*
  (:meth:`ResourceModel.reserve`).  With ``Backfill.NONE`` the round stops there (head-of-line
  blocking); with ``Backfill.EASY`` it enters the BACKFILL phase.  Exactly one reservation.
* **BACKFILL** (:meth:`EasyRound.backfill_placement`): a job may start now if it can be placed now
  and either

  - **rule (a)**: it ends (``now + walltime``) at or before the shadow time, or
  - **rule (b)**: the reserved job can still be placed at the shadow time with the backfilled
    job's placement held there (:meth:`ResourceModel.holds`).

  A job started by rule (b) keeps its placement at the shadow time (:meth:`ResourceModel.hold`).

:meth:`EasyRound.walk` drives a round with a fixed order (ordering and ranking policies);
:func:`backfill_mask` is the same BACKFILL test for every candidate of a stepping view.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from app.domains.hpc.policy import Phase
from app.domains.hpc.types import Backfill

J = TypeVar("J")
P = TypeVar("P")
J_contra = TypeVar("J_contra", contravariant=True)

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

__all__ = ["EasyRound", "ResourceModel", "backfill_mask"]


class ResourceModel(Protocol[J_contra, P]):
    """The resource arithmetic under the rules: ``J`` is a job handle, ``P`` a placement.

    Free resources only shrink within a round (jobs start, none ends).
    """

    #: a job refused in BACKFILL stays refused for the rest of the round (then the walk never
    #: retries it); false when another placement of it may suit the reservation later
    monotone: bool

    def place_now(self, job: J_contra) -> P | None:
        """Where ``job`` would start on the free resources now, or ``None``."""
        ...

    def can_start(self, job: J_contra) -> bool:
        """False when ``job`` can never start (it is then never reserved)."""
        ...

    def reserve(self, job: J_contra) -> float:
        """Reserve ``job`` (which does not fit now): its shadow time; the model keeps the
        resources free at that time for :meth:`holds` and :meth:`hold`."""
        ...

    def ends(self, job: J_contra) -> float:
        """``now + walltime`` of ``job``."""
        ...

    def holds(self, job: J_contra, placement: P) -> bool:
        """Rule (b): the reserved job can still be placed at the shadow time with ``placement``
        of ``job`` held there."""
        ...

    def start(self, job: J_contra, placement: P) -> bool:
        """Start ``job`` on ``placement`` now; False when the round can start nothing more."""
        ...

    def can_start_any(self) -> bool:
        """False when no job of the round can start now (a model may always say True)."""
        ...

    def hold(self, job: J_contra, placement: P) -> None:
        """``job`` (started, ending after the shadow time) holds ``placement`` at that time."""
        ...


class EasyRound(Generic[J, P]):
    """One round's phase, reservation and stop flag; every pick goes through the rules here."""

    __slots__ = ("easy", "model", "phase", "reserved", "shadow", "stopped")

    def __init__(self, model: ResourceModel[J, P], backfill: Backfill) -> None:
        self.model = model
        self.easy = backfill == Backfill.EASY
        self.phase = Phase.HEAD
        self.reserved: J | None = None
        #: the shadow time (the reserved job's start); meaningful once ``reserved`` is set
        self.shadow = 0.0
        self.stopped = False

    def reset(self) -> None:
        """A new round on the model's current resources (phase HEAD, no reservation)."""
        self.phase = Phase.HEAD
        self.reserved = None
        self.shadow = 0.0
        self.stopped = False

    # ------------------------------------------------------------------ the rules

    def head(self, job: J) -> bool:
        """HEAD phase: start ``job`` now, or reserve it at its shadow time.  True if it started."""
        model = self.model
        placement = model.place_now(job)
        if placement is not None:
            if not model.start(job, placement):
                self.stopped = True
            return True
        if model.can_start(job):  # never reserve a job that can never start
            self.shadow = model.reserve(job)
            self.reserved = job
            if self.easy:
                self.phase = Phase.BACKFILL
                if not model.can_start_any():
                    self.stopped = True  # nothing can backfill
            else:
                self.stopped = True  # Backfill.NONE: head-of-line blocking
        return False

    def backfill(self, job: J) -> bool:
        """BACKFILL phase: start ``job`` if the rules allow it.  True if it started."""
        placement = self.model.place_now(job)
        return placement is not None and self._backfill_on(job, placement)

    def _backfill_on(self, job: J, placement: P) -> bool:
        """:meth:`backfill` of a job that can be placed now on ``placement``."""
        model = self.model
        by_shadow = model.ends(job) <= self.shadow  # rule (a): done by the shadow time
        if not by_shadow and not model.holds(job, placement):  # rule (b): reservation fits
            return False
        if not model.start(job, placement):
            self.stopped = True
        if not by_shadow:  # started by rule (b): it holds its placement at the shadow time
            model.hold(job, placement)
        return True

    def backfill_placement(self, job: J) -> P | None:
        """The test of :meth:`backfill` without the start: ``job``'s placement if it may start
        now, else ``None``."""
        model = self.model
        placement = model.place_now(job)
        if placement is None:
            return None
        if model.ends(job) <= self.shadow or model.holds(job, placement):  # rule (a) or (b)
            return placement
        return None

    def pick(self, job: J) -> bool:
        """Apply one pick in the current phase.  True if the job started."""
        if self.phase == Phase.HEAD:
            return self.head(job)
        return self.backfill(job)

    # ------------------------------------------------------------------ a fixed order

    def walk(self, order: Iterable[J]) -> None:
        """Drive the round with a fixed order, then stop.

        Equivalent to a stepping policy that always picks the first allowed job of ``order``.
        Free resources only shrink, so a job that does not fit now never will; on a model that
        is not :attr:`~ResourceModel.monotone`, a job that fits but would delay the reservation
        may become allowed once other jobs have taken some nodes, so those are retried, in
        order, after every backfill.
        """
        model = self.model
        deferred: list[J] | None = None if model.monotone else []
        head, place_now, backfill_on = self.head, model.place_now, self._backfill_on
        for job in order:
            if self.stopped:
                break
            if self.phase is Phase.HEAD:
                head(job)
                continue
            placement = place_now(job)
            if placement is None:
                continue  # it will not fit again in this round
            if backfill_on(job, placement):
                if deferred:
                    self._retry(deferred)
            elif deferred is not None:
                deferred.append(job)
        self.stopped = True

    def _retry(self, deferred: list[J]) -> None:
        """After a backfill: start the first deferred job that is now allowed, repeatedly."""
        model = self.model
        i = 0
        while i < len(deferred) and not self.stopped:
            job = deferred[i]
            if model.place_now(job) is None:
                del deferred[i]  # will never fit again in this round
            elif self.backfill(job):
                del deferred[i]
                i = 0  # resources changed: earlier deferred jobs come first
            else:
                i += 1


def backfill_mask(
    fits: BoolArray,
    ends: FloatArray,
    shadow: float | FloatArray,
    holds: Callable[[int], bool] | BoolArray,
) -> BoolArray:
    """The BACKFILL test of every candidate at once: ``fits`` (placeable now, not the reserved
    job) and rule (a) ``ends <= shadow``, or else rule (b) ``holds(i)`` (the model's
    :meth:`ResourceModel.holds` of candidate ``i`` with its placement now; an array: that test
    of every candidate, made by the model)."""
    if not callable(holds):
        return fits & ((ends <= shadow) | holds)
    mask = fits.copy()
    for i in np.flatnonzero(mask & ~(ends <= shadow)).tolist():  # rule (a) fails: rule (b)
        mask[i] = holds(i)
    return mask
