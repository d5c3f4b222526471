"""Create-if-absent without unique violations: ``INSERT ... ON CONFLICT DO NOTHING``.

Two transactions creating the same key at once both issue the insert; the database makes the
second wait for the first and then skips its row instead of raising. The caller re-reads the key
(with a lock when it changes the row) and gets whichever row won. PostgreSQL and SQLite both
support the clause; no savepoint, no error, nothing half-applied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import Base


async def insert_missing(
    session: AsyncSession,
    model: type[Base],
    rows: Sequence[Mapping[str, Any]],
    key: Sequence[str],
) -> set[tuple[Any, ...]]:
    """Insert every row of ``rows`` whose ``key`` columns (a unique constraint) are not taken;
    the keys of the rows this call inserted. Column defaults apply as for an ORM insert."""
    if not rows:
        return set()
    table = cast(Table, model.__table__)
    columns = [table.c[name] for name in key]
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        pg = postgresql.insert(table).on_conflict_do_nothing(index_elements=columns)
        stmt = pg.returning(*columns)
    elif dialect == "sqlite":
        lite = sqlite.insert(table).on_conflict_do_nothing(index_elements=columns)
        stmt = lite.returning(*columns)
    else:  # pragma: no cover - make_engine accepts only these two
        raise NotImplementedError(f"no create-if-absent for {dialect}")
    result = await session.execute(stmt, [dict(r) for r in rows])
    return {tuple(row) for row in result.all()}
