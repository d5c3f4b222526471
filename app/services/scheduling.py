"""Scheduling rounds, written once for every domain: ``POST /v1/clusters/{id}/schedule``
(stateful) and ``POST /v1/decide`` (stateless).

A stateful round is one transaction (opened and committed by the request boundary): lock the
cluster (Postgres: ``SELECT ... FOR NO KEY UPDATE`` on the cluster row; SQLite: the write
transaction is ``BEGIN IMMEDIATE`` behind a per-process lock), then hand the locked record to the
round of the cluster's domain (:func:`app.services.rounds.round_function`), which loads the
snapshot, decides, stores the decision and applies it in that transaction. ``/v1/decide`` hands
the validated body to its domain's ``decide_snapshot``. This module names no domain: the import
contracts forbid it.
"""

from __future__ import annotations

from typing import Any

from app.db.decision_writer import DecisionWriter
from app.schemas.decision import DecisionRead, ScheduleRequest
from app.services.clusters import require_cluster
from app.services.context import Ctx
from app.services.decision import DecisionService
from app.services.rounds import decide_function, round_function
from app.settings import Settings

__all__ = ["decide_snapshot", "schedule_cluster"]


async def schedule_cluster(
    ctx: Ctx,
    cluster_id: str,
    body: ScheduleRequest,
    *,
    decisions: DecisionService,
    settings: Settings,
    request_id: str | None = None,
) -> DecisionRead:
    """One round on ``cluster_id``, by its domain's round, with the cluster locked."""
    cluster = await require_cluster(ctx, cluster_id, lock=True)
    run_round = round_function(cluster.domain)
    return await run_round(
        ctx, cluster, body, decisions=decisions, settings=settings, request_id=request_id
    )


async def decide_snapshot(
    tenant: str,
    body: Any,
    *,
    domain: str,
    decisions: DecisionService,
    writer: DecisionWriter,
    settings: Settings,
    request_id: str | None = None,
    store: bool = True,
) -> DecisionRead:
    """Decide the validated ``/v1/decide`` body of ``domain``'s snapshot shape."""
    decide = decide_function(domain)
    return await decide(
        tenant,
        body,
        decisions=decisions,
        writer=writer,
        settings=settings,
        request_id=request_id,
        store=store,
    )
