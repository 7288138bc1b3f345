"""change_scan and change_point: the change-point pass over each series (app/domain/changes.py)

Revision ID: 0012
Revises: 0011
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "change_scan",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("approach_id", sa.Integer(), nullable=False),
        sa.Column("runner_id", sa.Integer(), nullable=False),
        sa.Column("last_trial_id", sa.Integer(), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["approach_id"], ["approach.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["runner_id"], ["runner.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("approach_id", "runner_id", name="uq_change_scan_approach_runner"),
    )
    op.create_table(
        "change_point",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=False),
        sa.Column("approach_id", sa.Integer(), nullable=False),
        sa.Column("runner_id", sa.Integer(), nullable=False),
        sa.Column("metric", sqlmodel.sql.sqltypes.AutoString(length=120), nullable=False),
        sa.Column("unit", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("point", sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("before_trial_id", sa.Integer(), nullable=False),
        sa.Column("ratio", sa.Float(), nullable=False),
        sa.Column("low", sa.Float(), nullable=True),
        sa.Column("high", sa.Float(), nullable=True),
        sa.Column("p_value", sa.Float(), nullable=True),
        sa.Column("verdict", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
        sa.Column("stack_diff", sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["approach_id"], ["approach.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaign.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["runner_id"], ["runner.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_change_point_approach_runner", "change_point", ["approach_id", "runner_id"])
    op.create_index(op.f("ix_change_point_campaign_id"), "change_point", ["campaign_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_change_point_campaign_id"), table_name="change_point")
    op.drop_index("ix_change_point_approach_runner", table_name="change_point")
    op.drop_table("change_point")
    op.drop_table("change_scan")
