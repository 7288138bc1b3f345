"""campaign.answer_conditions: the conditions a campaign declares its default answer under (the precision a team
deploys, e.g. {experts_dtype: int4}); unset, the answer keeps its own default (the most complete set)

Revision ID: 0022
Revises: 0021
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("campaign", schema=None) as batch_op:
        batch_op.add_column(sa.Column("answer_conditions", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("campaign", schema=None) as batch_op:
        batch_op.drop_column("answer_conditions")
