"""status_change.kind: a person's status change, or a trial's event. An approach's status is what a person
decided; a trial no longer moves it to queued / running and back (issue 43, item 1). Existing data:

- each approach's history is walked oldest first, keeping the decided status (and its reason): a row to
  queued / running, or a trial's row out of them (`trial_id` set), becomes a trial event
  (kind "trial", from_status == to_status == the decided status at the time); a person's change out of
  queued / running now starts from the decided status;
- an approach left queued / running (or reset to untested by a trial's end) gets its decided status and
  reason back.

Revision ID: 0019
Revises: 0018
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TRIAL_DRIVEN = ("queued", "running")


def upgrade() -> None:
    with op.batch_alter_table("status_change", schema=None) as batch_op:
        batch_op.add_column(sa.Column("kind", sa.String(length=20), nullable=False, server_default="status"))
    bind = op.get_bind()
    approaches = bind.execute(sa.text("SELECT id, status, reason FROM approach ORDER BY id")).all()
    read = sa.text(
        "SELECT id, from_status, to_status, reason, trial_id FROM status_change "
        "WHERE approach_id = :a ORDER BY at, id"
    )
    event = sa.text("UPDATE status_change SET kind = 'trial', from_status = :s, to_status = :s WHERE id = :id")
    person = sa.text("UPDATE status_change SET from_status = :s WHERE id = :id")
    for approach_id, status, reason in approaches:
        decided, decided_reason, machine_touched = "untested", "", False
        for row_id, from_status, to_status, row_reason, trial_id in bind.execute(read, {"a": approach_id}).all():
            if to_status in TRIAL_DRIVEN or (from_status in TRIAL_DRIVEN and trial_id is not None):
                bind.execute(event, {"s": decided, "id": row_id})
                machine_touched = True
                continue
            if from_status in TRIAL_DRIVEN:  # a person's change while a trial ran: from what was decided
                bind.execute(person, {"s": decided, "id": row_id})
            decided, decided_reason, machine_touched = to_status, row_reason, False
        if status in TRIAL_DRIVEN or (machine_touched and (status, reason) != (decided, decided_reason)):
            bind.execute(
                sa.text("UPDATE approach SET status = :s, reason = :r WHERE id = :id"),
                {"s": decided, "r": decided_reason, "id": approach_id},
            )


def downgrade() -> None:
    # The decided statuses stay (they are valid before this revision too); trial events lose their kind.
    with op.batch_alter_table("status_change", schema=None) as batch_op:
        batch_op.drop_column("kind")
