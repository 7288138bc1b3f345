"""Issue 45: one record of each event (event_record) that feeds both the destinations' outbox and the
people's inboxes (inbox_item), and what each person watches (watch)

Revision ID: 0019_search
Revises: 0018
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel

from alembic import op

revision: str = "0019_search"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "event_record",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("event", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("dedupe_key", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("title", sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("link", sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=True),
        sa.Column("approach_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["approach_id"], ["approach.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaign.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("dedupe_key"),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_event_record_approach_id"), "event_record", ["approach_id"], unique=False)
    op.create_index(op.f("ix_event_record_campaign_id"), "event_record", ["campaign_id"], unique=False)
    op.create_table(
        "watch",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=False),
        sa.Column("approach_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["approach_id"], ["approach.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaign.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["board_user.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("user_id", "campaign_id", "approach_id", name="uq_watch_user_target"),
    )
    op.create_index(op.f("ix_watch_approach_id"), "watch", ["approach_id"], unique=False)
    op.create_index(op.f("ix_watch_campaign_id"), "watch", ["campaign_id"], unique=False)
    op.create_index(op.f("ix_watch_user_id"), "watch", ["user_id"], unique=False)
    op.create_table(
        "inbox_item",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.Integer(), nullable=False),
        sa.Column("read_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["event_id"], ["event_record.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["board_user.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("user_id", "event_id", name="uq_inbox_user_event"),
    )
    op.create_index(op.f("ix_inbox_item_event_id"), "inbox_item", ["event_id"], unique=False)
    op.create_index("ix_inbox_user_read", "inbox_item", ["user_id", "read_at"], unique=False)
    with op.batch_alter_table("notificationoutbox", schema=None) as batch_op:
        batch_op.add_column(sa.Column("event_id", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_notificationoutbox_event_id"), ["event_id"], unique=False)
        batch_op.create_foreign_key(
            "fk_notificationoutbox_event_id_event_record", "event_record", ["event_id"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("notificationoutbox", schema=None) as batch_op:
        batch_op.drop_constraint("fk_notificationoutbox_event_id_event_record", type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_notificationoutbox_event_id"))
        batch_op.drop_column("event_id")
    op.drop_index("ix_inbox_user_read", table_name="inbox_item")
    op.drop_index(op.f("ix_inbox_item_event_id"), table_name="inbox_item")
    op.drop_table("inbox_item")
    for name in ("ix_watch_user_id", "ix_watch_campaign_id", "ix_watch_approach_id"):
        op.drop_index(op.f(name), table_name="watch")
    op.drop_table("watch")
    op.drop_index(op.f("ix_event_record_campaign_id"), table_name="event_record")
    op.drop_index(op.f("ix_event_record_approach_id"), table_name="event_record")
    op.drop_table("event_record")
