"""Bulk ``UPDATE ... WHERE pk = ?`` for the thousands of rows one scheduling round changes.

The statement is sent with the driver's own ``executemany`` (``exec_driver_sql``): values go
through the columns' SQLAlchemy bind processors (JSON serializer, SQLite ``DATETIME`` text), so
rows are stored exactly as the ORM would store them, without the per-row statement compilation
of an ORM or Core executemany.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncSession


def _placeholder(paramstyle: str, position: int) -> str:
    if paramstyle == "qmark":
        return "?"
    if paramstyle in ("numeric_dollar", "numeric"):
        return f"{'$' if paramstyle == 'numeric_dollar' else ':'}{position}"
    if paramstyle == "format":
        return "%s"
    raise NotImplementedError(f"no bulk update for paramstyle {paramstyle!r}")


async def update_by_pk(
    session: AsyncSession,
    table: Table,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    constants: Mapping[str, Any] | None = None,
) -> None:
    """``UPDATE table SET columns..., constants... WHERE pk = ?`` for each row
    ``(value..., pk)``; ``constants`` are the values every row sets (converted once)."""
    if not rows:
        return
    conn = await session.connection()
    dialect = conn.dialect
    quote = dialect.identifier_preparer.quote
    style = dialect.paramstyle
    fixed = dict(constants or {})
    names = [*columns, *fixed]
    assignments = ", ".join(
        f"{quote(table.c[name].name)} = {_placeholder(style, i + 1)}"
        for i, name in enumerate(names)
    )
    sql = (
        f"UPDATE {quote(table.name)} SET {assignments} "
        f"WHERE {quote(table.c.pk.name)} = {_placeholder(style, len(names) + 1)}"
    )

    def processor(name: str) -> Callable[[Any], Any] | None:
        column = table.c[name]
        bind: Callable[[Any], Any] | None = column.type.dialect_impl(dialect).bind_processor(
            dialect
        )
        return bind

    processors = [processor(name) for name in columns]
    tail = []
    for name, value in fixed.items():
        bind = processor(name)
        tail.append(value if bind is None or value is None else bind(value))
    params = [
        (
            *[v if p is None else p(v) for v, p in zip(row[:-1], processors, strict=True)],
            *tail,
            row[-1],
        )
        for row in rows
    ]
    await conn.exec_driver_sql(sql, params)
