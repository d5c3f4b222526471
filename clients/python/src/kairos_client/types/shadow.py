from __future__ import annotations

from pydantic import Field

from kairos_client._models import BaseModel


class ShadowPolicyStats(BaseModel):
    """Agreement of one shadow policy with the deciding policy over the decision log."""

    shadow_policy: str
    compared: int
    agreed: int
    agreement_rate: float | None = None
    jobs_primary_only: int
    """Jobs the deciding policy started that the shadow would not have."""
    jobs_shadow_only: int
    """Jobs the shadow would have started that the deciding policy did not."""


class ShadowReport(BaseModel):
    """How often a cluster's shadow policy would have started the same jobs (shadow mode)."""

    cluster_id: str
    shadow_policy: str | None = None
    decisions: int
    compared: int
    agreed: int
    agreement_rate: float | None = None
    policies: list[ShadowPolicyStats] = Field(default_factory=list[ShadowPolicyStats])
