"""campaign.run_order: "Run next candidate" follows the payoff ranking, or a priority pinned by hand

Revision ID: 0011
Revises: 0010
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("campaign", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "run_order", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False, server_default="ranking"
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("campaign", schema=None) as batch_op:
        batch_op.drop_column("run_order")
