"""Metric alignment and stack diffs of app.domain.comparison, and the figure app.charts draws from them
(pure functions: rows in, rows out)."""

from __future__ import annotations

import pytest

from app.charts import trial_comparison
from app.domain.comparison import (
    Column,
    ComparedTrial,
    Comparison,
    condition_rows,
    metric_groups,
    parse_trial_ids,
    stack_rows,
)
from app.domain.errors import Invalid
from app.domain.statistics import Rule
from app.models import Campaign, Metric


def _m(trial_id: int, name: str, value: float, unit: str = "", **tags) -> Metric:
    return Metric(
        trial_id=trial_id, approach_id=1, campaign_id=1, seq=0, index=0, name=name, value=value, unit=unit, tags=tags
    )


def _trial(trial_id: int, title: str, fingerprint=None) -> ComparedTrial:
    return ComparedTrial(trial_id, "k", title, "succeeded", None, fingerprint, None, None)


def _column(trial_id: int, title: str, fingerprint=None) -> Column:
    return Column(f"trial-{trial_id}", _trial(trial_id, title).label, "k", [trial_id], fingerprint, None)


def _groups(rows: list[Metric], ids=(1, 2)):
    """Trial columns in this order."""
    return metric_groups({trial_id: n for n, trial_id in enumerate(ids)}, len(ids), rows)


def test_rows_align_on_the_tags_that_vary_within_a_trial():
    rows = [
        _m(1, "lat", 10, "us", tokens=1, mode="graph"),
        _m(1, "lat", 12, "us", tokens=8, mode="graph"),
        _m(2, "lat", 7, "us", tokens=8, mode="eager"),
        _m(2, "lat", 9, "us", tokens=64, mode="eager"),
        _m(2, "tput", 80.0, "tok/s", source="file"),
        _m(1, "tput", 70.0, "tok/s", source="log"),
    ]
    lat, tput = _groups(rows)
    assert (lat.name, lat.unit, lat.x_tag) == ("lat", "us", "tokens")
    assert [(r.point, r.values) for r in lat.rows] == [
        ((("tokens", 1),), [10, None]),
        ((("tokens", 8),), [12, 7]),
        ((("tokens", 64),), [None, 9]),
    ]
    # One value per trial: a single row, whatever the (constant) tags say; no x tag: bars.
    assert tput.x_tag is None and [(r.point, r.values) for r in tput.rows] == [((), [70.0, 80.0])]


def test_a_repeated_point_keeps_the_latest_value_and_odd_tags_do_not_break_it():
    rows = [
        _m(1, "x", 1.0, shape=[1, 2], kind="a"),
        _m(1, "x", 2.0, shape=[1, 2], kind="b"),
        _m(1, "x", 3.0, shape=[1, 2], kind="b"),  # a repeat of kind=b: the later value wins
        _m(1, "x", 4.0, shape=[4], kind="a"),
        _m(2, "x", 5.0, shape=[4], kind="a"),
    ]
    (group,) = _groups(rows)
    assert group.x_tag is None  # neither kind nor shape is numeric
    assert {r.label: r.values for r in group.rows} == {
        "kind=a, shape=[1, 2]": [1.0, None],
        "kind=b, shape=[1, 2]": [3.0, None],
        "kind=a, shape=[4]": [4.0, 5.0],
    }


def test_stack_rows_flag_what_differs_and_drop_what_nobody_reported():
    old = {"gpu_count": 8, "sm": "12.0", "torch": "2.10.0", "cuda": "12.8", "gpus": [{"name": "RTX PRO 6000"}]}
    new = {**old, "torch": "2.11.0", "nccl": "2.27.5"}
    rows = {r.component: r for r in stack_rows([_column(1, "a", old), _column(2, "b", new), _column(3, "c", None)])}
    assert set(rows) == {"gpu_count", "gpu", "sm", "cuda", "torch", "nccl"}
    assert rows["torch"].values == ["2.10.0", "2.11.0", None] and rows["torch"].differs
    assert rows["nccl"].values == [None, "2.27.5", None]
    same = stack_rows([_column(1, "a", old), _column(2, "b", old)])
    assert not any(r.differs for r in same)


@pytest.mark.parametrize("ids", [[], [1], [1, 1], list(range(1, 10))])
def test_two_to_eight_different_trials(ids):
    with pytest.raises(Invalid) as exc:
        parse_trial_ids(ids)
    assert exc.value.field == "trial" and "between 2 and 8" in exc.value.message


def test_the_figure_has_a_trace_per_trial_and_metric_and_escapes_text():
    trials = [_trial(1, "<img src=x onerror=alert(1)>"), _trial(2, "B & C")]
    columns = [_column(1, "<img src=x onerror=alert(1)>"), _column(2, "B & C")]
    rows = [_m(1, "lat", 10, "us", tokens=1), _m(1, "lat", 12, "us", tokens=64), _m(2, "lat", 7, "us", tokens=64)]
    rows += [_m(2, "<b>x</b>", 1.0, "<i>", tag="<script>"), _m(2, "<b>x</b>", 2.0, "<i>", tag="ok")]
    figure = trial_comparison(Comparison(Campaign(slug="c", name="C"), columns, trials, _groups(rows), [], Rule()))
    assert figure is not None
    traces = [(t["meta"]["trial_id"], t["meta"]["metric"], t["name"], t["type"], t["visible"]) for t in figure["data"]]
    assert (
        traces
        == [
            (1, "<b>x</b>", "#1 &lt;img src=x onerror=alert(1)&gt;", "bar", True),  # trial 1 has no <b>x</b>: no trace
            (2, "<b>x</b>", "#2 B &amp; C", "bar", True),
        ][1:]
        + [
            (1, "lat", "#1 &lt;img src=x onerror=alert(1)&gt;", "scatter", False),
            (2, "lat", "#2 B &amp; C", "scatter", False),
        ]
    )
    bars = figure["data"][0]
    assert bars["x"] == ["tag=&lt;script&gt;", "tag=ok"] and bars["y"] == [1.0, 2.0]
    assert figure["layout"]["title"]["text"] == "&lt;b&gt;x&lt;/b&gt; (&lt;i&gt;)"
    menu = figure["layout"]["updatemenus"][0]["buttons"]
    assert [b["label"] for b in menu] == ["&lt;b&gt;x&lt;/b&gt;", "lat"]
    assert menu[1]["args"][0]["visible"] == [False, True, True] and menu[1]["args"][1]["xaxis.type"] == "log"
    assert trial_comparison(Comparison(Campaign(slug="c", name="C"), columns, trials, [], [], Rule())) is None


def test_a_tag_that_follows_from_the_point_describes_the_row_and_does_not_place_it():
    """The MoE stand-in tags each step with the bytes it read and the experts it touched: they vary within
    a trial, but follow from its batch, and differ between an FP8 and a BF16 trial. Keyed, the two trials'
    rows never met ("not measured on both" on every row). A tag that separates rows the point leaves
    together (two backends at each size in one trial) still places them."""
    rows = []
    for trial_id, per_expert in ((1, 1.0), (2, 2.0)):  # FP8 experts read half the bytes of BF16
        for batch in (1, 2, 4):
            touched = 8.0 * batch**0.5
            tags = {"batch": batch, "draft_tokens": 0, "read_bytes": per_expert * touched, "experts_touched": touched}
            rows.append(_m(trial_id, "decode_step_ms", 10.0 * trial_id + batch, "ms", **tags))
            for backend in ("nccl", "symm"):
                rows.append(_m(trial_id, "lat", 5.0 + batch, "us", tokens=batch, backend=backend, bytes=batch * 2048))
    decode, lat = _groups(rows)
    assert [(r.point, r.values) for r in decode.rows] == [
        ((("batch", b), ("draft_tokens", 0)), [10.0 + b, 20.0 + b]) for b in (1, 2, 4)
    ]
    labels = {f"backend={b}, tokens={t}" for b in ("nccl", "symm") for t in (1, 2, 4)}
    assert {r.label for r in lat.rows} == labels and all(None not in r.values for r in lat.rows)


def test_a_column_never_pools_trials_measured_under_different_conditions():
    """Two trials of one approach column at contexts 1,024 and 4,096 are not one figure: the context keys
    their rows. Two trial columns that differ in context are compared as picked, and the conditions list
    says how they differ."""
    rows = [
        _m(1, "decode_step_ms", 10.0, "ms", batch=1, context=1024, mode="graph"),
        _m(2, "decode_step_ms", 14.0, "ms", batch=1, context=4096, mode="graph"),
        _m(3, "decode_step_ms", 9.0, "ms", batch=1, context=1024, mode="graph"),
    ]
    pooled = metric_groups({1: 0, 2: 0, 3: 1}, 2, rows)[0]  # column 0 holds trials 1 and 2
    assert [(r.point, r.values) for r in pooled.rows] == [
        ((("batch", 1), ("context", 1024)), [10.0, 9.0]),
        ((("batch", 1), ("context", 4096)), [14.0, None]),
    ]
    apart = metric_groups({2: 0, 3: 1}, 2, rows[1:])[0]  # each column one context: compared as picked
    assert [(r.point, r.values) for r in apart.rows] == [((("batch", 1),), [14.0, 9.0])]
    conditions = {r.component: r for r in condition_rows({1: 0, 2: 0, 3: 1}, 2, rows)}
    assert conditions["context"].values == ["1024, 4096", "1024"] and conditions["context"].differs
    assert conditions["mode"].values == ["graph", "graph"] and not conditions["mode"].differs
    assert list(conditions) == ["mode", "context"]  # in ConditionTag's order


def test_a_text_tag_that_varies_within_a_trial_still_keys_its_rows():
    """A derivation or method named in a tag is what was measured: varying within a trial it keys the row
    even where it follows from the point (the engine-acceptance recipe's derivation per draft length)."""
    rows = [
        _m(1, "acc", 2.1, "", draft_tokens=1, derivation="engine"),
        _m(1, "acc", 2.5, "", draft_tokens=3, derivation="1 + accepted / drafts"),
        _m(2, "acc", 2.4, "", draft_tokens=3, derivation="1 + accepted / drafts"),
    ]
    (group,) = _groups(rows)
    assert {r.label: r.values for r in group.rows} == {
        "derivation=engine, draft_tokens=1": [2.1, None],
        "derivation=1 + accepted / drafts, draft_tokens=3": [2.5, 2.4],
    }
