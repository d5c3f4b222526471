"""A scheduling round, written once for every domain: the registry of the domains' round modules
and what the rounds share.

``POST /v1/clusters/{id}/schedule`` and ``POST /v1/decide`` are domain-agnostic
(:mod:`app.services.scheduling`): they lock the cluster or read the body's ``domain`` and hand it to
that domain's round module here (``hpc_rounds``, ``gpu_rounds``, ``dag_rounds``). A round module
is the only service code that imports its domain package: it loads the domain's state, decides
through ``app.domains.<domain>`` and stores the decision with the domain's codec, in the same
transaction as what it applies. The round modules are imported on first use. Shared here: the
decision and request ids, the stored decision's insert and the benchmarks' timing hook.
"""

from __future__ import annotations

import importlib
import logging
import uuid
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, Protocol, cast

from sqlalchemy.exc import IntegrityError

from app.db.decision_writer import DecisionWriter, DuplicateRequestError
from app.db.engine import backend_unavailable
from app.db.orm import ClusterRecord, DecisionRecord
from app.db.repositories.decision_repository import DecisionRepository
from app.kernel.clock import utc_now
from app.schemas.decision import DecisionRead, ScheduleRequest
from app.services.context import Ctx
from app.services.convert import decision_read
from app.services.decision import DecisionService
from app.services.errors import ConflictError, ErrorItem, UnprocessableError
from app.settings import Settings

__all__ = [
    "DecideFunction",
    "RoundFunction",
    "RoundTimings",
    "decide_function",
    "new_decision_id",
    "new_request_id",
    "round_function",
    "round_timings",
    "served_domains",
    "snapshot_error",
    "store_decision",
    "store_stateless",
]

logger = logging.getLogger(__name__)

#: domain -> the module of its rounds: ``schedule_round`` (a stateful round on a locked cluster)
#: and ``decide_snapshot`` (``/v1/decide``)
_ROUNDS: Final = {
    "hpc": "app.services.hpc_rounds",
    "gpu": "app.services.gpu_rounds",
    "dag": "app.services.dag_rounds",
}


def new_decision_id() -> str:
    return f"dec_{uuid.uuid4().hex}"


def new_request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


@dataclass(slots=True)
class RoundTimings:
    """Where one round's time went (filled when :data:`round_timings` holds one): reading the
    snapshot, deciding (the policy with its fallback chain), and storing the decision and its
    allocations; seconds."""

    load_s: float = 0.0
    decide_s: float = 0.0
    persist_s: float = 0.0


#: Set to a :class:`RoundTimings` to have the next round in this context fill it (benchmarks).
round_timings: ContextVar[RoundTimings | None] = ContextVar("kairos_round_timings", default=None)


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


class DecideFunction(Protocol):
    async def __call__(
        self,
        tenant: str,
        body: Any,
        *,
        decisions: DecisionService,
        writer: DecisionWriter,
        settings: Settings,
        request_id: str | None = None,
        store: bool = True,
    ) -> DecisionRead:
        """Decide the validated ``/v1/decide`` body of the domain's snapshot shape and store the
        decision (answered ``stored: false`` when it could not be stored)."""
        ...


def served_domains() -> tuple[str, ...]:
    """The domains this build runs rounds for."""
    return tuple(_ROUNDS)


def _module(domain: str) -> Any:
    target = _ROUNDS.get(domain)
    if target is None:
        raise ConflictError(
            f"this service runs no scheduling round for {domain!r} clusters",
            code="domain_not_served",
        )
    return importlib.import_module(target)


def round_function(domain: str) -> RoundFunction:
    """The stateful round of ``domain`` (:class:`ConflictError` when this build serves none)."""
    return cast(RoundFunction, _module(domain).schedule_round)


def decide_function(domain: str) -> DecideFunction:
    """The ``/v1/decide`` of ``domain`` (:class:`ConflictError` when this build serves none)."""
    return cast(DecideFunction, _module(domain).decide_snapshot)


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


async def store_stateless(
    record: DecisionRecord, *, writer: DecisionWriter, store: bool
) -> DecisionRead:
    """Store a ``/v1/decide`` decision through the group-commit writer (ADR 0026) and answer it.

    A duplicate ``request_id`` is a 409 ``duplicate_request``. When ``store`` is false (the
    request's ``Idempotency-Key`` could not be claimed) or the database cannot be reached, the
    decision is answered with ``stored: false``: it is not known to be in the log, and a retry can
    never make it two stored decisions for one key (ADR 0087)."""
    if store:
        try:
            await writer.add(record)
        except DuplicateRequestError:
            raise ConflictError(
                f"request {record.request_id!r} was already decided", code="duplicate_request"
            ) from None
        except Exception as exc:
            if not backend_unavailable(exc):
                raise
            logger.warning(
                "decision %s answered unstored: database unavailable: %r", record.id, exc
            )
        else:
            return decision_read(record)
    # a record that was never inserted has no created_at yet (the column's default is applied
    # on INSERT)
    record.created_at = record.created_at or utc_now()
    return decision_read(record).model_copy(update={"stored": False})


def snapshot_error(what: str, field: str, message: str) -> UnprocessableError:
    """The 422 ``invalid_snapshot`` of a snapshot that breaks its domain's invariants (``what``
    names the snapshot in the message), naming ``field`` as the request spells it."""
    return UnprocessableError(
        f"the {what} snapshot is inconsistent: {message}",
        code="invalid_snapshot",
        details=[ErrorItem(field, message, "invalid_snapshot")],
    )
