"""Campaign files: a campaign as YAML, so a team can keep it in git. Export then import is
round-trip equal; a bad file is refused whole with an error naming the line and the field.

Format (version 1):
    format: campaign-board/v1
    campaign: {slug, name, description, baseline_tok_s, accept_length, ...}
    approaches:
      - key: nccl-tree
        title: NCCL Tree algorithm
        status: dead_end
        reason: ...
        history:            # optional, oldest first: the dates the timeline draws
          - {at: 2025-03-01T10:00:00+00:00, to: untested, reason: added}
          - {at: 2025-03-02T15:00:00+00:00, to: dead_end, reason: ...}
        ...
    campaign.input_sources: {model input: where its value comes from}
    campaign.reported: figures reported elsewhere, each with its source (schemas.ReportedFigure)
    results:                # optional (export --with-results): ended trials with their metrics,
      - {approach, state, recipe, fingerprint, dates, metrics: [...]}   # see campaign_results
    replays:                # optional (export --with-results, after results): see replay.ReplayFile
      - {runner, runner_fingerprint, requested_by, state, created_at, ended_at,
         entries: [{approach, status, reason, ..., verdict_trial: {created_at, started_at, finished_at},
                    trial: {...}, proposed, after} | {approach, status, skipped}]}
"""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import lru_cache
from itertools import chain
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sqlalchemy import select as sa_select  # typed for five columns (sqlmodel's select stops at four)
from sqlalchemy import tuple_
from sqlmodel import Session, col, select

from app.domain import campaign_results, campaigns, replay
from app.domain.errors import Invalid
from app.domain.units import plural
from app.models import Activity, Approach, ApproachStatus, Campaign, HistoryKind, RunOrder, StatusChange, aware, utcnow
from app.schemas import ApproachCreate, CampaignCreate, ImportSummary, error_words

FORMAT = "campaign-board/v1"


class CampaignSection(CampaignCreate):
    """The file's `campaign:` mapping: the campaign's fields, and what "Run next candidate" follows
    (`run_order`: `priority` when a person pinned the order; written only then)."""

    run_order: RunOrder = RunOrder.ranking


CAMPAIGN_FIELDS = ["slug"] + [f for f in CampaignSection.model_fields if f != "slug"]


class HistoryEntry(BaseModel):
    """One status change, with the date it happened (the timeline draws these dates, not the import's)."""

    model_config = ConfigDict(extra="forbid")
    at: datetime
    to: ApproachStatus
    reason: str = Field("", max_length=20000)
    actor: str = Field("", max_length=120)

    @field_validator("at", mode="before")
    @classmethod
    def _a_date(cls, value: Any) -> Any:
        # YAML gives a datetime (unquoted) or a string; a number is not a date here (the schema: date-time).
        if not isinstance(value, (datetime, str)):
            raise ValueError("must be a date and time, e.g. 2025-03-01T10:00:00+00:00")
        return value

    @field_validator("at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return aware(value) or value


def _named(value: Any, names: set[str]) -> bool:
    """Whether a value read from a file is one of these names (a file may hold any YAML there)."""
    return isinstance(value, str) and value in names


class ApproachFile(ApproachCreate):
    bound_to: dict[str, Any] | None = None
    verdict_fingerprint: dict[str, Any] | None = None
    history: list[HistoryEntry] | None = None  # oldest first; used when the import creates the approach

    @model_validator(mode="before")
    @classmethod
    def _decided_only(cls, value: Any) -> Any:
        # Files written before issue 43 may name queued / running (a trial's activity, once stored as the
        # status): their history drops those entries, and the status is the last one a person decided.
        if not isinstance(value, dict):
            return value
        driven = {a.value for a in Activity}
        history = value.get("history")
        if isinstance(history, list):
            history = [e for e in history if not (isinstance(e, dict) and _named(e.get("to"), driven))]
            value = {**value, "history": history}
        if _named(value.get("status"), driven):
            decided = [e.get("to") for e in history or [] if isinstance(e, dict)]
            value = {**value, "status": decided[-1] if decided else ApproachStatus.untested.value}
        return value

    @model_validator(mode="after")
    def _verdict_has_reason(self) -> ApproachFile:
        if self.status in campaigns.NEEDS_REASON and not self.reason.strip():
            raise ValueError(f"status {self.status.value} needs a reason")
        if self.history:
            if any(b.at < a.at for a, b in zip(self.history, self.history[1:])):
                raise ValueError("history: entries must be oldest first")
        return self


class CampaignFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: str = Field(FORMAT, pattern=r"^campaign-board/v1$")
    campaign: CampaignSection
    approaches: list[ApproachFile] = Field(default_factory=list)
    results: list[campaign_results.ResultTrial] | None = None  # trials with their metrics (campaign_results)
    replays: list[replay.ReplayFile] | None = None  # with results: the replays, their trials by identity

    @model_validator(mode="after")
    def _reported_approaches_exist(self) -> CampaignFile:
        keys = {a.key for a in self.approaches}
        for i, figure in enumerate(self.campaign.reported or []):
            if figure.approach is not None and figure.approach not in keys:
                raise ValueError(f"campaign.reported[{i}]: no approach {figure.approach!r} in this file")
        return self


# ---- export -------------------------------------------------------------------------------

EXPORT_BATCH = 100  # approaches per read (their histories: one more query)
HISTORY_FETCH = 2000  # history rows per fetch
PIECE_ENTRIES = 2000  # history entries (and approaches) per piece of the stream, at most
WIDTH = 100  # the dumper's line width: libyaml folds a long plain or quoted scalar at a space past it


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """libyaml's emitter when PyYAML has it (the same text, about 5x faster), else the pure-Python one."""


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # Multi-line text (evidence, logs) as literal blocks: readable in diffs.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_presenter)
_RESOLVER = _Dumper(io.StringIO())  # the dumper's own resolver: which plain strings read back as str
_STR_TAG = "tag:yaml.org,2002:str"


def _dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=WIDTH)


# Printable ASCII without a leading or trailing space: one line, which libyaml writes plain or single-quoted.
_ONE_LINE = re.compile(r"[!-~](?:[ -~]*[!-~])?")
# What makes libyaml refuse such a string plain in block context (emitter.c, yaml_emitter_analyze_scalar):
# "---" or "..." first, an indicator first, "?", ":" or "-" first followed by a space or the end, then
# anywhere ": ", a final ":", or " #".
_NOT_PLAIN = re.compile(r"---|\.\.\.|[#,\[\]{}&*!|>'\"%@`]|[?:-](?: |$)|.*(?:: |:$| #)")


def _inline_scalar(value: str, column: int) -> str | None:
    """`value` exactly as the dumper writes it as a block mapping's value that starts at `column`, when that
    is provably one unfolded line; None otherwise (the caller dumps it). Plain unless libyaml's analysis
    refuses it (`_NOT_PLAIN`) or the resolver reads it back as something else than a string ("true", "12",
    "2025-03-01", "null"): then single-quoted, with ' doubled. libyaml breaks a line only at a space past
    WIDTH, so text that ends by WIDTH is never folded."""
    if not _ONE_LINE.fullmatch(value):
        return None
    if _NOT_PLAIN.match(value) or _RESOLVER.resolve(yaml.ScalarNode, value, (True, False)) != _STR_TAG:
        value = "'" + value.replace("'", "''") + "'"
    return value if column + len(value) <= WIDTH else None


_inline_repeated = lru_cache(maxsize=1024)(_inline_scalar)  # for values that repeat: statuses, actors
# What `_history_entry` makes of a datetime: `_inline_scalar` single-quotes it (a timestamp to the resolver, no
# space to fold at), checked here once per value for speed.
_UTC_ISO = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{6})?\+00:00")


def _history_entry(at: datetime, to: str, reason: str, actor: str) -> dict[str, Any]:
    # Stored in UTC; SQLite gives it back naive.
    iso = at.isoformat() + "+00:00" if at.tzinfo is None else at.astimezone(UTC).isoformat()
    entry: dict[str, Any] = {"at": iso, "to": to}
    if reason:
        entry["reason"] = reason
    if actor:
        entry["actor"] = actor
    return entry


class _Pieces:
    """Dumps a document a piece at a time, as the dumper writes it whole: the top-level keys before
    `approaches:`, then lists whose items stand where they stand in the document (a block list under a
    top-level key is not indented, so an item of `approaches:` stands at the same columns in a one-item
    list). Values read from the database are never one shared object, so the whole dump has no anchors
    (`&id001`) that pieces would number apart. One thing differs: libyaml ends a document with a "..."
    line when its last literal block keeps its final line breaks (`|+`: the end is not visible otherwise);
    a piece dumped alone says so about itself only, so the marker is cut from the pieces and written once
    by `end()` when the last literal block of the whole document asks for it."""

    KEEP = "\n\n"  # a string libyaml writes as a `|+` block

    def __init__(self) -> None:
        self.open_ended = False

    def dump(self, data: Any) -> str:
        text = _dump(data)
        if text.endswith("\n...\n"):  # a line "..." at column 0: the marker, never content
            self.open_ended = True
            return text[:-4]
        if self.open_ended and "\\n" in repr(data):  # a literal block may have closed the open end:
            # dumped after a `|+` block, the piece still ends open only if it has no literal block itself
            self.open_ended = _dump([self.KEEP, data]).endswith("\n...\n")
        return text

    def end(self) -> str:
        return "...\n" if self.open_ended else ""


def _history_text(entry: dict[str, Any], pieces: _Pieces) -> str:
    """One history entry's lines as they stand in the file (an item of the `history:` list of an approach of
    `approaches:`): written directly when every value is `_inline_scalar`, else by the dumper in the same
    context (a one-approach list whose mapping starts with `history:`, that first line cut)."""
    at = f"'{entry['at']}'" if _UTC_ISO.fullmatch(entry["at"]) else _inline_scalar(entry["at"], 8)  # "  - at: "
    to = _inline_repeated(entry["to"], 8)  # "    to: "
    reason = _inline_scalar(entry["reason"], 12) if "reason" in entry else ""  # "    reason: "
    actor = _inline_repeated(entry["actor"], 11) if "actor" in entry else ""  # "    actor: "
    if at is None or to is None or reason is None or actor is None:
        return pieces.dump([{"history": [entry]}]).removeprefix("- history:\n")
    text = f"  - at: {at}\n    to: {to}\n"
    if reason:
        text += f"    reason: {reason}\n"
    if actor:
        text += f"    actor: {actor}\n"
    return text


# Written only when they differ from their default (unset, or the comparisons' default rule), so files of
# campaigns that never use them read as before.
OPTIONAL_CAMPAIGN_FIELDS: dict[str, Any] = {
    name: CampaignSection.model_fields[name].default
    for name in (
        "run_order",
        "accept_length_by_k",
        "accept_alphas",
        "accept_unconditional",
        "speculation_batches",
        "speculation_draft_tokens",
        "answer_conditions",
        "stats_confidence",
        "stats_min_effect",
    )
}


def _campaign_mapping(campaign: Campaign) -> dict[str, Any]:
    return {
        name: getattr(campaign, name)
        for name in CAMPAIGN_FIELDS
        if name not in OPTIONAL_CAMPAIGN_FIELDS or getattr(campaign, name) != OPTIONAL_CAMPAIGN_FIELDS[name]
    }


def _approach_mapping(approach: Approach) -> dict[str, Any]:
    """An approach's fields in the file, without its history (which comes last)."""
    item: dict[str, Any] = {"key": approach.key, "title": approach.title, "status": approach.status}
    for name in ("reason", "description", "evidence", "effort", "prerequisites"):
        if getattr(approach, name):
            item[name] = getattr(approach, name)
    for name in ("recipe", "requirements", "bound_to", "verdict_fingerprint"):
        if getattr(approach, name) is not None:
            item[name] = getattr(approach, name)
    return item


def _approach_batches(session: Session, campaign: Campaign) -> Iterator[list[Approach]]:
    """The campaign's approaches in priority order, EXPORT_BATCH at a time (keyset on position, id)."""
    after: tuple[int, int] | None = None
    while True:
        query = select(Approach).where(Approach.campaign_id == campaign.id)
        if after is not None:
            query = query.where(tuple_(col(Approach.position), col(Approach.id)) > after)
        batch = list(session.exec(query.order_by(col(Approach.position), col(Approach.id)).limit(EXPORT_BATCH)))
        if not batch:
            return
        yield batch
        after = (batch[-1].position, batch[-1].id)  # type: ignore[assignment]


def _history_rows(session: Session, batch: list[Approach]) -> Iterator[tuple[int, datetime, str, str, str]]:
    """The batch's status changes in file order (approach by approach, each oldest first) in one query,
    fetched HISTORY_FETCH rows at a time (a server-side cursor on PostgreSQL): a long history is never
    held whole."""
    result = session.connection().execute(  # Core rows: no ORM loading step per row
        sa_select(
            col(StatusChange.approach_id),
            col(StatusChange.at),
            col(StatusChange.to_status),
            col(StatusChange.reason),
            col(StatusChange.actor),
        )
        .join(Approach, col(Approach.id) == col(StatusChange.approach_id))
        .where(col(StatusChange.approach_id).in_([a.id for a in batch]), col(StatusChange.kind) == HistoryKind.status)
        .order_by(col(Approach.position), col(Approach.id), col(StatusChange.at), col(StatusChange.id))
        .execution_options(yield_per=HISTORY_FETCH)
    )
    return chain.from_iterable(result.partitions())


def export_stream(session: Session, slug: str, with_results: bool = False) -> Iterator[str]:
    """The campaign file in pieces, in constant memory: the format and campaign, then EXPORT_BATCH approaches
    at a time (two queries each), a piece at most every PIECE_ENTRIES history entries: the text that dumping
    the whole file as one structure gives (tests compare). Each approach is dumped as a one-item list
    (`_Pieces`), then its history (its last key) by `_history_text`. `with_results`: then the ended trials
    with their metrics (`campaign_results.export_pieces`)."""
    campaign = campaigns.get_campaign(session, slug)
    header = {"format": FORMAT, "campaign": _campaign_mapping(campaign)}
    batches = _approach_batches(session, campaign)
    first = next(batches, None)
    if first is None:
        yield _dump({**header, "approaches": []})
        return
    pieces = _Pieces()
    yield pieces.dump(header) + "approaches:\n"
    for batch in chain([first], batches):
        rows = _history_rows(session, batch)
        row = next(rows, None)
        parts = []
        for a in batch:
            parts.append(pieces.dump([_approach_mapping(a)]))
            approach_id = a.id
            if row is not None and row[0] == approach_id:
                parts.append("  history:\n")
            while row is not None and row[0] == approach_id:
                parts.append(_history_text(_history_entry(*row[1:]), pieces))
                if len(parts) >= PIECE_ENTRIES:
                    yield "".join(parts)
                    parts = []
                row = next(rows, None)
        yield "".join(parts)
    if with_results:
        yield from campaign_results.export_pieces(session, campaign, pieces)
        yield from replay.export_pieces(session, campaign, pieces)
    if end := pieces.end():
        yield end


def export_campaign(session: Session, campaign: Campaign) -> str:
    """The whole campaign file as one string (small campaigns, tests); routes and the CLI stream it."""
    return "".join(export_stream(session, campaign.slug))


# ---- import -------------------------------------------------------------------------------


def _parse_yaml(text: str) -> tuple[Any, yaml.Node | None]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise Invalid(f"{where}not valid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise Invalid(f"not valid YAML: {exc}") from None
    return data, node


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of the value at `loc` in the YAML tree (the closest ancestor that exists)."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if getattr(k, "value", None) == part), None)
            if match is None:
                break
            line = match[0].start_mark.line + 1
            node = match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _describe_loc(data: Any, loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    cursor = data
    for part in loc:
        if isinstance(part, int) and isinstance(cursor, list) and part < len(cursor):
            cursor = cursor[part]
            key = cursor.get("key") if isinstance(cursor, dict) else None
            parts[-1:] = [f"{parts[-1] if parts else ''}[{part}]" + (f" ({key})" if key else "")]
        else:
            parts.append(str(part))
            cursor = cursor.get(part) if isinstance(cursor, dict) else None
    return ".".join(parts)


# "params.tokens (--tokens): must be ..." (a recipe's validator), "history: entries must be ...": the field it names
_NAMED_FIELD = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)( \(--[\w-]+\))?: ")


GZIP_MAGIC = b"\x1f\x8b"


def campaign_file_text(data: bytes, *, expanded_limit: int) -> str:
    """A campaign file's text from its bytes as sent: UTF-8 YAML, or that YAML gzip-compressed (`.yaml.gz`: a
    results campaign with its samples runs to megabytes of YAML). The caller bounds the bytes sent; here the
    decompression stops at `expanded_limit` bytes, so a small hostile upload cannot expand without bound."""
    raw = data
    if data[:2] == GZIP_MAGIC:
        inflate = zlib.decompressobj(wbits=31)
        try:
            raw = inflate.decompress(data, expanded_limit + 1)
        except zlib.error as exc:
            raise Invalid(f"the gzip file is damaged ({exc})", field="file") from None
        if len(raw) > expanded_limit or inflate.unconsumed_tail:
            raise Invalid(
                f"the gzip file expands past {expanded_limit} bytes (CAMPAIGN_MAX_CAMPAIGN_FILE_EXPANDED_BYTES)",
                field="file",
            )
        if not inflate.eof or inflate.unused_data:
            raise Invalid("the gzip file is truncated or holds more than one file", field="file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid(
            "not a UTF-8 text file (a campaign file is YAML, or YAML gzip-compressed)", field="file"
        ) from None


def parse_campaign_file(text: str) -> CampaignFile:
    """Validate a campaign file; Invalid names the line and field of the first problem."""
    data, node = _parse_yaml(text)
    if not isinstance(data, dict):
        raise Invalid("line 1: a campaign file is a mapping with 'format', 'campaign' and 'approaches'")
    try:
        parsed = CampaignFile.model_validate(data)
    except ValidationError as exc:
        messages = []
        fields = []
        for err in exc.errors()[:5]:
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
            msg = error_words(err)
            if named := _NAMED_FIELD.match(msg):  # a model's own check names its field: the line is that field's
                loc += tuple(named[1].split("."))
                if not named[2]:  # said once, by where it is ("campaign.accept_length: accept_length: ..." before)
                    msg = msg[named.end() :]
            line = _line_of(node, loc)
            where = f"line {line}: " if line else ""
            fields.append(_describe_loc(data, loc))
            messages.append(f"{where}{fields[-1]}: {msg}")
        raise Invalid("; ".join(messages), field=fields[0]) from None
    keys = [a.key for a in parsed.approaches]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise Invalid(f"approaches: {plural(len(dupes), 'duplicate key')}: {', '.join(dupes)}", field="approaches")
    campaign_results.check_approaches(parsed.results or [], set(keys), lambda loc: _line_of(node, loc))
    return parsed


def _replace_history(session: Session, approach: Approach, item: ApproachFile, actor: str) -> None:
    """A new approach's history is the file's, with its dates (not the import's single "added" change).
    A status edited in the file without a history entry is recorded as a change now."""
    assert approach.id is not None  # the approach is flushed before its history is written
    for change in session.exec(select(StatusChange).where(StatusChange.approach_id == approach.id)):
        session.delete(change)
    changes = [(entry.to.value, entry.reason, entry.actor, entry.at) for entry in item.history or []]
    if (changes[-1][0] if changes else "") != item.status.value:
        changes.append((item.status.value, item.reason, actor, utcnow()))
    previous = ""
    for to_status, reason, by, at in changes:
        session.add(
            StatusChange(
                approach_id=approach.id, from_status=previous, to_status=to_status, reason=reason, actor=by, at=at
            )
        )
        previous = to_status
    session.flush()


def import_campaign(session: Session, text: str, *, actor: str, replace: bool = False) -> ImportSummary:
    """Create the campaign, or bring an existing one (same slug) up to date with the file.

    Approaches are matched by key; their order in the file is their priority. A status that
    differs is a status change kept in history (by `actor`). Approaches missing from the file
    are kept unless `replace`. The caller's transaction makes this all or nothing.
    """
    parsed = parse_campaign_file(text)
    campaign, created = _upsert_campaign(session, parsed)
    existing = {a.key: a for a in campaigns.approaches(session, campaign)}
    added = changed = 0
    for position, item in enumerate(parsed.approaches, start=1):
        approach = existing.pop(item.key, None)
        if approach is None:
            approach = _add_approach(session, campaign, item, actor)
            added += 1
        elif _update_approach(session, approach, item, actor):
            changed += 1
        approach.position = position
        session.add(approach)
    removed, archived = _unlisted(session, list(existing.values()), replace, len(parsed.approaches))
    session.flush()
    kept = len(existing) - removed
    summary = (
        f"{'created' if created else 'updated'} campaign {campaign.slug!r}: {added} approach(es) added, "
        f"{changed} changed, {removed} removed, {kept} kept that the file does not list"
    )
    if archived:
        summary += f" ({archived} of them archived: they have trials, which are kept)"
    if parsed.results is not None:
        trials, metrics, already = campaign_results.import_results(session, campaign, parsed.results)
        summary += (
            f"; results: {plural(trials, 'trial')} with {plural(metrics, 'metric')} added, {already} already here"
        )
    if parsed.replays is not None:
        replays, kept_replays = replay.import_replays(session, campaign, parsed.replays)
        summary += f"; replays: {replays} added, {kept_replays} already here"
    return ImportSummary(
        campaign=campaign.slug,
        created=created,
        added=added,
        changed=changed,
        removed=removed,
        kept=kept,
        summary=summary,
    )


def _upsert_campaign(session: Session, parsed: CampaignFile) -> tuple[Campaign, bool]:
    """The file's campaign, created or brought up to date by slug; and whether it was created."""
    campaign = session.exec(select(Campaign).where(Campaign.slug == parsed.campaign.slug)).first()
    if campaign is None:
        return campaigns.create_campaign(session, parsed.campaign), True  # run_order too (a Campaign column)
    for name, value in parsed.campaign.model_dump().items():
        setattr(campaign, name, value)
    campaign.updated_at = utcnow()
    session.add(campaign)
    return campaign, False


def _approach_values(item: ApproachFile) -> dict[str, Any]:
    """The approach's columns the file sets directly (its status goes through history)."""
    values = item.model_dump(exclude={"key", "status", "reason", "requirements", "history"})
    values["requirements"] = item.requirements.model_dump() if item.requirements else None
    return values


def _add_approach(session: Session, campaign: Campaign, item: ApproachFile, actor: str) -> Approach:
    approach = campaigns.add_approach(
        session, campaign, ApproachCreate(**item.model_dump(include=set(ApproachCreate.model_fields))), actor
    )
    values = _approach_values(item)
    for name in ("bound_to", "verdict_fingerprint"):
        setattr(approach, name, values[name])
    if item.history:
        _replace_history(session, approach, item, actor)
    return approach


def _update_approach(session: Session, approach: Approach, item: ApproachFile, actor: str) -> bool:
    """Bring an existing approach up to the file's; whether anything changed."""
    values = _approach_values(item)
    before = (approach.status, approach.reason, [getattr(approach, n) for n in values])
    for name, value in values.items():
        setattr(approach, name, value)
    if approach.status != item.status.value:
        pending = approach.pending_trial_id  # a file's status is no verdict on this board's trial
        campaigns.change_status(session, approach, item.status, item.reason, actor)
        approach.pending_trial_id = pending
    approach.reason = item.reason
    if before == (approach.status, approach.reason, [getattr(approach, n) for n in values]):
        return False
    approach.updated_at = utcnow()
    return True


def _unlisted(session: Session, unlisted: list[Approach], replace: bool, offset: int) -> tuple[int, int]:
    """The approaches the file does not list go after its own; with `replace` those without measurements are
    removed and those with trials archived (never measurements). How many were removed, and archived."""
    removed = archived = 0
    for approach in sorted(unlisted, key=lambda a: a.position):
        held = campaigns.evidence(session, approach) if replace else None
        if held is not None and not held.measured:
            session.delete(approach)
            removed += 1
            continue
        if held is not None and approach.archived_at is None and held.active_trial is None:
            approach.archived_at = utcnow()
            archived += 1
        offset += 1
        approach.position = offset
        session.add(approach)
    return removed, archived


def campaign_file_schema() -> dict[str, Any]:
    """The JSON schema of a campaign file's content, its models under `$defs` (the import's OpenAPI body)."""
    return CampaignFile.model_json_schema()
