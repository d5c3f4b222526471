"""The GPU domain bound to the :class:`~app.kernel.domain.Domain` protocol."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from app.domains.gpu import codec
from app.domains.gpu.decide import decide
from app.domains.gpu.heuristics import (
    DEFAULT_FALLBACK,
    GpuConfig,
    GpuHeuristic,
    Placement,
    get_heuristic,
    heuristic_names,
)
from app.domains.gpu.types import ClusterSnapshot, GpuDecision
from app.domains.gpu.validation import validate_snapshot
from app.kernel.errors import SnapshotError

__all__ = ["DOMAIN", "FEATURE_SCHEMA_VERSION", "GpuDomain"]

#: the learned policy's feature schema (spec section 8.1), not yet encoded
FEATURE_SCHEMA_VERSION: Final = "gpu-v1"


@dataclass(frozen=True, slots=True)
class GpuDomain:
    name: str = "gpu"
    feature_schema_version: str = FEATURE_SCHEMA_VERSION
    default_fallback: str = DEFAULT_FALLBACK

    def heuristic_names(self) -> tuple[str, ...]:
        return heuristic_names()

    def heuristic(self, name: str) -> GpuHeuristic:
        return get_heuristic(name)

    def validate(self, state: ClusterSnapshot) -> None:
        validate_snapshot(state)

    def decide(
        self, state: ClusterSnapshot, policy: GpuHeuristic, config: GpuConfig | None = None
    ) -> GpuDecision:
        return decide(state, policy, config)

    def state_to_json(self, state: ClusterSnapshot) -> dict[str, Any]:
        return codec.state_to_json(state)

    def state_from_json(self, raw: Mapping[str, Any]) -> ClusterSnapshot:
        return codec.state_from_json(raw)

    def decision_to_json(self, decision: GpuDecision) -> dict[str, Any]:
        return codec.decision_to_json(decision)

    def decision_from_json(self, raw: Mapping[str, Any]) -> GpuDecision:
        return codec.decision_from_json(raw)

    def config_to_json(self, config: GpuConfig) -> dict[str, Any]:
        """The service's part of a round's configuration; a Gittins table or a step-time model
        (the simulator's) has no JSON form and is refused."""
        if config.gittins is not None or config.step_time is not None:
            raise ValueError(
                "a GpuConfig with a Gittins table or a step-time model has no JSON form"
            )
        return {
            "placement": config.placement.value,
            "las_thresholds": list(config.las_thresholds),
            "speedup_alpha": config.speedup_alpha,
        }

    def config_from_json(self, raw: Mapping[str, Any]) -> GpuConfig:
        thresholds = tuple(float(t) for t in raw.get("las_thresholds", ()))
        alpha = float(raw.get("speedup_alpha", GpuConfig().speedup_alpha))
        if not all(math.isfinite(v) for v in (*thresholds, alpha)):
            raise SnapshotError("las_thresholds", "not finite numbers")
        return GpuConfig(
            placement=Placement(raw["placement"]),
            las_thresholds=thresholds,
            speedup_alpha=alpha,
        )


DOMAIN: Final = GpuDomain()
