"""The GPU domain's writes and reads beyond HPC's: per-job attained service
(``gpu_job_service``), preemptions (a running job back to pending) and resizes (a running job's
placements replaced). Every write runs under the cluster lock, inside the round's transaction."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import GpuJobServiceRecord, JobEventRecord, JobRecord
from app.db.repositories.bulk import update_by_pk
from app.kernel.clock import utc_now

__all__ = [
    "ServiceRow",
    "preempt_jobs",
    "resize_jobs",
    "save_service",
    "service_rows",
]

_SERVICE = cast(Table, GpuJobServiceRecord.__table__)
_JOBS = cast(Table, JobRecord.__table__)
_EVENTS = cast(Table, JobEventRecord.__table__)
#: ids per ``IN (...)`` list (SQLite's bound-parameter limit is 32,766)
_CHUNK = 5_000


@dataclass(frozen=True, slots=True)
class ServiceRow:
    """A job's counters, advanced to ``accounted_at`` (``None``: never started)."""

    job_pk: int
    attained_gpu_s: float = 0.0
    executed_s: float = 0.0
    starts: int = 0
    preemptions: int = 0
    restart_left_s: float = 0.0
    accounted_at: float | None = None


def _chunks(items: Sequence[int]) -> Iterable[Sequence[int]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i : i + _CHUNK]


async def service_rows(session: AsyncSession, job_pks: Sequence[int]) -> dict[int, ServiceRow]:
    """The stored counters of ``job_pks`` (jobs that never ran have none)."""
    out: dict[int, ServiceRow] = {}
    t = _SERVICE
    for chunk in _chunks(list(job_pks)):
        stmt = select(
            t.c.job_pk,
            t.c.attained_gpu_s,
            t.c.executed_s,
            t.c.starts,
            t.c.preemptions,
            t.c.restart_left_s,
            t.c.accounted_at,
        ).where(t.c.job_pk.in_(chunk))
        for row in await session.execute(stmt):
            out[int(row[0])] = ServiceRow(
                int(row[0]),
                float(row[1]),
                float(row[2]),
                int(row[3]),
                int(row[4]),
                float(row[5]),
                None if row[6] is None else float(row[6]),
            )
    return out


async def save_service(session: AsyncSession, rows: Sequence[ServiceRow]) -> None:
    """Store ``rows`` (replacing the jobs' previous counters)."""
    if not rows:
        return
    for chunk in _chunks([r.job_pk for r in rows]):
        await session.execute(delete(_SERVICE).where(_SERVICE.c.job_pk.in_(chunk)))
    await session.execute(
        insert(_SERVICE),
        [
            {
                "job_pk": r.job_pk,
                "attained_gpu_s": r.attained_gpu_s,
                "executed_s": r.executed_s,
                "starts": r.starts,
                "preemptions": r.preemptions,
                "restart_left_s": r.restart_left_s,
                "accounted_at": r.accounted_at,
            }
            for r in rows
        ],
    )


async def preempt_jobs(session: AsyncSession, job_pks: Sequence[int], *, at: float) -> None:
    """Running jobs back to pending (no placements, start time or decision), each with a
    ``preempted`` event at ``at``."""
    if not job_pks:
        return
    await update_by_pk(
        session,
        _JOBS,
        ("state",),
        [("pending", pk) for pk in job_pks],
        {"placements": None, "start_time": None, "decision_id": None, "updated_at": utc_now()},
    )
    now = utc_now()
    await session.execute(
        insert(_EVENTS),
        [
            {
                "job_pk": pk,
                "type": "preempted",
                "at": at,
                "from_state": "running",
                "to_state": "pending",
                "created_at": now,
            }
            for pk in job_pks
        ],
    )


async def resize_jobs(
    session: AsyncSession, placements: Mapping[int, list[dict[str, Any]]], *, decision_id: str
) -> None:
    """Running jobs (by ``pk``) given new placements by ``decision_id``."""
    await update_by_pk(
        session,
        _JOBS,
        ("placements",),
        [(p, pk) for pk, p in placements.items()],
        {"decision_id": decision_id, "updated_at": utc_now()},
    )
