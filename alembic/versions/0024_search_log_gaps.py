"""search_log_gap (issue 45, SQLite): the log indexer takes the chunks stored since its last pass first, newest
first, so fresh logs are searchable within a pass whatever the backlog; the older chunks a pass leaves below them
are a gap (ids between after_id and before_id, not yet indexed), which later passes index oldest first with what
is left of their limits. Indexed: every chunk at or below the cursor (search_cursor) outside the gaps; the trim
trigger deletes from the index exactly those. PostgreSQL indexes on insert (GIN): nothing to do.

Revision ID: 0024
Revises: 0023
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CURSOR = "(SELECT last_id FROM search_cursor WHERE name = 'log')"
_DELETE = "BEGIN INSERT INTO search_log (search_log, rowid, data) VALUES ('delete', old.id, old.data); END"


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute("CREATE TABLE search_log_gap (after_id INTEGER PRIMARY KEY, before_id INTEGER NOT NULL)")
    op.execute("DROP TRIGGER search_log_trimmed")
    op.execute(
        f"CREATE TRIGGER search_log_trimmed AFTER DELETE ON log_chunk WHEN old.id <= {_CURSOR} AND NOT EXISTS "
        f"(SELECT 1 FROM search_log_gap g WHERE g.after_id < old.id AND old.id < g.before_id) {_DELETE}"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    # 0021's indexer knows only its cursor: the gaps' chunks are indexed here, so everything below it is.
    op.execute(
        "INSERT INTO search_log (rowid, data) SELECT c.id, c.data FROM log_chunk c JOIN search_log_gap g "
        "ON c.id > g.after_id AND c.id < g.before_id"
    )
    op.execute("DROP TRIGGER search_log_trimmed")
    op.execute(f"CREATE TRIGGER search_log_trimmed AFTER DELETE ON log_chunk WHEN old.id <= {_CURSOR} {_DELETE}")
    op.execute("DROP TABLE search_log_gap")
