"""Jobs and their events."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from typing import cast as type_cast

from sqlalchemy import Table, Text, cast, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import JobEventRecord, JobRecord
from app.db.repositories.bulk import update_by_pk
from app.db.repositories.inserts import insert_missing
from app.db.repositories.json_text import json_value
from app.db.repositories.pagination import PageResult, encode_cursor
from app.kernel.clock import utc_now

_CHUNK = 5000
_JOBS = type_cast(Table, JobRecord.__table__)


class JobRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get(self, cluster_pk: int, job_id: str) -> JobRecord | None:
        stmt = select(JobRecord).where(JobRecord.cluster_pk == cluster_pk, JobRecord.id == job_id)
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def get_many(self, cluster_pk: int, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        found: dict[str, JobRecord] = {}
        for i in range(0, len(job_ids), _CHUNK):
            stmt = select(JobRecord).where(
                JobRecord.cluster_pk == cluster_pk, JobRecord.id.in_(job_ids[i : i + _CHUNK])
            )
            found.update({j.id: j for j in (await self.session.execute(stmt)).scalars()})
        return found

    async def in_states(self, cluster_pk: int, states: Sequence[str]) -> list[JobRecord]:
        stmt = (
            select(JobRecord)
            .where(JobRecord.cluster_pk == cluster_pk, JobRecord.state.in_(states))
            .order_by(JobRecord.pk)
        )
        return list((await self.session.execute(stmt)).scalars())

    async def ids_in_state(self, cluster_pk: int, state: str, job_ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for i in range(0, len(job_ids), _CHUNK):
            stmt = select(JobRecord.id).where(
                JobRecord.cluster_pk == cluster_pk,
                JobRecord.state == state,
                JobRecord.id.in_(job_ids[i : i + _CHUNK]),
            )
            found.update((await self.session.execute(stmt)).scalars())
        return found

    async def create_missing(self, rows: Sequence[Mapping[str, Any]]) -> set[str]:
        """Insert each job row (``cluster_pk``, ``id``, ``spec``, ...) whose id its cluster does
        not hold yet, also when another transaction is inserting it right now (this one waits
        and skips it); the ids this call inserted. Read the rows with :meth:`get_many`."""
        keys = await insert_missing(self.session, JobRecord, rows, ("cluster_pk", "id"))
        return {str(job_id) for _, job_id in keys}

    async def create_if_absent(self, row: Mapping[str, Any]) -> JobRecord:
        """The job of ``row``: inserted unless its id exists; the stored row either way."""
        await self.create_missing([row])
        job = await self.get(int(row["cluster_pk"]), str(row["id"]))
        if job is None:  # pragma: no cover - a row just inserted or found is there
            raise LookupError(f"job {row['id']!r} vanished")
        return job

    async def add_event(self, event: JobEventRecord) -> None:
        self.session.add(event)
        await self.session.flush()

    async def page(
        self, cluster_pk: int, *, state: str | None, after_pk: int | None, limit: int
    ) -> PageResult[JobRecord]:
        stmt = select(JobRecord).where(JobRecord.cluster_pk == cluster_pk)
        if state is not None:
            stmt = stmt.where(JobRecord.state == state)
        if after_pk is not None:
            stmt = stmt.where(JobRecord.pk > after_pk)
        stmt = stmt.order_by(JobRecord.pk).limit(limit + 1)
        rows = list((await self.session.execute(stmt)).scalars())
        more = len(rows) > limit
        rows = rows[:limit]
        return PageResult(rows, encode_cursor(rows[-1].pk) if more and rows else None)


@dataclass(slots=True)
class JobRow:
    """One job as a scheduling round reads it (no ORM object: a round reads every active job)."""

    pk: int
    id: str
    state: str
    spec: dict[str, Any]
    placements: list[Any] | None
    start_time: float | None


async def job_rows(session: AsyncSession, cluster_pk: int, states: Sequence[str]) -> list[JobRow]:
    """The cluster's jobs in ``states``, in ``pk`` (submission) order, JSON decoded in one pass."""
    t = _JOBS
    stmt = (
        select(
            t.c.pk,
            t.c.id,
            t.c.state,
            cast(t.c.spec, Text),
            cast(t.c.placements, Text),
            t.c.start_time,
        )
        .where(t.c.cluster_pk == cluster_pk, t.c.state.in_(states))
        .order_by(t.c.pk)
    )
    rows = (await session.execute(stmt)).all()
    loads = json_value
    return [
        JobRow(pk, job_id, state, loads(spec), None if pl is None else loads(pl), start)
        for pk, job_id, state, spec, pl, start in rows
    ]


@dataclass(frozen=True, slots=True)
class JobStart:
    """A pending job a round starts: its placements (``[{"node_id", "tasks"}]``)."""

    pk: int
    placements: list[dict[str, Any]]


async def start_jobs(
    session: AsyncSession, starts: Sequence[JobStart], *, start_time: float, decision_id: str
) -> None:
    """Mark each job running with its placements, start time and decision (one executemany)."""
    if not starts:
        return
    await update_by_pk(
        session,
        _JOBS,
        ("placements",),
        [(s.placements, s.pk) for s in starts],
        {
            "state": "running",
            "start_time": start_time,
            "end_time": None,
            "decision_id": decision_id,
            "updated_at": utc_now(),
        },
    )
