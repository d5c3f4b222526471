"""tunes: tunings of a cluster's policy from its own history (issue 21)

Revision ID: 0008
Revises: 0005
Create Date: 2026-12-02 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0008'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('tunes',
    sa.Column('pk', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('tenant', sa.String(length=64), nullable=False),
    sa.Column('cluster_pk', sa.Integer(), nullable=False),
    sa.Column('cluster_id', sa.String(length=128), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('phase', sa.String(length=16), nullable=False),
    sa.Column('params', sa.JSON(), nullable=False),
    sa.Column('baseline_policy', sa.String(length=160), nullable=False),
    sa.Column('history_jobs', sa.Integer(), nullable=True),
    sa.Column('progress', sa.JSON(), nullable=True),
    sa.Column('result', sa.JSON(), nullable=True),
    sa.Column('policy', sa.String(length=160), nullable=True),
    sa.Column('error_code', sa.String(length=64), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('owner', sa.String(length=128), nullable=True),
    sa.Column('lease_until', sa.Double(), nullable=True),
    sa.Column('started_at', sa.Double(), nullable=True),
    sa.Column('finished_at', sa.Double(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['cluster_pk'], ['clusters.pk'], name=op.f('fk_tunes_cluster_pk_clusters'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('pk', name=op.f('pk_tunes')),
    sa.UniqueConstraint('id', name=op.f('uq_tunes_id'))
    )
    with op.batch_alter_table('tunes', schema=None) as batch_op:
        batch_op.create_index('ix_tunes_state', ['state'], unique=False)
        batch_op.create_index('ix_tunes_tenant_cluster_pk_pk', ['tenant', 'cluster_pk', 'pk'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('tunes', schema=None) as batch_op:
        batch_op.drop_index('ix_tunes_tenant_cluster_pk_pk')
        batch_op.drop_index('ix_tunes_state')
    op.drop_table('tunes')
