"""``update_by_pk`` (one ``UPDATE ... FROM unnest`` on PostgreSQL, an executemany elsewhere)
stores what the ORM would: JSON columns, constants, only the rows named."""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table, select

from app.db.engine import make_engine
from app.db.orm import ClusterRecord, JobRecord
from app.db.repositories.bulk import update_by_pk
from app.db.session import Database
from app.kernel.clock import utc_now

_JOBS = cast(Table, JobRecord.__table__)


async def test_rows_get_their_values_and_the_constants(database_url: str, cid: str) -> None:
    db = Database(make_engine(database_url))
    try:
        async with db.transaction(write=True) as session:
            cluster = ClusterRecord(
                tenant="default",
                id=cid,
                name=None,
                resources=["cpu"],
                policy="f1",
                fallback="f1",
                backfill="easy",
                placement="pack",
                shadow_policy=None,
                labels={},
            )
            session.add(cluster)
            await session.flush()
            jobs = [
                JobRecord(
                    cluster_pk=cluster.pk,
                    id=f"j{i}",
                    spec={"id": f"j{i}"},
                    spec_hash="h",
                    state="pending",
                    submit_time=float(i),
                )
                for i in range(3)
            ]
            session.add_all(jobs)
            await session.flush()
            pks = [j.pk for j in jobs]
            await update_by_pk(
                session,
                _JOBS,
                ("placements", "start_time"),
                [([{"node_id": "n1", "tasks": 2}], 5.0, pks[0]), ([], 6.5, pks[2])],
                {"state": "running", "decision_id": None, "updated_at": utc_now()},
            )
        async with db.transaction(write=False) as session:
            rows = (
                await session.execute(
                    select(_JOBS.c.id, _JOBS.c.state, _JOBS.c.placements, _JOBS.c.start_time)
                    .where(_JOBS.c.cluster_pk == cluster.pk)
                    .order_by(_JOBS.c.pk)
                )
            ).all()
        assert [tuple(r) for r in rows] == [
            ("j0", "running", [{"node_id": "n1", "tasks": 2}], 5.0),
            ("j1", "pending", None, None),
            ("j2", "running", [], 6.5),
        ]
    finally:
        await db.dispose()
