"""index idempotency_keys.created_at for the expiry purge (ADR 0021)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 23:10:00
"""

from collections.abc import Sequence

from alembic import op


revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('idempotency_keys', schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f('ix_idempotency_keys_created_at'), ['created_at'], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table('idempotency_keys', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_idempotency_keys_created_at'))
