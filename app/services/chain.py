"""The fallback step of the HPC service's last guard (:mod:`app.services.decision`): a decision
the pipeline answered that breaks an invariant is replaced by the fallback heuristic's, off the
event loop; a fallback decision that breaks an invariant too (a bug in the domain) is replaced by
the domain's empty decision, which is always safe to apply. No decision that breaks an invariant
reaches the database.

The chain itself (the primary within its deadline, then the fallback) runs where the pipeline
decides, for every domain: :mod:`app.policy.selector` (HPC) and :mod:`app.policy.deciders`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

import anyio
import anyio.to_thread

__all__ = ["run_fallback"]

logger = logging.getLogger(__name__)

D = TypeVar("D")

#: how many invariant problems a fallback detail quotes
_PROBLEMS_QUOTED = 5


async def run_fallback(
    run: Callable[[], D],
    *,
    check: Callable[[D], Sequence[str]],
    empty: Callable[[], D],
    label: str,
    limiter: anyio.CapacityLimiter | None = None,
) -> D:
    """The fallback heuristic's decision (a worker thread of ``limiter``, no deadline);
    ``empty()`` when it breaks an invariant."""
    decision = await anyio.to_thread.run_sync(run, limiter=limiter, abandon_on_cancel=True)
    problems = check(decision)
    if problems:
        logger.error("fallback %s broke invariants: %s", label, problems)
        return empty()
    return decision
