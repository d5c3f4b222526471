"""dags and dag_stages: DAG jobs of dag clusters and their stages' progress

Revision ID: 0007
Revises: 0005
Create Date: 2026-12-02 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0007'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('dags',
    sa.Column('pk', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('cluster_pk', sa.Integer(), nullable=False),
    sa.Column('id', sa.String(length=128), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('spec_hash', sa.String(length=64), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('submit_time', sa.Double(), nullable=False),
    sa.Column('start_time', sa.Double(), nullable=True),
    sa.Column('end_time', sa.Double(), nullable=True),
    sa.Column('released_at', sa.Double(), nullable=True),
    sa.Column('released_slots', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['cluster_pk'], ['clusters.pk'], name=op.f('fk_dags_cluster_pk_clusters'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('pk', name=op.f('pk_dags')),
    sa.UniqueConstraint('cluster_pk', 'id', name=op.f('uq_dags_cluster_pk_id'))
    )
    with op.batch_alter_table('dags', schema=None) as batch_op:
        batch_op.create_index('ix_dags_cluster_pk_state_pk', ['cluster_pk', 'state', 'pk'], unique=False)

    op.create_table('dag_stages',
    sa.Column('pk', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('dag_pk', sa.Integer(), nullable=False),
    sa.Column('job_pk', sa.Integer(), nullable=False),
    sa.Column('stage_id', sa.String(length=128), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('launched', sa.Integer(), nullable=False),
    sa.Column('finished', sa.Integer(), nullable=False),
    sa.Column('running', sa.Integer(), nullable=False),
    sa.Column('reserved', sa.Integer(), nullable=False),
    sa.Column('parallelism_limit', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['dag_pk'], ['dags.pk'], name=op.f('fk_dag_stages_dag_pk_dags'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['job_pk'], ['jobs.pk'], name=op.f('fk_dag_stages_job_pk_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('pk', name=op.f('pk_dag_stages')),
    sa.UniqueConstraint('dag_pk', 'stage_id', name=op.f('uq_dag_stages_dag_pk_stage_id')),
    sa.UniqueConstraint('job_pk', name=op.f('uq_dag_stages_job_pk'))
    )
    with op.batch_alter_table('dag_stages', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_dag_stages_dag_pk'), ['dag_pk'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('dag_stages', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_dag_stages_dag_pk'))
    op.drop_table('dag_stages')
    with op.batch_alter_table('dags', schema=None) as batch_op:
        batch_op.drop_index('ix_dags_cluster_pk_state_pk')
    op.drop_table('dags')
