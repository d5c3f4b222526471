"""Which service runs a cluster's scheduling round: one round module per domain.

``POST /v1/clusters/{id}/schedule`` locks the cluster (:func:`app.services.scheduling.
schedule_cluster`) and, for a cluster whose domain is not ``hpc``, hands the locked record to that
domain's round function, which loads the domain's state, decides through the domain package
(``app.domains.<domain>``) and applies the decision in the same transaction.  The round modules
are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Final, Protocol, cast

from sqlalchemy.exc import IntegrityError

from app.db.orm import ClusterRecord, DecisionRecord
from app.db.repositories.decision_repository import DecisionRepository
from app.schemas.decision import DecisionRead, ScheduleRequest
from app.services.context import Ctx
from app.services.decision import DecisionService
from app.services.errors import ConflictError
from app.settings import Settings

__all__ = ["RoundFunction", "round_function", "store_decision"]

#: domain -> "module:function" of its round (hpc's is app.services.scheduling itself)
_ROUNDS: Final = {
    "gpu": "app.services.gpu_rounds:schedule_round",
    "dag": "app.services.dag_rounds:schedule_round",
}


class RoundFunction(Protocol):
    async def __call__(
        self,
        ctx: Ctx,
        cluster: ClusterRecord,
        body: ScheduleRequest,
        *,
        decisions: DecisionService,
        settings: Settings,
        request_id: str | None,
    ) -> DecisionRead:
        """One round on ``cluster`` (locked by the caller, inside the request's transaction)."""
        ...


def round_function(domain: str) -> RoundFunction:
    """The round of ``domain`` (:class:`ConflictError` when this build serves no such round)."""
    target = _ROUNDS.get(domain)
    if target is None:
        raise ConflictError(
            f"this service runs no scheduling round for {domain!r} clusters",
            code="domain_not_served",
        )
    module, _, name = target.partition(":")
    return cast(RoundFunction, getattr(importlib.import_module(module), name))


async def store_decision(ctx: Ctx, record: DecisionRecord) -> None:
    """Insert a round's decision (one core ``INSERT``, in a SAVEPOINT: a duplicate
    ``request_id`` is a 409 ``duplicate_request`` and leaves the transaction usable)."""
    try:
        async with ctx.session.begin_nested():
            await DecisionRepository(ctx.session).insert(record)
    except IntegrityError:
        raise ConflictError(
            f"request {record.request_id!r} was already decided", code="duplicate_request"
        ) from None
