"""Bulk ``UPDATE ... WHERE pk = ?`` for the thousands of rows one scheduling round changes.

Values go through the columns' SQLAlchemy bind processors (JSON serializer, SQLite ``DATETIME``
text), so rows are stored exactly as the ORM would store them, without the per-row statement
compilation of an ORM or Core executemany. PostgreSQL gets one statement for all rows
(``UPDATE ... FROM unnest($1::int[], ...)``: one parse, one plan, one round trip); other
databases get the driver's own ``executemany`` of the per-row statement (SQLite runs it in C).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import JSON, Table
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession


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
    if dialect.name == "postgresql":
        await _update_unnest(
            conn, table, columns, processors, rows, dict(zip(fixed, tail, strict=True))
        )
        return
    params = [
        (
            *[v if p is None else p(v) for v, p in zip(row[:-1], processors, strict=True)],
            *tail,
            row[-1],
        )
        for row in rows
    ]
    await conn.exec_driver_sql(sql, params)


async def _update_unnest(
    conn: AsyncConnection,
    table: Table,
    columns: Sequence[str],
    processors: Sequence[Callable[[Any], Any] | None],
    rows: Sequence[Sequence[Any]],
    fixed: Mapping[str, Any],
) -> None:
    """PostgreSQL: ``UPDATE table SET col = v.col, ... FROM unnest(<one array per column>, pks)
    AS v WHERE table.pk = v.pk``; a JSON column travels as ``text[]`` and is cast per row;
    ``fixed`` holds the constants already converted."""
    dialect = conn.dialect
    quote = dialect.identifier_preparer.quote
    arrays: list[list[Any]] = [[] for _ in columns]
    for row in rows:
        for values, value, bind in zip(arrays, row[:-1], processors, strict=True):
            values.append(value if bind is None else bind(value))
    pk_type = table.c.pk.type.compile(dialect)
    casts, sets = [], []
    for i, name in enumerate(columns):
        column = table.c[name]
        json_column = isinstance(column.type, JSON)
        casts.append(f"${i + 1}::{'text' if json_column else column.type.compile(dialect)}[]")
        value = f"v.c{i}::json" if json_column else f"v.c{i}"
        sets.append(f"{quote(column.name)} = {value}")
    params: list[Any] = [*arrays, [row[-1] for row in rows]]
    for name, value in fixed.items():
        params.append(value)
        sets.append(f"{quote(table.c[name].name)} = ${len(params)}")
    names = ", ".join([*(f"c{i}" for i in range(len(columns))), "pk"])
    sql = (
        f"UPDATE {quote(table.name)} AS t SET {', '.join(sets)} "
        f"FROM unnest({', '.join(casts)}, ${len(arrays) + 1}::{pk_type}[]) AS v({names}) "
        f"WHERE t.{quote(table.c.pk.name)} = v.pk"
    )
    await conn.exec_driver_sql(sql, tuple(params))
