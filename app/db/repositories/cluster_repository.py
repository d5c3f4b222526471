"""Clusters, their totals, and the per-cluster lock that serialises state changes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import ClusterRecord, JobRecord, NodeRecord
from app.db.repositories.inserts import insert_missing
from app.db.repositories.pagination import PageResult, encode_cursor


class ClusterRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get(self, tenant: str, cluster_id: str) -> ClusterRecord | None:
        stmt = select(ClusterRecord).where(
            ClusterRecord.tenant == tenant, ClusterRecord.id == cluster_id
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def lock(self, tenant: str, cluster_id: str) -> ClusterRecord | None:
        """The cluster row, locked until the transaction ends (Postgres ``FOR NO KEY UPDATE``).

        Every change to node allocations or job states takes this lock first, so a schedule
        round sees a snapshot nobody else changes under it. ``NO KEY`` still lets other
        transactions insert jobs that reference the cluster. On SQLite the write transaction
        (``BEGIN IMMEDIATE``) already excludes other writers and ``FOR UPDATE`` is omitted.
        """
        stmt = (
            select(ClusterRecord)
            .where(ClusterRecord.tenant == tenant, ClusterRecord.id == cluster_id)
            .with_for_update(key_share=True)
            .execution_options(populate_existing=True)
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def create_if_absent(
        self, tenant: str, cluster_id: str, values: Mapping[str, Any]
    ) -> bool:
        """Insert the cluster unless (tenant, id) exists (also when another transaction is
        inserting it right now: this one waits and skips); True when this call created it.
        Follow with :meth:`lock` to get the row that won."""
        row = {**values, "tenant": tenant, "id": cluster_id}
        return bool(await insert_missing(self.session, ClusterRecord, [row], ("tenant", "id")))

    async def delete(self, record: ClusterRecord) -> None:
        await self.session.execute(delete(ClusterRecord).where(ClusterRecord.pk == record.pk))

    async def page(
        self, tenant: str, *, after_pk: int | None, limit: int
    ) -> PageResult[ClusterRecord]:
        stmt = select(ClusterRecord).where(ClusterRecord.tenant == tenant)
        if after_pk is not None:
            stmt = stmt.where(ClusterRecord.pk > after_pk)
        rows = list(
            (await self.session.execute(stmt.order_by(ClusterRecord.pk).limit(limit + 1))).scalars()
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return PageResult(rows, encode_cursor(rows[-1].pk) if more and rows else None)

    async def nodes_of(self, cluster_pks: Sequence[int]) -> dict[int, list[NodeRecord]]:
        out: dict[int, list[NodeRecord]] = defaultdict(list)
        if not cluster_pks:
            return out
        stmt = (
            select(NodeRecord).where(NodeRecord.cluster_pk.in_(cluster_pks)).order_by(NodeRecord.pk)
        )
        for node in (await self.session.execute(stmt)).scalars():
            out[node.cluster_pk].append(node)
        return out

    async def job_counts(self, cluster_pks: Sequence[int]) -> dict[int, dict[str, int]]:
        out: dict[int, dict[str, int]] = defaultdict(dict)
        if not cluster_pks:
            return out
        stmt = (
            select(JobRecord.cluster_pk, JobRecord.state, func.count())
            .where(JobRecord.cluster_pk.in_(cluster_pks))
            .group_by(JobRecord.cluster_pk, JobRecord.state)
        )
        for cluster_pk, state, count in (await self.session.execute(stmt)).all():
            out[cluster_pk][state] = count
        return out
