"""Errors raised by the scheduling core.

Expected outcomes (a job that does not fit, an unschedulable job) are values in the
:class:`~app.domains.hpc.types.Decision`; these exceptions are for inputs the core refuses.
The service maps :class:`SnapshotError` to 422, :class:`UnknownHeuristicError` to 404/422 and
:class:`InvalidPickError` to a heuristic fallback.
"""

from __future__ import annotations


class DomainError(Exception):
    """Base class of every error the core raises on purpose."""


class SnapshotError(DomainError):
    """The cluster snapshot is inconsistent (over-allocated node, unknown node, duplicate id...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class InvalidPickError(DomainError):
    """A stepping policy picked an index that is out of range or masked out."""


class DecisionFinishedError(DomainError):
    """``apply``/``view`` called on a :class:`~app.domains.hpc.decision.DecisionRun` that is
    done."""


class UnknownHeuristicError(DomainError, KeyError):
    """No heuristic has this name."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        message = f"unknown heuristic {name!r}; known: {', '.join(known)}"
        super().__init__(message)
        self.name = name
        self.message = message

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message
