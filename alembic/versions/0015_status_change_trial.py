"""status_change.trial_id indexed: the replay report reads the status changes naming its trials (a thousand
at worst), and a trial's delete sets them to NULL (PostgreSQL scans the table for that without an index)

Revision ID: 0015
Revises: 0014
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("status_change", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_status_change_trial_id"), ["trial_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("status_change", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_status_change_trial_id"))
