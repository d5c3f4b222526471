"""The fallback chain, written once for every domain's round.

A round asks its primary policy first, then its fallback heuristic. The rules every domain keeps:

* the primary runs off the event loop, bounded by the deadline when one is given; a primary that
  raises, misses the deadline or answers a decision that breaks an invariant gives way to the
  fallback, with a :class:`~app.outcomes.FallbackReason` and a detail that say why;
* the fallback runs without a deadline; its decision is checked like the primary's, and one that
  breaks an invariant (a bug in the domain) is replaced by the domain's empty decision, which is
  always safe to apply. No decision that breaks an invariant reaches the database.

The domain supplies the runs, the invariant check (problems, empty when safe), the classification
of its own exceptions and the empty decision; the chain knows no domain.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio
import anyio.to_thread

from app.outcomes import FallbackReason

__all__ = ["PrimaryResult", "run_fallback", "run_primary"]

logger = logging.getLogger(__name__)

D = TypeVar("D")

#: how many invariant problems a fallback detail quotes
_PROBLEMS_QUOTED = 5


@dataclass(frozen=True, slots=True)
class PrimaryResult(Generic[D]):
    """The primary's decision, or ``None`` with the reason the fallback decides instead."""

    decision: D | None
    reason: FallbackReason | None = None
    detail: str | None = None


def inference_error(exc: Exception) -> FallbackReason:
    """The default classification of a primary's exception."""
    del exc
    return FallbackReason.INFERENCE_ERROR


async def run_primary(
    run: Callable[[], D],
    *,
    check: Callable[[D], Sequence[str]],
    deadline_s: float | None,
    classify: Callable[[Exception], FallbackReason] = inference_error,
    label: str,
) -> PrimaryResult[D]:
    """``run`` in a worker thread, within ``deadline_s`` (``None``: no deadline); its decision if
    ``check`` finds no problem, else ``None`` and why (``label`` names the policy in logs)."""
    try:
        if deadline_s is None:
            decision = await anyio.to_thread.run_sync(run)
        else:
            with anyio.fail_after(deadline_s):
                decision = await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
    except TimeoutError:
        assert deadline_s is not None
        return PrimaryResult(
            None, FallbackReason.DEADLINE_EXCEEDED, f"no answer in {deadline_s * 1000:.0f} ms"
        )
    except Exception as exc:
        logger.warning("policy %s failed, the fallback decides: %r", label, exc)
        return PrimaryResult(None, classify(exc), f"{type(exc).__name__}: {exc}")
    problems = check(decision)
    if problems:
        logger.error("policy %s broke invariants: %s", label, problems)
        return PrimaryResult(
            None, FallbackReason.INVALID_DECISION, "; ".join(problems[:_PROBLEMS_QUOTED])
        )
    return PrimaryResult(decision)


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
