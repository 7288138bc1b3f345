"""Campaign files: export/import round trip, and bad files leave the database unchanged."""

import pytest
import yaml

from app.db import make_engine, migrate, session_scope
from app.domain import campaigns
from app.domain.campaign_files import export_campaign, import_campaign
from app.domain.demo import demo_files, load_demo
from app.domain.errors import Invalid

pytestmark = pytest.mark.both_databases  # import/export round trips, rollback of a failed import

DEMO_SLUG = "kimi-k25-eagle3"


def _export(engine, slug=DEMO_SLUG) -> str:
    with session_scope(engine, write=False) as s:
        return export_campaign(s, campaigns.get_campaign(s, slug))


def _history_count(engine) -> int:
    from sqlmodel import func, select

    from app.models import StatusChange

    with session_scope(engine, write=False) as s:
        return s.exec(select(func.count()).select_from(StatusChange)).one()


def test_demo_has_the_nine_approaches_with_seed_verdicts(engine):
    with session_scope(engine) as s:
        load_demo(s)
    with session_scope(engine, write=False) as s:
        rows = campaigns.approaches(s, campaigns.get_campaign(s, DEMO_SLUG))
        got = {a.key: (a.status, a.reason) for a in rows}
    assert len(rows) == 9
    assert got["torch-symm-mem"][0] == "dead_end" and "KeyError: 12" in got["torch-symm-mem"][1]
    assert (
        got["sglang-custom-allreduce"][0] == "dead_end" and "38 tok/s vs 82 tok/s" in got["sglang-custom-allreduce"][1]
    )
    assert got["mscclpp"] == ("deferred", "not installed; needs a build")
    assert got["nccl-fewer-channels"] == ("dead_end", "out of memory")
    assert got["expert-parallelism"][0] == "untested"
    assert got["flashinfer-pcie-ipc-allreduce"][0] == "untested"
    assert got["nccl-p2p-level-sys"][0] == "untested"
    assert sum(1 for status, _ in got.values() if status == "dead_end") == 5


def test_demo_load_is_idempotent(engine):
    with session_scope(engine) as s:
        load_demo(s)
    before, history = _export(engine), _history_count(engine)
    with session_scope(engine) as s:
        lines = load_demo(s)
    assert all("already loaded" in line for line in lines)
    assert _export(engine) == before and _history_count(engine) == history


def test_round_trip_is_equal(engine, tmp_path):
    with session_scope(engine) as s:
        load_demo(s)
    text = _export(engine)
    other_url = f"sqlite:///{tmp_path / 'other.db'}"
    migrate(other_url)
    other = make_engine(other_url)
    with session_scope(other) as s:
        import_campaign(s, text, actor="test")
    assert _export(other) == text
    assert yaml.safe_load(text) == yaml.safe_load(_export(other))
    # Importing the same file again changes nothing and records no status change.
    history = _history_count(other)
    with session_scope(other) as s:
        summary = import_campaign(s, text, actor="test").summary
    assert "0 approach(es) added, 0 changed" in summary
    assert _history_count(other) == history
    other.dispose()


def test_pinned_run_order_round_trips(engine, tmp_path):
    with session_scope(engine) as s:
        load_demo(s)
    assert "run_order" not in _export(engine)  # the default (the ranking) is not written
    with session_scope(engine) as s:
        campaigns.set_run_order(s, campaigns.get_campaign(s, DEMO_SLUG), "priority")
    text = _export(engine)
    assert yaml.safe_load(text)["campaign"]["run_order"] == "priority"
    # Importing the file brings the pinned order back over a campaign that follows the ranking...
    with session_scope(engine) as s:
        campaigns.set_run_order(s, campaigns.get_campaign(s, DEMO_SLUG), "ranking")
    with session_scope(engine) as s:
        import_campaign(s, text, actor="test")
    with session_scope(engine, write=False) as s:
        assert campaigns.get_campaign(s, DEMO_SLUG).run_order == "priority"
    assert _export(engine) == text
    # ...and into a new database, and a file without it follows the ranking again.
    other_url = f"sqlite:///{tmp_path / 'other.db'}"
    migrate(other_url)
    other = make_engine(other_url)
    with session_scope(other) as s:
        import_campaign(s, text, actor="test")
    assert _export(other) == text
    with session_scope(other) as s:
        import_campaign(s, text.replace("  run_order: priority\n", ""), actor="test")
    with session_scope(other, write=False) as s:
        assert campaigns.get_campaign(s, DEMO_SLUG).run_order == "ranking"
    other.dispose()


def test_import_updates_status_and_order_with_history(engine):
    with session_scope(engine) as s:
        load_demo(s)
    doc = yaml.safe_load(_export(engine))
    doc["approaches"].reverse()
    target = next(a for a in doc["approaches"] if a["key"] == "expert-parallelism")
    target.update(status="promising", reason="all-to-all beat allreduce")
    with session_scope(engine) as s:
        import_campaign(s, yaml.safe_dump(doc), actor="git")
    with session_scope(engine, write=False) as s:
        c = campaigns.get_campaign(s, DEMO_SLUG)
        rows = campaigns.approaches(s, c)
        assert rows[0].key == "nccl-p2p-level-sys"
        ep = campaigns.get_approach(s, c, "expert-parallelism")
        assert ep.status == "promising"
        last = campaigns.history(s, ep)[0]
        assert (last.from_status, last.to_status, last.actor) == ("untested", "promising", "git")


BAD_FILES = {
    "unknown field": (
        """format: campaign-board/v1
campaign: {slug: x, name: X}
approaches:
- key: a
  title: A
- key: b
  title: B
  colour: red
""",
        "line 8",
        "colour",
    ),
    "unknown status": (
        """format: campaign-board/v1
campaign: {slug: x, name: X}
approaches:
- key: a
  title: A
  status: maybe
""",
        "line 6",
        "status",
    ),
    "bad yaml": (
        """format: campaign-board/v1
campaign: {slug: x, name: X
approaches: []
""",
        "line 3",
        "not valid YAML",
    ),
    "dead end without reason": (
        """format: campaign-board/v1
campaign: {slug: x, name: X}
approaches:
- key: a
  title: A
  status: dead_end
""",
        "line 4",
        "needs a reason",
    ),
    "wrong type": (
        """format: campaign-board/v1
campaign: {slug: x, name: X, baseline_tok_s: fast}
approaches: []
""",
        "line 2",
        "baseline_tok_s",
    ),
    "duplicate key": (
        """format: campaign-board/v1
campaign: {slug: x, name: X}
approaches:
- {key: a, title: A}
- {key: a, title: B}
""",
        "duplicate",
        "a",
    ),
    "not a mapping": ("- just\n- a list\n", "line 1", "mapping"),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_files_are_refused_whole(engine, name):
    text, where, what = BAD_FILES[name]
    with session_scope(engine) as s:
        load_demo(s)
    before, history = _export(engine), _history_count(engine)
    with pytest.raises(Invalid) as exc:
        with session_scope(engine) as s:
            import_campaign(s, text, actor="test")
    assert where in exc.value.message and what in exc.value.message, exc.value.message
    assert _export(engine) == before and _history_count(engine) == history
    with session_scope(engine, write=False) as s:
        assert "x" not in [c.slug for c in campaigns.list_campaigns(s)]


def test_a_late_error_rolls_back_the_earlier_changes(engine):
    """The first approach would be imported, the second fails in the domain: nothing stays."""
    with session_scope(engine) as s:
        load_demo(s)
    doc = yaml.safe_load(_export(engine))
    doc["approaches"][0]["title"] = "changed title"
    doc["approaches"].append({"key": "Bad Key!", "title": "x"})
    before = _export(engine)
    with pytest.raises(Invalid):
        with session_scope(engine) as s:
            import_campaign(s, yaml.safe_dump(doc), actor="test")
    assert _export(engine) == before


def test_every_demo_file_parses():
    from app.domain.campaign_files import parse_campaign_file

    assert demo_files()
    for path in demo_files():
        parse_campaign_file(path.read_text())


def test_demo_recipes_are_valid_launches():
    """Every demo approach carries a recipe the runner can launch (validated the way it will be)."""
    from app.domain.campaign_files import parse_campaign_file
    from runners.recipes import build_launch

    for path in demo_files():
        for approach in parse_campaign_file(path.read_text()).approaches:
            assert approach.recipe is not None, approach.key
            spec = build_launch(approach.recipe.model_dump())
            assert spec.argv and spec.timeout_s > 0, approach.key


def test_reported_figures_and_history_are_validated(engine):
    from app.domain.campaign_files import parse_campaign_file

    base = """format: campaign-board/v1
campaign:
  slug: x
  name: X
  reported:
  - {label: A, approach: nope, t_ar_us: 5.0, source: somewhere}
approaches:
- key: a
  title: A
"""
    with pytest.raises(Invalid, match="no approach 'nope' in this file"):
        parse_campaign_file(base)
    with pytest.raises(Invalid, match=r"line 6: campaign.reported\[0\].*exactly one of t_ar_us and tok_s"):
        parse_campaign_file(base.replace("t_ar_us: 5.0", "t_ar_us: 5.0, tok_s: 40"))
    with pytest.raises(Invalid, match=r"input_sources.*Input should be 'baseline_tok_s'"):
        parse_campaign_file(
            base.replace(
                "  reported:\n  - {label: A, approach: nope, t_ar_us: 5.0, source: somewhere}\n",
                "  input_sources: {colour: blue}\n",
            )
        )
    history = (
        base.replace("approach: nope", "approach: a")
        + """  history:
  - {at: '2026-02-09T10:00:00+00:00', to: untested}
  - {at: '2026-02-09T09:00:00+00:00', to: dead_end, reason: r}
"""
    )
    with pytest.raises(Invalid, match="oldest first"):
        parse_campaign_file(history)


def test_the_batch_models_inputs_travel_in_the_file_only_when_set(engine, tmp_path):
    """accept_length_by_k, accept_alphas and the grid (migration 0007): absent from files of campaigns that
    never set them (their files read as before), round-trip equal when set."""
    from app.schemas import CampaignUpdate

    with session_scope(engine) as s:
        load_demo(s)
    assert "accept_alphas" not in _export(engine)
    with session_scope(engine) as s:
        campaigns.update_campaign(
            s,
            campaigns.get_campaign(s, DEMO_SLUG),
            CampaignUpdate.model_validate(
                {
                    "accept_length_by_k": {"3": 2.4},
                    "accept_alphas": [0.8, 0.6],
                    "speculation_batches": [1, 8, 64],
                    "speculation_draft_tokens": [1, 2, 3],
                }
            ),
        )
    text = _export(engine)
    assert yaml.safe_load(text)["campaign"]["accept_alphas"] == [0.8, 0.6]
    other_url = f"sqlite:///{tmp_path / 'other.db'}"
    migrate(other_url)
    other = make_engine(other_url)
    with session_scope(other) as s:
        import_campaign(s, text, actor="test")
    assert _export(other) == text
    with session_scope(other, write=False) as s:
        campaign = campaigns.get_campaign(s, DEMO_SLUG)
        assert campaign.accept_length_by_k == {"3": 2.4} and campaign.speculation_batches == [1, 8, 64]
    other.dispose()


def test_a_file_written_before_issue_43_imports_with_the_decided_status(engine):
    """A trial's queued / running were once stored as the status: a file exported then imports with the
    status a person decided last, its history without the trial's entries; anything else there is refused."""
    text = """
format: campaign-board/v1
campaign: {slug: old, name: Old}
approaches:
- key: a
  title: A
  status: running
  history:
  - {at: '2026-01-01T10:00:00Z', to: untested, reason: added}
  - {at: '2026-01-01T11:00:00Z', to: adopted, reason: fastest}
  - {at: '2026-01-01T12:00:00Z', to: queued, reason: 'trial #3 on node-a'}
  - {at: '2026-01-01T12:01:00Z', to: running, reason: 'trial #3 started'}
"""
    with session_scope(engine) as s:
        import_campaign(s, text, actor="test")
        a = campaigns.get_approach(s, campaigns.get_campaign(s, "old"), "a")
        assert a.status == "adopted"
        assert [h.to_status for h in campaigns.history(s, a)] == ["adopted", "untested"]
    with session_scope(engine) as s, pytest.raises(Invalid):
        import_campaign(s, text.replace("to: adopted", "to: {}"), actor="test")
