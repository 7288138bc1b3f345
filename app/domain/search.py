"""Search (issue 45): one box over approaches (title, description, reason, evidence, prerequisites), trials
(id, parameters, error, log text) and verdicts (status changes' reasons), through the database's own full-text
search, ranked, the matching words marked, each hit linking to the field or the log line it matched.

- SQLite: FTS5 tables made by migration 0021. `search_doc` (approach fields, verdict reasons, trial
  parameters and errors) is kept by triggers; `search_log` is an external-content table over `log_chunk` that
  `index_pass` fills, called by the hub's indexer (app/services/search.py) off the log pipeline's own insert:
  the chunks past its cursor (`search_cursor`) newest first, then the gaps those passes left (`search_log_gap`,
  migration 0024) oldest first; a trimmed chunk already indexed leaves it by a delete trigger.
- PostgreSQL: GIN indexes over `to_tsvector('simple', ...)` of the same text, kept by PostgreSQL; the queries
  below use the same expressions, so the indexes serve them.

Every logged-in person may see every campaign (roles are board-wide), so a search spans them all; share links
(read-only status pages) give no search. Snippets carry MARK_START / MARK_END around the matched words: the
page escapes the text and only then turns the marks into <mark> (log text stays escaped).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select as sa_select
from sqlalchemy import text
from sqlmodel import Session, col, select

from app.domain.errors import Invalid
from app.models import Approach, Campaign, LogChunk, StatusChange, Trial

SEARCH_TABLE_PREFIX = "search_"  # the migration's tables (FTS5 and its cursor), not the models'
MARK_START, MARK_END = "\x02", "\x03"
MAX_QUERY = 200
MAX_TERMS = 12
LIMIT = 50
# A pass of the indexer holds SQLite's write lock while FTS5 tokenizes: small passes keep the log pipeline's
# commits waiting a few ms at most (8 MiB passes cost its paced p99 ~600 ms right after a flood).
INDEX_BATCH = 500  # log chunks a pass of the indexer takes at most
INDEX_BYTES = 256 << 10  # ... and at most this much text
_WORD = re.compile(r"\w+", re.UNICODE)
_APPROACH_FIELDS = ("title", "description", "reason", "evidence", "prerequisites")


@dataclass(frozen=True)
class Hit:
    """One result: what it is, where it is, the words around the match (marked), and where it links."""

    kind: str  # approach, verdict, trial, log
    campaign_slug: str
    campaign_name: str
    title: str
    field: str
    snippet: str
    link: str
    score: float


def words_of(query: str) -> list[str]:
    """The words of a query, as the search reads them (no error when there are none)."""
    return _WORD.findall(query)[:MAX_TERMS]


def terms(query: str) -> list[str]:
    """The words of a query ("KeyError: 12" -> KeyError, 12); Invalid when there are none."""
    if len(query) > MAX_QUERY:
        raise Invalid(f"a search of at most {MAX_QUERY} characters", field="q")
    words = _WORD.findall(query)[:MAX_TERMS]
    if not words:
        raise Invalid("type a word to search for", field="q")
    return words


def _fts_query(words: list[str]) -> str:
    # Each word quoted: FTS5 reads it as a string, never as its query syntax (AND, NEAR, column filters).
    return " ".join('"' + w.replace('"', '""') + '"' for w in words)


def _is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def search(session: Session, query: str, *, limit: int = LIMIT) -> list[Hit]:
    """The best `limit` hits for `query` across every campaign, best first."""
    words = terms(query)
    hits = _postgres(session, words, limit) if _is_postgres(session) else _sqlite(session, words, limit)
    hits += _trial_by_id(session, query)
    hits.sort(key=lambda h: -h.score)
    return hits[:limit]


def _trial_by_id(session: Session, query: str) -> list[Hit]:
    found = re.fullmatch(r"\s*(?:trial\s*)?#?\s*([1-9][0-9]{0,15})\s*", query, re.I)
    if not found:
        return []
    trial = session.get(Trial, int(found.group(1)))
    if trial is None:
        return []
    place = _places(session, approach_ids={trial.approach_id})
    slug, name, _key, title = place[trial.approach_id]
    label = f"{MARK_START}#{trial.id}{MARK_END} {trial.state}"
    return [Hit("trial", slug, name, f"trial #{trial.id} of {title}", "id", label, f"/trials/{trial.id}", 1e9)]


def _places(session: Session, approach_ids: set[int]) -> dict[int, tuple[str, str, str, str]]:
    """approach id -> (campaign slug, campaign name, approach key, approach title)."""
    if not approach_ids:
        return {}
    rows = session.execute(
        sa_select(col(Approach.id), col(Campaign.slug), col(Campaign.name), col(Approach.key), col(Approach.title))
        .join(Campaign, col(Campaign.id) == col(Approach.campaign_id))
        .where(col(Approach.id).in_(approach_ids))
    ).all()
    return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows if r[0] is not None}


def _hit(kind: str, field: str, snippet: str, score: float, place: tuple[str, str, str, str], **link: Any) -> Hit:
    slug, name, key, title = place
    if kind == "approach":
        return Hit(kind, slug, name, title, field, snippet, f"/campaigns/{slug}/approaches/{key}#field-{field}", score)
    if kind == "verdict":
        return Hit(
            kind, slug, name, f"{title}: a status change", field, snippet,
            f"/campaigns/{slug}/approaches/{key}#change-{link['ref']}", score,
        )  # fmt: skip
    if kind == "trial":
        return Hit(
            kind, slug, name, f"trial #{link['ref']} of {title}", field, snippet, f"/trials/{link['ref']}", score
        )
    trial_id, seq, line = link["trial_id"], link["seq"], link["line"]
    return Hit(
        kind, slug, name, f"trial #{trial_id} of {title}: log", f"line {line} of chunk {seq}", snippet,
        f"/trials/{trial_id}/log/{seq}#L{line}", score,
    )  # fmt: skip


def matched_line(data: str, words: list[str]) -> int:
    """The first line (1-based) of a log chunk holding one of the words (case-insensitive), else 1."""
    lowered = [w.lower() for w in words]
    for n, line in enumerate(data.splitlines(), start=1):
        tokens = {t.lower() for t in _WORD.findall(line)}
        if any(w in tokens for w in lowered):
            return n
    return 1


# --- SQLite: FTS5 ---------------------------------------------------------------------------------------------


def _sqlite(session: Session, words: list[str], limit: int) -> list[Hit]:
    q = _fts_query(words)
    docs = session.execute(
        text(
            "SELECT kind, ref, field, snippet(search_doc, 3, :a, :b, '…', 16), bm25(search_doc) FROM search_doc "
            "WHERE search_doc MATCH :q ORDER BY bm25(search_doc) LIMIT :n"
        ),
        {"q": q, "a": MARK_START, "b": MARK_END, "n": limit},
    ).all()
    logs = session.execute(
        text(
            "SELECT c.trial_id, c.seq, c.data, snippet(search_log, 0, :a, :b, '…', 16), bm25(search_log) "
            "FROM search_log JOIN log_chunk c ON c.id = search_log.rowid "
            "WHERE search_log MATCH :q ORDER BY bm25(search_log) LIMIT :n"
        ),
        {"q": q, "a": MARK_START, "b": MARK_END, "n": limit},
    ).all()
    return _resolve(session, [(k, int(r), f, s, -float(b)) for k, r, f, s, b in docs], logs, words)


def _resolve(
    session: Session, docs: list[tuple[str, int, str, str, float]], logs: Sequence[Any], words: list[str]
) -> list[Hit]:
    """Rows of the index -> hits with their campaign, approach and link (one query per kind)."""
    verdict_ids = {r for k, r, *_ in docs if k == "verdict"}
    trial_ids = {r for k, r, *_ in docs if k == "trial"} | {row[0] for row in logs}
    verdict_of = (
        dict(
            session.exec(
                select(StatusChange.id, StatusChange.approach_id).where(col(StatusChange.id).in_(verdict_ids))
            ).all()
        )
        if verdict_ids
        else {}
    )
    trial_of = (
        dict(session.exec(select(Trial.id, Trial.approach_id).where(col(Trial.id).in_(trial_ids))).all())
        if trial_ids
        else {}
    )
    approach_ids = {r for k, r, *_ in docs if k == "approach"} | set(verdict_of.values()) | set(trial_of.values())
    place = _places(session, approach_ids)
    hits = []
    for kind, ref, field, snippet, score in docs:
        approach_id = {"approach": ref, "verdict": verdict_of.get(ref), "trial": trial_of.get(ref)}.get(kind)
        if approach_id is not None and approach_id in place:
            hits.append(_hit(kind, field, snippet, score, place[approach_id], ref=ref))
    for trial_id, seq, data, snippet, score in logs:
        found = trial_of.get(trial_id)
        if found is not None and found in place:
            rank = -float(score) if score < 0 else float(score)  # FTS5's bm25 is negative, best lowest
            line = matched_line(data, words)
            hits.append(_hit("log", "log", snippet, rank, place[found], trial_id=trial_id, seq=seq, line=line))
    return hits


def index_logs(session: Session, batch: int = INDEX_BATCH, max_bytes: int = INDEX_BYTES) -> int:
    """SQLite: make log chunks searchable, the newest first (at most `batch` chunks or `max_bytes` of text);
    returns how many were indexed. PostgreSQL keeps its index itself: 0."""
    return index_pass(session, batch, max_bytes)[0]


def _take(rows: Sequence[Any], batch: int, max_bytes: int, first: bool) -> tuple[list[int], int]:
    """The leading rows (id, size) within `batch` chunks and `max_bytes` (one at least where `first`)."""
    taken: list[int] = []
    total = 0
    for row_id, size in rows[:batch]:
        if (taken or not first) and total + size > max_bytes:
            break
        total += size
        taken.append(row_id)
    return taken, total


def index_pass(session: Session, batch: int = INDEX_BATCH, max_bytes: int = INDEX_BYTES) -> tuple[int, bool]:
    """`index_logs`, and whether chunks were left waiting (the indexer is behind: either limit stops a pass,
    500 small chunks or four of the pipeline's 64 KiB chunks).

    First the chunks stored since the last pass (past the cursor `search_cursor.last_id`), newest first: fresh
    logs are searchable after one pass whatever the backlog; those it leaves below them become a gap
    (`search_log_gap`: the ids between after_id and before_id, not yet indexed). Then the rest of the pass's
    limits on the gaps, oldest first. Indexed: every id at or below the cursor outside the gaps, each once."""
    if _is_postgres(session):
        return 0, False
    last = session.execute(text("SELECT last_id FROM search_cursor WHERE name = 'log'")).scalar_one()
    fresh = session.execute(
        text("SELECT id, length(data) FROM log_chunk WHERE id > :last ORDER BY id DESC LIMIT :n"),
        {"last": last, "n": batch + 1},
    ).all()
    taken, total = _take(fresh, batch, max_bytes, first=True)
    count = len(taken)
    if taken:
        low, top = taken[-1], taken[0]
        session.execute(
            text("INSERT INTO search_log (rowid, data) SELECT id, data FROM log_chunk WHERE id >= :low AND id <= :top"),
            {"low": low, "top": top},
        )
        if count < len(fresh):  # older fresh chunks wait below the ones just indexed
            session.execute(
                text("INSERT INTO search_log_gap (after_id, before_id) VALUES (:after, :before)"),
                {"after": last, "before": low},
            )
        session.execute(text("UPDATE search_cursor SET last_id = :top WHERE name = 'log'"), {"top": top})
    gaps = session.execute(text("SELECT after_id, before_id FROM search_log_gap ORDER BY after_id")).all()
    for after, before in gaps:
        if count >= batch or (count and total >= max_bytes):
            break
        rows = session.execute(
            text("SELECT id, length(data) FROM log_chunk WHERE id > :after AND id < :before ORDER BY id LIMIT :n"),
            {"after": after, "before": before, "n": batch - count + 1},
        ).all()
        got, size = _take(rows, batch - count, max_bytes - total, first=count == 0)
        if rows and not got:  # the next chunk is over what the pass has left
            break
        if got:
            session.execute(
                text(
                    "INSERT INTO search_log (rowid, data) SELECT id, data FROM log_chunk "
                    "WHERE id > :after AND id <= :upto"
                ),
                {"after": after, "upto": got[-1]},
            )
            count, total = count + len(got), total + size
        if len(got) == len(rows):  # the gap is indexed (or its chunks were trimmed)
            session.execute(text("DELETE FROM search_log_gap WHERE after_id = :after"), {"after": after})
        else:
            session.execute(
                text("UPDATE search_log_gap SET after_id = :upto WHERE after_id = :after"),
                {"upto": got[-1], "after": after},
            )
    more = count < len(fresh) or session.execute(text("SELECT count(*) FROM search_log_gap")).scalar_one() > 0
    return count, bool(more)


def log_backlog(session: Session) -> int:
    """Chunks stored but not yet searchable (SQLite; 0 on PostgreSQL)."""
    if _is_postgres(session):
        return 0
    return int(
        session.execute(
            text(
                "SELECT (SELECT count(*) FROM log_chunk WHERE id > (SELECT last_id FROM search_cursor WHERE name = 'log'))"
                " + (SELECT coalesce(sum((SELECT count(*) FROM log_chunk WHERE id > g.after_id AND id < g.before_id)), 0)"
                " FROM search_log_gap g)"
            )
        ).scalar_one()
    )


# --- PostgreSQL: tsvector + GIN -----------------------------------------------------------------------------

_HEADLINE = f"StartSel={MARK_START}, StopSel={MARK_END}, MaxWords=24, MinWords=8, MaxFragments=1"


def _words(expression: str) -> str:
    # PostgreSQL's parser reads <...> as markup (and skips a <script> element's text): the angle brackets go, so
    # a log line "<b>KeyError: 12</b>" is words like any other.
    return f"to_tsvector('simple', translate({expression}, '<>', '  '))"


# The indexed documents (migration 0021 builds a GIN index on each, over exactly these expressions).
PG_DOCUMENTS = {
    "log_chunk": _words("data"),
    "approach": _words("title || ' ' || description || ' ' || reason || ' ' || evidence || ' ' || prerequisites"),
    "status_change": _words("reason"),
    "trial": _words("CAST(recipe AS TEXT) || ' ' || error"),
}


def _field_of(row: dict[str, str], words: list[str]) -> str:
    lowered = {w.lower() for w in words}
    for name, value in row.items():
        if lowered & {t.lower() for t in _WORD.findall(value or "")}:
            return name
    return next(iter(row))


def _postgres(session: Session, words: list[str], limit: int) -> list[Hit]:
    q = " ".join(words)
    params = {"q": q, "n": limit, "h": _HEADLINE}
    approaches = session.execute(
        text(
            f"SELECT id, title, description, reason, evidence, prerequisites, ts_rank({PG_DOCUMENTS['approach']}, query) "
            f"AS r FROM approach, plainto_tsquery('simple', :q) query "
            f"WHERE {PG_DOCUMENTS['approach']} @@ query ORDER BY r DESC LIMIT :n"
        ),
        params,
    ).all()
    verdicts = session.execute(
        text(
            f"SELECT id, ts_headline('simple', reason, query, :h), ts_rank({PG_DOCUMENTS['status_change']}, query) r "
            f"FROM status_change, plainto_tsquery('simple', :q) query "
            f"WHERE {PG_DOCUMENTS['status_change']} @@ query ORDER BY r DESC LIMIT :n"
        ),
        params,
    ).all()
    trials = session.execute(
        text(
            f"SELECT id, CAST(recipe AS TEXT), error, ts_rank({PG_DOCUMENTS['trial']}, query) r "
            f"FROM trial, plainto_tsquery('simple', :q) query "
            f"WHERE {PG_DOCUMENTS['trial']} @@ query ORDER BY r DESC LIMIT :n"
        ),
        params,
    ).all()
    # The snippet from the text itself (PostgreSQL's ts_headline would drop what it reads as markup).
    logs = [
        (trial_id, seq, data, mark(data, words), rank)
        for trial_id, seq, data, rank in session.execute(
            text(
                f"SELECT trial_id, seq, data, ts_rank({PG_DOCUMENTS['log_chunk']}, query) r "
                f"FROM log_chunk, plainto_tsquery('simple', :q) query "
                f"WHERE {PG_DOCUMENTS['log_chunk']} @@ query ORDER BY r DESC LIMIT :n"
            ),
            params,
        ).all()
    ]
    docs: list[tuple[str, int, str, str, float]] = []
    for row_id, *values, rank in approaches:
        fields = dict(zip(_APPROACH_FIELDS, values, strict=True))
        field = _field_of(fields, words)
        docs.append(("approach", row_id, field, mark(fields[field], words), float(rank)))
    docs += [("verdict", row_id, "reason", snippet, float(rank)) for row_id, snippet, rank in verdicts]
    for row_id, recipe, error, rank in trials:
        fields = {"parameters": recipe or "", "error": error or ""}
        field = _field_of(fields, words)
        docs.append(("trial", row_id, field, mark(fields[field], words), float(rank)))
    return _resolve(session, docs, logs, words)


def mark(value: str, words: list[str], width: int = 160) -> str:
    """A snippet of `value` around the first matched word, the words marked (as the databases' snippets are)."""
    pattern = re.compile(r"\b(" + "|".join(re.escape(w) for w in words) + r")\b", re.I)
    found = pattern.search(value)
    start = max(0, (found.start() if found else 0) - width // 3)
    part = value[start : start + width]
    return ("…" if start else "") + pattern.sub(lambda m: MARK_START + m.group(0) + MARK_END, part)


def log_chunk(session: Session, trial_id: int, seq: int) -> LogChunk | None:
    """The chunk a log hit links to (its first attempt's, where a trial ran more than once)."""
    return session.exec(
        select(LogChunk).where(LogChunk.trial_id == trial_id, LogChunk.seq == seq).order_by(col(LogChunk.id))
    ).first()
