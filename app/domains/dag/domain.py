"""The DAG domain (Decima / Graphene: jobs are DAGs of stages) bound to the
:class:`~app.kernel.domain.Domain` protocol."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from app.domains.dag import codec
from app.domains.dag.decision import decide
from app.domains.dag.heuristics import HEURISTIC_NAMES, get_heuristic
from app.domains.dag.policy import DagPolicy
from app.domains.dag.types import DagClusterState, DagConfig, DagDecision, validate_state
from app.kernel.errors import SnapshotError

__all__ = ["DOMAIN", "FEATURE_SCHEMA_VERSION", "DagDomain"]

FEATURE_SCHEMA_VERSION: Final = "dag-v1"


@dataclass(frozen=True, slots=True)
class DagDomain:
    name: str = "dag"
    feature_schema_version: str = FEATURE_SCHEMA_VERSION
    default_fallback: str = "fair"

    def heuristic_names(self) -> tuple[str, ...]:
        return tuple(sorted(HEURISTIC_NAMES))

    def heuristic(self, name: str) -> DagPolicy:
        return get_heuristic(name)

    def validate(self, state: DagClusterState) -> None:
        validate_state(state)

    def decide(
        self, state: DagClusterState, policy: DagPolicy, config: DagConfig | None = None
    ) -> DagDecision:
        """One round. ``config`` shapes how the service builds ``policy`` (weighted-fair's alpha)
        and what it records (explanations); the round itself needs none of it."""
        del config
        return decide(state, policy)

    def state_to_json(self, state: DagClusterState) -> dict[str, Any]:
        return codec.state_to_json(state)

    def state_from_json(self, raw: Mapping[str, Any]) -> DagClusterState:
        return codec.state_from_json(raw)

    def decision_to_json(self, decision: DagDecision) -> dict[str, Any]:
        return codec.decision_to_json(decision)

    def decision_from_json(self, raw: Mapping[str, Any]) -> DagDecision:
        return codec.decision_from_json(raw)

    def config_to_json(self, config: DagConfig) -> dict[str, Any]:
        return {"alpha": config.alpha, "explain": config.explain}

    def config_from_json(self, raw: Mapping[str, Any]) -> DagConfig:
        alpha = float(raw.get("alpha", 0.0))
        if not math.isfinite(alpha):
            raise SnapshotError("alpha", f"not a finite number: {alpha!r}")
        return DagConfig(alpha=alpha, explain=bool(raw.get("explain", False)))


DOMAIN: Final = DagDomain()
