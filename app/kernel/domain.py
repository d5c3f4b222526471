"""The :class:`Domain` protocol: what the service, ``kairos evaluate`` and training need from a
scheduling domain, written once against it.

A domain binds its own state, configuration and decision types; the service layer sees them only
through this protocol and the domain's codec (JSON in, JSON out).  Invariants every domain keeps:

* ``decide`` is pure and deterministic (ties by submit time, then id);
* ``validate`` raises :class:`~app.kernel.errors.SnapshotError` before any decision on a snapshot
  that breaks the domain's invariants, and never after;
* ``state_from_json(state_to_json(s)) == s`` and the same for decisions (the stored input of a
  decision replays it) and for round configurations (a worker decides what the API asked).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

__all__ = ["Domain"]

StateT = TypeVar("StateT")
ConfigT = TypeVar("ConfigT")
DecisionT = TypeVar("DecisionT")
PolicyT = TypeVar("PolicyT")


class Domain(Protocol[StateT, ConfigT, DecisionT, PolicyT]):
    """A scheduling domain (``hpc``, ...): a package under :mod:`app.domains`."""

    #: the name a cluster declares (``"domain": "hpc"``)
    name: str
    #: the feature schema its encoder writes; a policy's card must name the same
    feature_schema_version: str
    #: the heuristic every decision falls back to
    default_fallback: str

    def heuristic_names(self) -> tuple[str, ...]:
        """Every heuristic of the domain's library, sorted."""
        ...

    def heuristic(self, name: str) -> PolicyT:
        """The heuristic ``name`` (:class:`~app.kernel.errors.UnknownHeuristicError` if none)."""
        ...

    def validate(self, state: StateT) -> None:
        """Raise :class:`~app.kernel.errors.SnapshotError` on a snapshot that cannot be decided."""
        ...

    def decide(self, state: StateT, policy: PolicyT, config: ConfigT | None = None) -> DecisionT:
        """One scheduling round."""
        ...

    def state_to_json(self, state: StateT) -> dict[str, Any]: ...

    def state_from_json(self, raw: Mapping[str, Any]) -> StateT: ...

    def decision_to_json(self, decision: DecisionT) -> dict[str, Any]: ...

    def decision_from_json(self, raw: Mapping[str, Any]) -> DecisionT: ...

    def config_to_json(self, config: ConfigT) -> dict[str, Any]:
        """The round configuration's JSON form (the batching wire carries it to a worker)."""
        ...

    def config_from_json(self, raw: Mapping[str, Any]) -> ConfigT: ...
