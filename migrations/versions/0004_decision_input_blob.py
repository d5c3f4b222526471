"""decisions.input_blob: the decision input as zlib-compressed JSON (ADR 0097)

Rows stored before keep their input in input_snapshot, which becomes nullable; new rows leave it
NULL. The downgrade writes every blob back into input_snapshot before dropping the column.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04 10:00:00
"""

import json
import zlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('decisions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('input_blob', sa.LargeBinary(), nullable=True))
        batch_op.alter_column('input_snapshot', existing_type=sa.JSON(), nullable=True)


def downgrade() -> None:
    decisions = sa.table(
        'decisions',
        sa.column('pk', sa.Integer()),
        sa.column('input_snapshot', sa.JSON()),
        sa.column('input_blob', sa.LargeBinary()),
    )
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(decisions.c.pk, decisions.c.input_blob).where(
            decisions.c.input_blob.is_not(None)
        )
    ).all()
    for pk, blob in rows:
        bind.execute(
            decisions.update()
            .where(decisions.c.pk == pk)
            .values(input_snapshot=json.loads(zlib.decompress(blob)))
        )
    with op.batch_alter_table('decisions', schema=None) as batch_op:
        batch_op.alter_column('input_snapshot', existing_type=sa.JSON(), nullable=False)
        batch_op.drop_column('input_blob')
