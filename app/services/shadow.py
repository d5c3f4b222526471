"""``GET /v1/clusters/{id}/shadow-report``: how often the shadow policy agrees with the primary.

Agreement is per decision: the shadow would have started exactly the same set of jobs (placements
may differ).  Counts come from the decision log (``shadow_policy``/``shadow_allocations``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from app.db.orm import DecisionRecord
from app.schemas.common import ReadSchema
from app.services.clusters import require_cluster
from app.services.context import Ctx


class ShadowPolicyStats(ReadSchema):
    shadow_policy: str
    compared: int
    agreed: int
    agreement_rate: float | None
    #: jobs the primary started that the shadow would not have, and the reverse
    jobs_primary_only: int
    jobs_shadow_only: int


class ShadowReport(ReadSchema):
    cluster_id: str
    #: the cluster's current shadow policy (None: shadow mode off)
    shadow_policy: str | None
    decisions: int
    compared: int
    agreed: int
    agreement_rate: float | None
    policies: list[ShadowPolicyStats]


def _job_ids(allocations: list[Any] | None) -> set[str]:
    return {str(a["job_id"]) for a in allocations or []}


async def shadow_report(ctx: Ctx, cluster_id: str) -> ShadowReport:
    cluster = await require_cluster(ctx, cluster_id)
    stmt = select(
        DecisionRecord.allocations, DecisionRecord.shadow_policy, DecisionRecord.shadow_allocations
    ).where(DecisionRecord.tenant == ctx.tenant, DecisionRecord.cluster_pk == cluster.pk)
    rows = (await ctx.session.execute(stmt)).all()
    stats: dict[str, list[int]] = {}  # policy -> [compared, agreed, primary_only, shadow_only]
    for allocations, shadow_policy, shadow_allocations in rows:
        if shadow_policy is None or shadow_allocations is None:
            continue
        primary, shadow = _job_ids(allocations), _job_ids(shadow_allocations)
        s = stats.setdefault(shadow_policy, [0, 0, 0, 0])
        s[0] += 1
        s[1] += primary == shadow
        s[2] += len(primary - shadow)
        s[3] += len(shadow - primary)
    per_policy = [
        ShadowPolicyStats(
            shadow_policy=name,
            compared=c,
            agreed=a,
            agreement_rate=a / c if c else None,
            jobs_primary_only=p,
            jobs_shadow_only=q,
        )
        for name, (c, a, p, q) in sorted(stats.items())
    ]
    compared = sum(p.compared for p in per_policy)
    agreed = sum(p.agreed for p in per_policy)
    return ShadowReport(
        cluster_id=cluster.id,
        shadow_policy=cluster.shadow_policy,
        decisions=len(rows),
        compared=compared,
        agreed=agreed,
        agreement_rate=agreed / compared if compared else None,
        policies=per_policy,
    )
