"""A campaign's lifecycle: campaign.archived_at, the old slugs that redirect (campaign_slug), the campaign's own
history (campaign_event); and the trials page's indexes (its filters and sorts within a campaign)

Revision ID: 0020
Revises: 0019
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("campaign", schema=None) as batch_op:
        batch_op.add_column(sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "campaign_slug",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("slug", sa.String(length=80), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaign.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("slug"),
    )
    op.create_index("ix_campaign_slug_campaign_id", "campaign_slug", ["campaign_id"])
    op.create_table(
        "campaign_event",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(length=120), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaign.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_campaign_event_campaign_id", "campaign_event", ["campaign_id"])
    op.create_index("ix_trial_campaign_created", "trial", ["campaign_id", "created_at"])
    op.create_index("ix_trial_campaign_finished", "trial", ["campaign_id", "finished_at"])


def downgrade() -> None:
    op.drop_index("ix_trial_campaign_finished", table_name="trial")
    op.drop_index("ix_trial_campaign_created", table_name="trial")
    op.drop_index("ix_campaign_event_campaign_id", table_name="campaign_event")
    op.drop_table("campaign_event")
    op.drop_index("ix_campaign_slug_campaign_id", table_name="campaign_slug")
    op.drop_table("campaign_slug")
    with op.batch_alter_table("campaign", schema=None) as batch_op:
        batch_op.drop_column("archived_at")
