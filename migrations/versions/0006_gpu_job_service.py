"""gpu_job_service (attained service of jobs on gpu clusters) and decisions.preemptions/resizes

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gpu_job_service",
        sa.Column("job_pk", sa.Integer(), nullable=False),
        sa.Column("attained_gpu_s", sa.Double(), nullable=False),
        sa.Column("executed_s", sa.Double(), nullable=False),
        sa.Column("starts", sa.Integer(), nullable=False),
        sa.Column("preemptions", sa.Integer(), nullable=False),
        sa.Column("restart_left_s", sa.Double(), nullable=False),
        sa.Column("accounted_at", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_pk"], ["jobs.pk"], name=op.f("fk_gpu_job_service_job_pk_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_pk", name=op.f("pk_gpu_job_service")),
    )
    with op.batch_alter_table("decisions") as batch_op:
        batch_op.add_column(sa.Column("preemptions", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("resizes", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("decisions") as batch_op:
        batch_op.drop_column("resizes")
        batch_op.drop_column("preemptions")
    op.drop_table("gpu_job_service")
