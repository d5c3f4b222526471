"""DAG jobs of dag clusters and their stages' progress."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import DagRecord, DagStageRecord, JobRecord
from app.db.repositories.pagination import PageResult, encode_cursor

#: DAG states a round still schedules
ACTIVE_STATES = ("pending", "running")


class DagRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get(self, cluster_pk: int, dag_id: str) -> DagRecord | None:
        stmt = select(DagRecord).where(DagRecord.cluster_pk == cluster_pk, DagRecord.id == dag_id)
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def get_by_pk(self, dag_pk: int) -> DagRecord | None:
        return await self.session.get(DagRecord, dag_pk)

    async def active(self, cluster_pk: int) -> list[DagRecord]:
        """The cluster's pending and running DAGs in submission order."""
        stmt = (
            select(DagRecord)
            .where(DagRecord.cluster_pk == cluster_pk, DagRecord.state.in_(ACTIVE_STATES))
            .order_by(DagRecord.pk)
        )
        return list((await self.session.execute(stmt)).scalars())

    async def page(
        self, cluster_pk: int, *, state: str | None, after_pk: int | None, limit: int
    ) -> PageResult[DagRecord]:
        stmt = select(DagRecord).where(DagRecord.cluster_pk == cluster_pk)
        if state is not None:
            stmt = stmt.where(DagRecord.state == state)
        if after_pk is not None:
            stmt = stmt.where(DagRecord.pk > after_pk)
        rows = list(
            (await self.session.execute(stmt.order_by(DagRecord.pk).limit(limit + 1))).scalars()
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return PageResult(rows, encode_cursor(rows[-1].pk) if more and rows else None)

    async def stages_of(
        self, dag_pks: Sequence[int]
    ) -> dict[int, list[tuple[DagStageRecord, JobRecord]]]:
        """Per DAG, its stages (in spec order) with their stage jobs."""
        out: dict[int, list[tuple[DagStageRecord, JobRecord]]] = defaultdict(list)
        if not dag_pks:
            return out
        stmt = (
            select(DagStageRecord, JobRecord)
            .join(JobRecord, JobRecord.pk == DagStageRecord.job_pk)
            .where(DagStageRecord.dag_pk.in_(list(dag_pks)))
            .order_by(DagStageRecord.dag_pk, DagStageRecord.position)
        )
        for stage, job in (await self.session.execute(stmt)).all():
            out[stage.dag_pk].append((stage, job))
        return out

    async def stage_of_job(self, job_pk: int) -> DagStageRecord | None:
        stmt = select(DagStageRecord).where(DagStageRecord.job_pk == job_pk)
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def add(self, dag: DagRecord) -> DagRecord:
        self.session.add(dag)
        await self.session.flush()
        return dag

    async def add_all(self, records: Sequence[JobRecord | DagStageRecord]) -> None:
        self.session.add_all(records)
        await self.session.flush()
