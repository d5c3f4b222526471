"""The HPC domain bound to the :class:`~app.kernel.domain.Domain` protocol."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from app.domains.hpc import codec
from app.domains.hpc.decision import DecisionConfig, decide, validate_snapshot
from app.domains.hpc.encoding import FEATURE_SCHEMA_VERSION
from app.domains.hpc.heuristics import HEURISTIC_CLASSES, get_heuristic
from app.domains.hpc.policy import OrderingPolicy, RankingPolicy, SteppingPolicy
from app.domains.hpc.types import Backfill, ClusterState, Decision, PlacementStrategy

__all__ = ["DOMAIN", "HpcDomain"]

HpcPolicy = OrderingPolicy | RankingPolicy | SteppingPolicy


@dataclass(frozen=True, slots=True)
class HpcDomain:
    name: str = "hpc"
    feature_schema_version: str = FEATURE_SCHEMA_VERSION
    default_fallback: str = "f1"

    def heuristic_names(self) -> tuple[str, ...]:
        return tuple(sorted(HEURISTIC_CLASSES))

    def heuristic(self, name: str) -> HpcPolicy:
        return get_heuristic(name)

    def validate(self, state: ClusterState) -> None:
        validate_snapshot(state)

    def decide(
        self, state: ClusterState, policy: HpcPolicy, config: DecisionConfig | None = None
    ) -> Decision:
        return decide(state, policy, config)

    def state_to_json(self, state: ClusterState) -> dict[str, Any]:
        return codec.state_to_json(state)

    def state_from_json(self, raw: Mapping[str, Any]) -> ClusterState:
        return codec.state_from_json(raw)

    def decision_to_json(self, decision: Decision) -> dict[str, Any]:
        return codec.decision_to_json(decision)

    def decision_from_json(self, raw: Mapping[str, Any]) -> Decision:
        return codec.decision_from_json(raw)

    def config_to_json(self, config: DecisionConfig) -> dict[str, Any]:
        return {
            "backfill": config.backfill.value,
            "placement": config.placement.value,
            "max_allocations": config.max_allocations,
            "explain": config.explain,
        }

    def config_from_json(self, raw: Mapping[str, Any]) -> DecisionConfig:
        limit = raw.get("max_allocations")
        return DecisionConfig(
            backfill=Backfill(raw["backfill"]),
            placement=PlacementStrategy(raw["placement"]),
            max_allocations=None if limit is None else codec.int_from_json(limit),
            explain=bool(raw.get("explain", False)),
        )


DOMAIN: Final = HpcDomain()
