"""approach.archived_at (an archived approach keeps its trials and answers, off the active list), and ids that
are never reused on SQLite (AUTOINCREMENT on campaign, approach, trial, artifact and replay: their ids are in
links and notifications; PostgreSQL's sequences never go back already)

Revision ID: 0016
Revises: 0015
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Parents before children does not matter: alembic/env.py turns SQLite's foreign keys off while it migrates
# (a rebuilt table's DROP would cascade into its children) and checks them all before the commit.
NEVER_REUSED = ("campaign", "approach", "trial", "artifact", "replay")


def _sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"


def upgrade() -> None:
    with op.batch_alter_table("approach", schema=None) as batch_op:
        batch_op.add_column(sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True))
    if _sqlite():
        for table in NEVER_REUSED:
            # The rebuilt table copies every row with its id; AUTOINCREMENT then starts above the largest.
            with op.batch_alter_table(table, recreate="always", table_kwargs={"sqlite_autoincrement": True}):
                pass


def downgrade() -> None:
    if _sqlite():
        for table in NEVER_REUSED:
            with op.batch_alter_table(table, recreate="always", table_kwargs={"sqlite_autoincrement": False}):
                pass
    with op.batch_alter_table("approach", schema=None) as batch_op:
        batch_op.drop_column("archived_at")
