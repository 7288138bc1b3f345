"""The trials page's tag filter (issue 45 item 2): each trial's metric tags (name=value, once per trial) in
`trial_tag`, written by triggers on `metric` for every insert (the log pipeline's, a campaign file's import, a
bulk load), filled here from the metrics already stored. The filter probes its index instead of reading every
metric's JSON (docs/performance.md, "The trials page": 146-317 ms on SQLite, 461-561 ms on PostgreSQL at 50,000
trials before). The value is the database's text of the JSON value, as the filter compared before: SQLite's
json_each value (json_extract's), PostgreSQL's json_each_text (->>'s); JSON nulls and a name or value over 200
characters (the filter's whole bound) are not kept.

Revision ID: 0023
Revises: 0022
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel

from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_TAGS = (
    "FROM json_each({tags}) WHERE json_type({tags}) = 'object' AND json_each.type <> 'null' "
    "AND length(json_each.key) <= 200 AND length(json_each.value) <= 200"
)
SQLITE = [
    "CREATE TRIGGER trial_tag_metric_insert AFTER INSERT ON metric BEGIN "
    "INSERT OR IGNORE INTO trial_tag (trial_id, name, value) SELECT new.trial_id, json_each.key, json_each.value "
    + _SQLITE_TAGS.format(tags="new.tags")
    + "; END",
    "INSERT OR IGNORE INTO trial_tag (trial_id, name, value) SELECT DISTINCT metric.trial_id, json_each.key, "
    "json_each.value FROM metric, " + _SQLITE_TAGS.format(tags="metric.tags").removeprefix("FROM "),
]
_PG_TAGS = (
    "SELECT DISTINCT m.trial_id, t.key, t.value FROM {rows} m "
    "CROSS JOIN LATERAL json_each_text(CASE WHEN json_typeof(m.tags) = 'object' THEN m.tags END) t "
    "WHERE t.value IS NOT NULL AND length(t.key) <= 200 AND length(t.value) <= 200 "
    "ON CONFLICT DO NOTHING"
)
POSTGRES = [
    # One statement-level trigger: a bulk insert of metrics adds its trials' tags in one statement.
    "CREATE FUNCTION trial_tag_from_metric() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO trial_tag (trial_id, name, value) " + _PG_TAGS.format(rows="new_metrics") + "; RETURN NULL; END $$",
    "CREATE TRIGGER trial_tag_metric_insert AFTER INSERT ON metric REFERENCING NEW TABLE AS new_metrics "
    "FOR EACH STATEMENT EXECUTE FUNCTION trial_tag_from_metric()",
    "INSERT INTO trial_tag (trial_id, name, value) " + _PG_TAGS.format(rows="metric"),
]


def upgrade() -> None:
    op.create_table(
        "trial_tag",
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("value", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.ForeignKeyConstraint(["trial_id"], ["trial.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("trial_id", "name", "value"),
    )
    op.create_index("ix_trial_tag_name_value_trial", "trial_tag", ["name", "value", "trial_id"], unique=False)
    for statement in SQLITE if op.get_bind().dialect.name == "sqlite" else POSTGRES:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS trial_tag_metric_insert")
    else:
        op.execute("DROP TRIGGER IF EXISTS trial_tag_metric_insert ON metric")
        op.execute("DROP FUNCTION IF EXISTS trial_tag_from_metric()")
    op.drop_index("ix_trial_tag_name_value_trial", table_name="trial_tag")
    op.drop_table("trial_tag")
