"""campaign: inputs of the model over (batch, draft tokens): tau per k, per-position alphas, the grid

Revision ID: 0007
Revises: 0002
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0007"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("accept_length_by_k", "accept_alphas", "speculation_batches", "speculation_draft_tokens")


def upgrade() -> None:
    with op.batch_alter_table("campaign", schema=None) as batch_op:
        for name in COLUMNS:
            batch_op.add_column(sa.Column(name, sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("campaign", schema=None) as batch_op:
        for name in reversed(COLUMNS):
            batch_op.drop_column(name)
