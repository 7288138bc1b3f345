"""campaign.accept_unconditional: vLLM's unconditional per-position acceptance rates as entered (accept_alphas
holds their conversion to conditional rates)

Revision ID: 0017
Revises: 0016
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("campaign", schema=None) as batch_op:
        batch_op.add_column(sa.Column("accept_unconditional", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("campaign", schema=None) as batch_op:
        batch_op.drop_column("accept_unconditional")
