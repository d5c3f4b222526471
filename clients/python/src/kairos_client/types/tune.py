from __future__ import annotations

from typing import Any, Literal, TypeAlias

from kairos_client._models import BaseModel

TuneState: TypeAlias = Literal["queued", "running", "succeeded", "failed"]
TunePhase: TypeAlias = Literal["none", "shadow", "primary", "retired"]


class TuneProgress(BaseModel):
    fraction: float
    """In [0, 1], rising."""
    message: str


class ValidationRow(BaseModel):
    """One candidate on the tune's validation windows."""

    candidate: str
    kind: Literal["model", "heuristic"]
    avg_bsld: float
    """Mean over the validation windows of each window's average bounded slowdown."""
    ratio: float
    """``avg_bsld`` over the best heuristic's."""
    earlier_ratio: float | None = None
    score: float | None = None


class TuneResult(BaseModel):
    winner: str
    kind: Literal["model", "heuristic"]
    policy: str
    """The tenant policy registered (``name@version``), or the recommended heuristic."""
    recommendation: str | None = None
    """The heuristic the tune recommends, when one won (nothing is registered then)."""
    table: list[ValidationRow]
    card: dict[str, Any]


class TuneError(BaseModel):
    code: str
    message: str


class Tune(BaseModel):
    """A tuning of a cluster's policy from its own finished jobs."""

    id: str
    cluster_id: str
    state: TuneState
    phase: TunePhase
    """``shadow``: the result is the cluster's shadow policy; ``primary``: promoted."""
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    params: dict[str, Any]
    baseline_policy: str
    from_policy: str | None = None
    history_jobs: int | None = None
    progress: TuneProgress | None = None
    result: TuneResult | None = None
    error: TuneError | None = None
    """Why the tune failed (``state == "failed"``)."""


class PromotionGuard(BaseModel):
    passed: bool
    current_policy: str
    current_avg_bsld: float | None = None
    candidate_avg_bsld: float
    reason: str


class TunePromotion(BaseModel):
    tune: Tune
    policy: str
    """The cluster's primary policy now."""
    previous_policy: str
    forced: bool
    guard: PromotionGuard
