"""The comparisons' decision rule per campaign (campaign.stats_confidence, stats_min_effect); settle
(Settle A vs B, Repeat A) and trial.settle_id

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing campaigns take the defaults (docs/statistics.md): a 95% interval, a 3% minimum effect.
    with op.batch_alter_table("campaign", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stats_confidence", sa.Float(), nullable=False, server_default="0.95"))
        batch_op.add_column(sa.Column("stats_min_effect", sa.Float(), nullable=False, server_default="0.03"))
    with op.batch_alter_table("campaign", schema=None) as batch_op:
        batch_op.alter_column("stats_confidence", server_default=None)
        batch_op.alter_column("stats_min_effect", server_default=None)
    op.create_table(
        "settle",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=False),
        sa.Column("approach_a_id", sa.Integer(), nullable=False),
        sa.Column("approach_b_id", sa.Integer(), nullable=True),
        sa.Column("budget", sa.Integer(), nullable=False),
        sa.Column("metric", sqlmodel.sql.sqltypes.AutoString(length=120), nullable=True),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("requested_by", sqlmodel.sql.sqltypes.AutoString(length=120), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["approach_a_id"], ["approach.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["approach_b_id"], ["approach.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaign.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("settle", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_settle_campaign_id"), ["campaign_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_settle_approach_a_id"), ["approach_a_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_settle_approach_b_id"), ["approach_b_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_settle_state"), ["state"], unique=False)
    with op.batch_alter_table("trial", schema=None) as batch_op:
        batch_op.add_column(sa.Column("settle_id", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_trial_settle_id"), ["settle_id"], unique=False)
        batch_op.create_foreign_key("fk_trial_settle_id_settle", "settle", ["settle_id"], ["id"], ondelete="SET NULL")


def downgrade() -> None:
    with op.batch_alter_table("trial", schema=None) as batch_op:
        batch_op.drop_constraint("fk_trial_settle_id_settle", type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_trial_settle_id"))
        batch_op.drop_column("settle_id")
    op.drop_table("settle")
    with op.batch_alter_table("campaign", schema=None) as batch_op:
        batch_op.drop_column("stats_min_effect")
        batch_op.drop_column("stats_confidence")
