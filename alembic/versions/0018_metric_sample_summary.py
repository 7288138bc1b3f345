"""metric.samples_median, samples_cv, samples_n: each row's samples summarised as the statistics read a trial,
written with them; existing rows are filled here from their samples

Revision ID: 0018
Revises: 0017
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from app.domain.statistics import summary_columns

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 2000  # rows read and updated at a time (a campaign of issue 24's size holds ~519,000)


def upgrade() -> None:
    with op.batch_alter_table("metric", schema=None) as batch_op:
        batch_op.add_column(sa.Column("samples_median", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("samples_cv", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("samples_n", sa.Integer(), nullable=True))
    bind = op.get_bind()
    read = sa.text(
        "SELECT id, CAST(samples AS TEXT) FROM metric WHERE samples IS NOT NULL AND id > :after ORDER BY id LIMIT :n"
    )
    write = sa.text("UPDATE metric SET samples_median = :m, samples_cv = :cv, samples_n = :n WHERE id = :id")
    after = 0
    while rows := bind.execute(read, {"after": after, "n": BATCH}).all():
        updates = []
        for row_id, text in rows:
            found = summary_columns(json.loads(text) if text else None)
            if found["samples_n"] is not None:
                updates.append(
                    {"id": row_id, "m": found["samples_median"], "cv": found["samples_cv"], "n": found["samples_n"]}
                )
        if updates:
            bind.execute(write, updates)
        after = rows[-1][0]


def downgrade() -> None:
    with op.batch_alter_table("metric", schema=None) as batch_op:
        batch_op.drop_column("samples_n")
        batch_op.drop_column("samples_cv")
        batch_op.drop_column("samples_median")
