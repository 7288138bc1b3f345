"""replay: "Replay on runner R" as a record; trial.replay_id and trial.pinned_runner_id (queued for one runner)

Revision ID: 0013
Revises: 0012
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "replay",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=False),
        sa.Column("runner_id", sa.Integer(), nullable=True),
        sa.Column("runner_name", sqlmodel.sql.sqltypes.AutoString(length=120), nullable=False),
        sa.Column("runner_fingerprint", sa.JSON(), nullable=True),
        sa.Column("entries", sa.JSON(), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
        sa.Column("requested_by", sqlmodel.sql.sqltypes.AutoString(length=120), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaign.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["runner_id"], ["runner.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_replay_campaign_id"), "replay", ["campaign_id"], unique=False)
    op.create_index(op.f("ix_replay_state"), "replay", ["state"], unique=False)
    with op.batch_alter_table("trial", schema=None) as batch_op:
        batch_op.add_column(sa.Column("replay_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("pinned_runner_id", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_trial_replay_id"), ["replay_id"], unique=False)
        batch_op.create_foreign_key("fk_trial_replay_id_replay", "replay", ["replay_id"], ["id"], ondelete="SET NULL")
        batch_op.create_foreign_key(
            "fk_trial_pinned_runner_id_runner", "runner", ["pinned_runner_id"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("trial", schema=None) as batch_op:
        batch_op.drop_constraint("fk_trial_pinned_runner_id_runner", type_="foreignkey")
        batch_op.drop_constraint("fk_trial_replay_id_replay", type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_trial_replay_id"))
        batch_op.drop_column("pinned_runner_id")
        batch_op.drop_column("replay_id")
    op.drop_index(op.f("ix_replay_state"), table_name="replay")
    op.drop_index(op.f("ix_replay_campaign_id"), table_name="replay")
    op.drop_table("replay")
