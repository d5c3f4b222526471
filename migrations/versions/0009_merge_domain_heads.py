"""merge the gpu (0006), dag (0007) and tune (0008) branches into one head

Revision ID: 0009
Revises: 0006, 0007, 0008
Create Date: 2026-12-02 13:10:00
"""

from collections.abc import Sequence

revision: str = "0009"
down_revision: str | Sequence[str] | None = ("0006", "0007", "0008")
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A merge point: the three branches touch disjoint tables, so joining them changes no schema.
    pass


def downgrade() -> None:
    pass
