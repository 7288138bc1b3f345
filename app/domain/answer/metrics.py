"""The campaign's metrics the model and its charts read, in one pass.

`load_campaign_metrics`: one grouped query for the trials that matter, one for their rows, as columns;
everything after it works in Python.
Figures measured on a CPU or at a scaled-down geometry (tags `device: cpu`, `scaled: true`, or the
gloo backend) are a *CPU floor* (`is_cpu_floor`): shown, labelled so, and never fed to the model.
Multi-node trials also report allreduces within each node and among the node leaders (`scope: node`,
`scope: cross-node`); the model and the charts read the world's figures only (`is_world_figure`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import uuid
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Text, cast, exists, func, or_
from sqlalchemy import select as sa_select
from sqlalchemy.pool import Pool
from sqlmodel import Session, select

from app.db import ReadSession
from app.domain.artifacts import campaign_traces
from app.domain.traces import StoredTrace
from app.models import Approach, Campaign, Metric
from app.protocol.metrics import MetricName

# Every metric the model or its charts read.
MODEL_METRICS = (
    MetricName.ALLREDUCE_LATENCY_US,
    MetricName.ALLREDUCE_IN_SITU_US,
    MetricName.VERIFY_COMPUTE_MS,
    MetricName.DECODE_STEP_MS,
    MetricName.DRAFT_STEP_MS,
    MetricName.MEDIAN_TPOT_MS,
    *MetricName.THROUGHPUT,
    *MetricName.ACCEPT_LENGTH,
)


def is_cpu_floor(tags: dict[str, Any]) -> bool:
    """Measured on a CPU or at a scaled-down geometry: a floor anyone can measure, never a model input."""
    return tags.get("device") == "cpu" or bool(tags.get("scaled")) or tags.get("backend") == "gloo"


def is_world_figure(tags: dict[str, Any]) -> bool:
    """A figure of the trial's whole world: untagged (single node) or `scope: world` (multi-node trials
    also report `scope: node` and `scope: cross-node` figures, which describe part of the world)."""
    return tags.get("scope", "world") == "world"


@dataclass(frozen=True)
class MetricRow:
    trial_id: int
    approach_id: int
    name: str
    value: float
    tags: dict[str, Any]
    seq: int
    index: int

    @property
    def cpu_floor(self) -> bool:
        return is_cpu_floor(self.tags)


class CampaignMetrics:
    """The metrics the model reads, for one campaign: for each approach and metric name the rows of its
    newest trial, the trials holding each approach's best throughput, and the baseline trial's rows."""

    def __init__(self, rows: Iterable[MetricRow], traces: Iterable[StoredTrace] = ()) -> None:
        self.traces = tuple(traces)  # the campaign's read profiler traces, newest first (`campaign_traces`)
        self._shared: dict[str, str] = {}  # what is computed once from the rows (`rows_key`); copies share it
        # A multi-node trial also reports allreduces within each node and among the node leaders
        # (tag scope: node | cross-node); the model and the charts read the world's figures only.
        rows = [m for m in rows if is_world_figure(m.tags)]
        self.rows = sorted(rows, key=lambda m: (-m.trial_id, m.seq, m.index))  # newest trial first
        self._newest: dict[tuple[int, str], list[MetricRow]] = {}  # (approach, name) -> its newest trial's rows
        self._by_trial: dict[int, list[MetricRow]] = defaultdict(list)
        self._by_name: dict[str, list[MetricRow]] = defaultdict(list)
        for m in self.rows:
            rows_of = self._newest.setdefault((m.approach_id, m.name), [m])
            if rows_of[0] is not m and rows_of[0].trial_id == m.trial_id:
                rows_of.append(m)
            self._by_trial[m.trial_id].append(m)
            self._by_name[m.name].append(m)
        self._by_approach: dict[int, list[tuple[str, list[MetricRow]]]] = defaultdict(list)
        for (approach_id, name), found in self._newest.items():
            self._by_approach[approach_id].append((name, found))

    @property
    def rows_key(self) -> str:
        """A digest of which rows these are (trial, seq, index of each): what a cache of anything computed from
        them keys on (rows never change once stored). Computed once per load, on first use: `with_traces`
        copies (what a kept read hands out) share it with the read they copy."""
        if "rows_key" not in self._shared:
            digest = hashlib.blake2b(digest_size=16)
            for m in self.rows:
                digest.update(b"%d,%d,%d;" % (m.trial_id, m.seq, m.index))
            self._shared["rows_key"] = digest.hexdigest()
        return self._shared["rows_key"]

    def newest(self, names: tuple[str, ...] | str, approach_id: int | None = None) -> list[MetricRow]:
        """Rows of `names` from each approach's newest trial reporting that name, newest trial first
        (one approach, or every approach of the campaign)."""
        names = (names,) if isinstance(names, str) else names
        if approach_id is not None:
            found = [m for name, rows in self._by_approach.get(approach_id, []) if name in names for m in rows]
        else:
            found = [
                m
                for name in names
                for m in self._by_name.get(name, [])
                if self._newest[(m.approach_id, name)][0].trial_id == m.trial_id
            ]
        return sorted(found, key=lambda m: (-m.trial_id, m.seq, m.index))

    def of_trial(self, trial_id: int, names: tuple[str, ...]) -> list[MetricRow]:
        return [m for m in self._by_trial.get(trial_id, []) if m.name in names]

    def all(self, names: tuple[str, ...]) -> list[MetricRow]:
        return [m for name in names for m in self._by_name.get(name, [])]

    def with_traces(self, traces: Iterable[StoredTrace]) -> CampaignMetrics:
        """The same rows (shared, never copied: readers never change them) with the campaign's traces now
        (read fresh on every load: a trace's figures arrive after its upload, with no new metric row)."""
        other = copy.copy(self)
        other.traces = tuple(traces)
        return other

    def forward_trace(self) -> StoredTrace | None:
        """The newest trace that counts N_ar over a forward pass of the target model (a verify or decode step),
        preferring one of device kernels; a CPU trace's count only where its trial's figures (read here) say it
        measured the real geometry (none is `scaled`)."""
        counted = [t for t in self.traces if t.forward_n_ar is not None]
        device = [t for t in counted if t.figures.get("device")]
        full = [
            t
            for t in counted
            if self._by_trial.get(t.trial_id) and not any(m.tags.get("scaled") for m in self._by_trial[t.trial_id])
        ]
        return next(iter(device or full), None)

    def approach_trace(self, approach_id: int) -> StoredTrace | None:
        """The approach's newest trace with a device allreduce time (its in-situ t_ar)."""
        return next((t for t in self.traces if t.approach_id == approach_id and t.t_ar_us is not None), None)


def _accept_filter(table: Any) -> Any:
    # tau counts the bonus token, so a real accept length is >= 1 (a server without speculation may report 0).
    return or_(table.name.not_in(MetricName.ACCEPT_LENGTH), table.value >= 1)


def _newest_trial(campaign_id: int, name: str) -> Any:
    """The newest trial of the outer approach reporting `name`: one index seek (campaign, name, approach,
    trial) per approach, not a scan of the campaign's metrics."""
    m = Metric.__table__.alias()  # type: ignore[attr-defined]
    query = select(m.c.trial_id).where(m.c.campaign_id == campaign_id, m.c.name == name, m.c.approach_id == Approach.id)
    if name in MetricName.ACCEPT_LENGTH:
        query = query.where(m.c.value >= 1)  # as _accept_filter
    return query.order_by(m.c.trial_id.desc()).limit(1).scalar_subquery()


def _best_trial(campaign_id: int, name: str) -> Any:
    """The trial holding the outer approach's highest `name` (the newest of equal ones): one seek into the
    (campaign, name, approach, value, trial) index, read backwards."""
    m = Metric.__table__.alias()  # type: ignore[attr-defined]
    return (
        select(m.c.trial_id)
        .where(m.c.campaign_id == campaign_id, m.c.name == name, m.c.approach_id == Approach.id)
        .order_by(m.c.value.desc(), m.c.trial_id.desc())
        .limit(1)
        .scalar_subquery()
    )


def load_campaign_metrics(session: Session, campaign: Campaign) -> CampaignMetrics:
    """Five queries whatever the campaign's size: which model metrics the campaign has, the trials that matter
    (per approach, its newest trial for each of those names and its best-throughput trials: correlated
    subqueries, each an index seek), how many rows those trials have, then those rows as columns; the last
    only when this process has not read those trials with that many rows already (`_LOADED`); and the
    campaign's read profiler traces (`campaign_traces`, never kept: their figures arrive with no new row)."""
    assert campaign.id is not None
    m = Metric.__table__  # type: ignore[attr-defined]
    reported = session.execute(
        select(*[exists().where(m.c.campaign_id == campaign.id, m.c.name == name) for name in MODEL_METRICS])
    ).one()  # one index seek per name: the per-approach seeks below are only for names the campaign has
    names = [name for name, present in zip(MODEL_METRICS, reported, strict=True) if present]
    columns = [_newest_trial(campaign.id, name) for name in names]
    columns += [_best_trial(campaign.id, name) for name in MetricName.THROUGHPUT if name in names]
    found: Iterable[Sequence[int | None]] = (
        session.execute(select(*columns).where(Approach.campaign_id == campaign.id)).all() if columns else []
    )
    trial_ids = {t for row in found for t in row if t is not None}
    if campaign.baseline_trial_id is not None:
        trial_ids.add(campaign.baseline_trial_id)
    traces = campaign_traces(session, campaign.id)
    if not trial_ids:
        return CampaignMetrics([], traces)
    # Metrics are only ever inserted (a trial's rows arrive with its log; nothing updates or deletes one but
    # the trial's own deletion, which takes its id out of `trial_ids`), so the number of rows of the trials
    # that matter changes with every committed write that could change the answer: with the database, the
    # campaign and those trials, it is the key of what this process already read. One index-only count. Only
    # read-only sessions (`app.db.ReadSession`, every page's) use it: they see committed rows alone.
    ids = sorted(trial_ids)
    if not isinstance(session, ReadSession):  # a transaction that may write may read its own, uncommitted rows
        return _read_rows(session, campaign, ids).with_traces(traces)
    count = session.execute(select(func.count()).select_from(m).where(m.c.trial_id.in_(ids))).scalar_one()
    with _LOADED_LOCK:
        key = (database_token(session), campaign.id, tuple(ids), count)
        cached = _LOADED.get(key)
        if cached is not None:
            _LOADED.move_to_end(key)
            return cached.with_traces(traces)
    loaded = _read_rows(session, campaign, ids)
    with _LOADED_LOCK:
        _LOADED[key] = loaded
        while len(_LOADED) > _LOADED_SIZE:
            _LOADED.popitem(last=False)
    return loaded.with_traces(traces)


# What `load_campaign_metrics` read, by (database, campaign, trials that matter, their number of rows): a
# few campaigns' worth (each some thousands of rows at 500 approaches). Readers never change a
# `CampaignMetrics` or its rows.
_LOADED: OrderedDict[tuple[str, int, tuple[int, ...], int], CampaignMetrics] = OrderedDict()
_LOADED_SIZE = 8
_LOADED_LOCK = threading.Lock()
_DATABASES: WeakKeyDictionary[Pool, str] = WeakKeyDictionary()


def database_token(session: Session) -> str:
    """This process's name for the session's database, for cache keys: the engine's pool names it (a database
    dropped and made again under the same URL, as tests do, comes with a new engine, so a new name)."""
    with _DATABASES_LOCK:
        return _DATABASES.setdefault(session.connection().engine.pool, uuid.uuid4().hex)


_DATABASES_LOCK = threading.Lock()


def _read_rows(session: Session, campaign: Campaign, trial_ids: list[int]) -> CampaignMetrics:
    """The rows of `trial_ids` the model reads."""
    m = Metric.__table__  # type: ignore[attr-defined]
    # By trial id alone, so that both databases read the trial index (with the campaign or the names in the
    # WHERE, SQLite reads the campaign's whole (campaign, name, ...) index instead); filtered here. Columns
    # through Core (no ORM row processing); tags as text, parsed once per distinct text (few tag sets repeat).
    rows = (
        session.connection()
        .execute(
            sa_select(  # typed for eight columns (sqlmodel's select stops at four)
                m.c.trial_id,
                m.c.approach_id,
                m.c.name,
                m.c.value,
                cast(m.c.tags, Text),
                m.c.seq,
                m.c.index,
                m.c.campaign_id,
            ).where(m.c.trial_id.in_(trial_ids))
        )
        .all()
    )  # one fetch of every row, not one call through the result per row
    wanted = set(MODEL_METRICS)
    return CampaignMetrics(
        MetricRow(trial_id, approach_id, name, value, tags, seq, index)
        for trial_id, approach_id, name, value, text, seq, index, campaign_id in rows
        if campaign_id == campaign.id
        and name in wanted
        and (value >= 1 or name not in MetricName.ACCEPT_LENGTH)  # as _accept_filter
        and (tags := _tags_of(text)) is not _NOT_WORLD
    )


# A metric's tags as parsed from their stored text, shared by every row (and request) with that text: parsing
# is a function of the text alone, so nothing to invalidate; the rows never change a tags dict (copy it first).
# A campaign has a few thousand distinct tag texts (one per message size, world size, mode, batch...); parsing
# them was half of `load_campaign_metrics`. Bounded: cleared when full. `_NOT_WORLD` marks a text whose rows
# are not world figures (`is_world_figure`), which `CampaignMetrics` would drop anyway.
_TAGS: dict[str | None, dict[str, Any]] = {}
_TAGS_MAX = 100_000
_NOT_WORLD: dict[str, Any] = {"scope": "not world"}


def _tags_of(text: str | None) -> dict[str, Any]:
    found = _TAGS.get(text)
    if found is None:
        if len(_TAGS) >= _TAGS_MAX:
            _TAGS.clear()
        parsed = (json.loads(text) or {}) if text is not None else {}
        found = _TAGS[text] = parsed if is_world_figure(parsed) else _NOT_WORLD
    return found
