"""templates/_fields.html: headings and cells over a model's declared fields (titles from the declarations,
values written by type, always escaped); the trial and runner tables' headings are those titles."""

from datetime import UTC, datetime

from app.schemas import RunnerPublic, TrialSummary
from app.templating import make_templates, shown_fields
from app.web.trial_list import COLUMNS

ENV = make_templates().env


def render(source: str, **context) -> str:
    return ENV.from_string('{% from "_fields.html" import cell, headings, value %}' + source).render(**context)


def test_kinds_follow_the_declared_types():
    trial, runner = shown_fields(TrialSummary), shown_fields(RunnerPublic)
    assert (trial["state"].kind, trial["started_at"].kind, trial["phase"].kind) == ("state", "time", "text")
    assert (runner["labels"].kind, runner["last_seen_at"].kind, runner["status"].kind) == ("list", "time", "text")


def test_headings_are_the_declared_titles():
    assert render('{{ headings(fields.trial, ["id", "state", "started_at"]) }}') == (
        "<th>Trial</th><th>State</th><th>Started</th>"
    )
    assert render('{{ headings(fields.runner, ["fingerprint", "trial", "last_seen_at"]) }}') == (
        "<th>Node</th><th>Current trial</th><th>Last seen</th>"
    )
    assert [label for label, _ in COLUMNS] == [
        "Trial", "Campaign", "Approach", "State", "Proposed", "Runner", "Started by", "Created", "Finished"
    ]  # fmt: skip


def test_cells_write_values_by_kind_and_escape_them():
    out = render('{{ cell(fields.trial.error, text, class="small", label=true) }}', text="<script>x</script>")
    assert out == '<td class="small" data-label="Error">&lt;script&gt;x&lt;/script&gt;</td>'
    assert render("{{ cell(fields.runner.labels, labels) }}", labels=["<b>", "gpu"]) == (
        '<td><span class="chip">&lt;b&gt;</span><span class="chip">gpu</span></td>'
    )
    assert 'data-state="running"' in render("{{ value(fields.trial.state, 'running') }}")
    when = datetime(2026, 12, 7, 10, 30, tzinfo=UTC)
    assert render('{{ value(fields.trial.created_at, when, time="utc") }}', when=when) == "2026-12-07 10:30 UTC"
    assert render('{{ value(fields.trial.finished_at, none, empty="–") }}') == "–"
    assert render("{{ value(fields.trial.exit_code, 0) }}") == "0"
