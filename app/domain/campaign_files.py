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
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sqlalchemy import select as sa_select  # typed for five columns (sqlmodel's select stops at four)
from sqlmodel import Session, col, select

from app.domain import inventory
from app.domain.errors import Invalid
from app.models import Approach, ApproachStatus, Campaign, StatusChange, utcnow
from app.schemas import ApproachCreate, CampaignCreate

FORMAT = "campaign-board/v1"
CAMPAIGN_FIELDS = ["slug"] + [f for f in CampaignCreate.model_fields if f != "slug"]


class HistoryEntry(BaseModel):
    """One status change, with the date it happened (the timeline draws these dates, not the import's)."""

    model_config = ConfigDict(extra="forbid")
    at: datetime
    to: ApproachStatus
    reason: str = Field("", max_length=20000)
    actor: str = Field("", max_length=120)

    @field_validator("at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class ApproachFile(ApproachCreate):
    bound_to: dict[str, Any] | None = None
    verdict_fingerprint: dict[str, Any] | None = None
    history: list[HistoryEntry] | None = None  # oldest first; used when the import creates the approach

    @model_validator(mode="after")
    def _verdict_has_reason(self) -> ApproachFile:
        if self.status in inventory.NEEDS_REASON and not self.reason.strip():
            raise ValueError(f"status {self.status.value} needs a reason")
        if self.history:
            if any(b.at < a.at for a, b in zip(self.history, self.history[1:])):
                raise ValueError("history: entries must be oldest first")
        return self


class CampaignFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: str = Field(FORMAT, pattern=r"^campaign-board/v1$")
    campaign: CampaignCreate
    approaches: list[ApproachFile] = Field(default_factory=list)

    @model_validator(mode="after")
    def _reported_approaches_exist(self) -> CampaignFile:
        keys = {a.key for a in self.approaches}
        for i, figure in enumerate(self.campaign.reported or []):
            if figure.approach is not None and figure.approach not in keys:
                raise ValueError(f"campaign.reported[{i}]: no approach {figure.approach!r} in this file")
        return self


# ---- export -------------------------------------------------------------------------------


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """libyaml's emitter when PyYAML has it (the same text, about 5x faster), else the pure-Python one."""


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # Multi-line text (evidence, logs) as literal blocks: readable in diffs.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_presenter)


def _histories(session: Session, campaign: Campaign) -> dict[int, list[dict[str, Any]]]:
    """Every approach's status changes, oldest first, in one query."""
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    rows = session.execute(
        sa_select(
            col(StatusChange.approach_id),
            col(StatusChange.at),
            col(StatusChange.to_status),
            col(StatusChange.reason),
            col(StatusChange.actor),
        )
        .join(Approach, col(Approach.id) == col(StatusChange.approach_id))
        .where(col(Approach.campaign_id) == campaign.id)
        .order_by(col(StatusChange.at), col(StatusChange.id))
    )
    for approach_id, at, to, reason, actor in rows:
        at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
        entry: dict[str, Any] = {"at": at.isoformat(), "to": to}
        if reason:
            entry["reason"] = reason
        if actor:
            entry["actor"] = actor
        out[approach_id].append(entry)
    return out


def campaign_document(session: Session, campaign: Campaign) -> dict[str, Any]:
    rows = inventory.approaches(session, campaign)
    histories = _histories(session, campaign)
    doc_campaign = {name: getattr(campaign, name) for name in CAMPAIGN_FIELDS}
    doc_approaches = []
    for a in rows:
        item: dict[str, Any] = {"key": a.key, "title": a.title, "status": a.status}
        for name in ("reason", "description", "evidence", "effort", "prerequisites"):
            if getattr(a, name):
                item[name] = getattr(a, name)
        for name in ("recipe", "requirements", "bound_to", "verdict_fingerprint"):
            if getattr(a, name) is not None:
                item[name] = getattr(a, name)
        if histories.get(a.id):  # type: ignore[arg-type]
            item["history"] = histories[a.id]  # type: ignore[index]
        doc_approaches.append(item)
    return {"format": FORMAT, "campaign": doc_campaign, "approaches": doc_approaches}


def export_campaign(session: Session, campaign: Campaign) -> str:
    return yaml.dump(
        campaign_document(session, campaign), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100
    )


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


def parse_campaign_file(text: str) -> CampaignFile:
    """Validate a campaign file; Invalid names the line and field of the first problem."""
    data, node = _parse_yaml(text)
    if not isinstance(data, dict):
        raise Invalid("line 1: a campaign file is a mapping with 'format', 'campaign' and 'approaches'")
    try:
        parsed = CampaignFile.model_validate(data)
    except ValidationError as exc:
        messages = []
        for err in exc.errors()[:5]:
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
            line = _line_of(node, loc)
            where = f"line {line}: " if line else ""
            messages.append(f"{where}{_describe_loc(data, loc)}: {err['msg']}")
        raise Invalid("; ".join(messages), field=_describe_loc(data, exc.errors()[0]["loc"])) from None
    keys = [a.key for a in parsed.approaches]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise Invalid(f"approaches: duplicate key(s) {', '.join(dupes)}", field="approaches")
    return parsed


def _replace_history(session: Session, approach: Approach, item: ApproachFile, actor: str) -> None:
    """A new approach's history is the file's, with its dates (not the import's single "added" change).
    A status edited in the file without a history entry is recorded as a change now."""
    assert approach.id is not None  # the approach is flushed before its history is written
    for change in session.exec(select(StatusChange).where(StatusChange.approach_id == approach.id)):
        session.delete(change)
    previous = ""
    for entry in item.history or []:
        session.add(
            StatusChange(
                approach_id=approach.id,
                from_status=previous,
                to_status=entry.to.value,
                reason=entry.reason,
                actor=entry.actor,
                at=entry.at,
            )
        )
        previous = entry.to.value
    if previous != item.status.value:
        session.add(
            StatusChange(
                approach_id=approach.id,
                from_status=previous,
                to_status=item.status.value,
                reason=item.reason,
                actor=actor,
            )
        )
    session.flush()


def import_campaign(session: Session, text: str, *, actor: str, replace: bool = False) -> str:
    """Create the campaign, or bring an existing one (same slug) up to date with the file.

    Approaches are matched by key; their order in the file is their priority. A status that
    differs is a status change kept in history (by `actor`). Approaches missing from the file
    are kept unless `replace`. The caller's transaction makes this all or nothing.
    """
    parsed = parse_campaign_file(text)
    campaign = session.exec(select(Campaign).where(Campaign.slug == parsed.campaign.slug)).first()
    created = campaign is None
    if campaign is None:
        campaign = inventory.create_campaign(session, parsed.campaign)
    else:
        for name, value in parsed.campaign.model_dump().items():
            setattr(campaign, name, value)
        campaign.updated_at = utcnow()
        session.add(campaign)
    existing = {a.key: a for a in inventory.approaches(session, campaign)}
    added = changed = 0
    for position, item in enumerate(parsed.approaches, start=1):
        approach = existing.pop(item.key, None)
        values = item.model_dump(exclude={"key", "status", "reason", "requirements", "history"})
        values["requirements"] = item.requirements.model_dump() if item.requirements else None
        if approach is None:
            approach = inventory.add_approach(
                session, campaign, ApproachCreate(**item.model_dump(include=set(ApproachCreate.model_fields))), actor
            )
            for name in ("bound_to", "verdict_fingerprint"):
                setattr(approach, name, values[name])
            if item.history:
                _replace_history(session, approach, item, actor)
            added += 1
        else:
            before = (approach.status, approach.reason, [getattr(approach, n) for n in values])
            for name, value in values.items():
                setattr(approach, name, value)
            if approach.status != item.status.value:
                inventory.change_status(session, approach, item.status, item.reason, actor, by_trial=True)
            approach.reason = item.reason
            if before != (approach.status, approach.reason, [getattr(approach, n) for n in values]):
                changed += 1
                approach.updated_at = utcnow()
        approach.position = position
        session.add(approach)
    removed = 0
    offset = len(parsed.approaches)
    for approach in sorted(existing.values(), key=lambda a: a.position):
        if replace:
            session.delete(approach)
            removed += 1
        else:
            offset += 1
            approach.position = offset
            session.add(approach)
    session.flush()
    verb = "created" if created else "updated"
    return (
        f"{verb} campaign {campaign.slug!r}: {added} approach(es) added, {changed} changed, "
        f"{removed} removed, {len(existing) - removed} kept that the file does not list"
    )
