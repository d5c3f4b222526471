"""clusters.domain (hpc, gpu, dag) and clusters.domain_config (the domain's cluster settings)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 06:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('clusters') as batch_op:
        batch_op.add_column(
            sa.Column('domain', sa.String(length=16), server_default='hpc', nullable=False)
        )
        batch_op.add_column(sa.Column('domain_config', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('clusters') as batch_op:
        batch_op.drop_column('domain_config')
        batch_op.drop_column('domain')
