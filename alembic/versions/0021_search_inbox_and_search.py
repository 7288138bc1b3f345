"""Issue 45: one record of each event (event_record) that feeds both the destinations' outbox and the
people's inboxes (inbox_item), and what each person watches (watch); full-text search (app/domain/search.py):
SQLite FTS5 tables kept in sync by triggers (logs: an external-content table over log_chunk that the hub's
indexer fills behind the log pipeline, its cursor in search_cursor), PostgreSQL GIN indexes over to_tsvector

Revision ID: 0021
Revises: 0020
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel

from alembic import op
from app.domain.search import PG_DOCUMENTS

revision: str = "0021"
down_revision: str | None = "0020"
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

    search_upgrade()


# What a search reads, and the statements that keep the index in step (app/domain/search.py names them too).
SQLITE_SEARCH = [
    # Approaches' words and verdicts' reasons: a document per (kind, row id, field), kept by triggers.
    "CREATE VIRTUAL TABLE search_doc USING fts5(kind UNINDEXED, ref UNINDEXED, field UNINDEXED, body, "
    "tokenize='unicode61')",
    # Logs: external content over log_chunk; the hub's indexer inserts rows past the cursor (never the log
    # pipeline's own insert), a trimmed chunk already indexed leaves it by the delete trigger.
    "CREATE VIRTUAL TABLE search_log USING fts5(data, content='log_chunk', content_rowid='id', tokenize='unicode61')",
    "CREATE TABLE search_cursor (name VARCHAR(20) PRIMARY KEY, last_id INTEGER NOT NULL)",
    "INSERT INTO search_cursor (name, last_id) VALUES ('log', 0)",
    """CREATE TRIGGER search_log_trimmed AFTER DELETE ON log_chunk
       WHEN old.id <= (SELECT last_id FROM search_cursor WHERE name = 'log')
       BEGIN INSERT INTO search_log (search_log, rowid, data) VALUES ('delete', old.id, old.data); END""",
]
_APPROACH_FIELDS = ("title", "description", "reason", "evidence", "prerequisites")
for _when, _new in (("INSERT", True), ("UPDATE", True), ("DELETE", False)):
    _body = "DELETE FROM search_doc WHERE kind = 'approach' AND ref = old.id;" if _when != "INSERT" else ""
    if _new:
        _body += "".join(
            f"INSERT INTO search_doc (kind, ref, field, body) SELECT 'approach', new.id, '{f}', new.{f} "
            f"WHERE new.{f} <> '';"
            for f in _APPROACH_FIELDS
        )
    SQLITE_SEARCH.append(f"CREATE TRIGGER search_approach_{_when.lower()} AFTER {_when} ON approach BEGIN {_body} END")
SQLITE_SEARCH += [
    """CREATE TRIGGER search_verdict_insert AFTER INSERT ON status_change WHEN new.reason <> '' BEGIN
       INSERT INTO search_doc (kind, ref, field, body) VALUES ('verdict', new.id, 'reason', new.reason); END""",
    """CREATE TRIGGER search_verdict_delete AFTER DELETE ON status_change BEGIN
       DELETE FROM search_doc WHERE kind = 'verdict' AND ref = old.id; END""",
    # A trial's parameters (its recipe as JSON text) and its error.
    """CREATE TRIGGER search_trial_insert AFTER INSERT ON trial BEGIN
       INSERT INTO search_doc (kind, ref, field, body) VALUES ('trial', new.id, 'parameters', CAST(new.recipe AS TEXT));
       END""",
    """CREATE TRIGGER search_trial_error AFTER UPDATE OF error ON trial BEGIN
       DELETE FROM search_doc WHERE kind = 'trial' AND ref = new.id AND field = 'error';
       INSERT INTO search_doc (kind, ref, field, body) SELECT 'trial', new.id, 'error', new.error WHERE new.error <> '';
       END""",
    """CREATE TRIGGER search_trial_delete AFTER DELETE ON trial BEGIN
       DELETE FROM search_doc WHERE kind = 'trial' AND ref = old.id; END""",
    # What exists before this migration.
    *(
        f"INSERT INTO search_doc (kind, ref, field, body) SELECT 'approach', id, '{f}', {f} FROM approach WHERE {f} <> ''"
        for f in _APPROACH_FIELDS
    ),
    "INSERT INTO search_doc (kind, ref, field, body) SELECT 'verdict', id, 'reason', reason FROM status_change "
    "WHERE reason <> ''",
    "INSERT INTO search_doc (kind, ref, field, body) SELECT 'trial', id, 'parameters', CAST(recipe AS TEXT) FROM trial",
    "INSERT INTO search_doc (kind, ref, field, body) SELECT 'trial', id, 'error', error FROM trial WHERE error <> ''",
]
# PostgreSQL: GIN indexes over the same text, kept by PostgreSQL itself (its pending list takes the log
# pipeline's inserts cheaply); the queries use the same expressions (app/domain/search.py).
POSTGRES_SEARCH = [
    f"CREATE INDEX ix_search_{table} ON {table} USING gin ({doc})" for table, doc in PG_DOCUMENTS.items()
]


def search_upgrade() -> None:
    bind = op.get_bind()
    for statement in SQLITE_SEARCH if bind.dialect.name == "sqlite" else POSTGRES_SEARCH:
        op.execute(statement)


def search_downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        for name in ("search_doc", "search_log"):
            op.execute(f"DROP TABLE IF EXISTS {name}")
        op.execute("DROP TABLE IF EXISTS search_cursor")
        for trigger in (
            "search_log_trimmed",
            "search_approach_insert",
            "search_approach_update",
            "search_approach_delete",
            "search_verdict_insert",
            "search_verdict_delete",
            "search_trial_insert",
            "search_trial_error",
            "search_trial_delete",
        ):
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    else:
        for name in (f"ix_search_{table}" for table in PG_DOCUMENTS):
            op.execute(f"DROP INDEX IF EXISTS {name}")


def downgrade() -> None:
    search_downgrade()
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
