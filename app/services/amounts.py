"""A node's capacity and a task's demand name a resource above zero (422 ``no_positive_amount``).

The schemas refuse an empty map (``NonZeroResources``); these checks refuse one whose amounts
are all zero, in the jobs and nodes routes and in ``/v1/decide`` snapshots. Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.schemas.decision import DecideRequest
from app.services.errors import ErrorItem, UnprocessableError

NO_POSITIVE_AMOUNT = "no_positive_amount"
#: At most this many problems are reported in one answer.
MAX_REPORTED = 100


def all_zero(amounts: Mapping[str, float]) -> bool:
    """No amount above zero (amounts are validated ``>= 0``)."""
    return not max(amounts.values(), default=0.0) > 0


def zero_amount_error(field: str) -> ErrorItem:
    return ErrorItem(field, "at least one resource needs a positive amount", NO_POSITIVE_AMOUNT)


def check_snapshot_amounts(body: DecideRequest) -> None:
    """422 for a snapshot node without capacity or a snapshot job without demand (field
    paths are built only for the maps at fault: this runs on every decide)."""
    problems = [
        zero_amount_error(f"body.nodes[{i}].capacity")
        for i, n in enumerate(body.nodes)
        if all_zero(n.capacity)
    ]
    problems += [
        zero_amount_error(f"body.pending[{i}].per_task")
        for i, j in enumerate(body.pending)
        if all_zero(j.per_task)
    ]
    problems += [
        zero_amount_error(f"body.running[{i}].job.per_task")
        for i, r in enumerate(body.running)
        if all_zero(r.job.per_task)
    ]
    if problems:
        raise UnprocessableError(
            "the snapshot has resources without any amount", details=problems[:MAX_REPORTED]
        )
