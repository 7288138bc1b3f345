"""`campaign rename / archive / restore / delete / history / trials` on the demo board, in a subprocess."""

import csv
import io
import json

from app.db import make_engine
from tests.support.seeded_trials import seed_trials


def test_rename_archive_restore_delete_and_history(run):
    assert run("demo").returncode == 0
    r = run("rename", "allreduce-shootout", "shootout-2026", "--by", "ada")
    assert r.returncode == 0, r.stderr
    assert run("rename", "kimi-k25-eagle3", "shootout-2026").returncode == 1  # taken
    held = run("rename", "kimi-k25-eagle3", "allreduce-shootout")
    assert held.returncode == 1 and "redirect" in held.stderr
    assert run("rename", "kimi-k25-eagle3", "Bad Slug").returncode == 2
    assert run("archive", "shootout-2026").returncode == 0
    refused = run("import", "-", input="format: campaign-board/v1\ncampaign:\n  slug: shootout-2026\n  name: x\n")
    assert refused.returncode == 1 and "read-only" in refused.stderr
    assert run("restore", "shootout-2026").returncode == 0
    history = run("history", "shootout-2026")
    assert [line.split()[2] for line in history.stdout.splitlines()] == ["restored", "archived", "renamed"]
    assert "by ada" in history.stdout.splitlines()[-1]
    not_archived = run("delete", "shootout-2026", "--confirm", "Allreduce shootout on this node")
    assert not_archived.returncode == 1 and "archive it first" in not_archived.stderr
    assert run("archive", "shootout-2026").returncode == 0
    assert run("delete", "shootout-2026", "--confirm", "wrong").returncode == 1
    gone = run("delete", "shootout-2026", "--confirm", "Allreduce shootout on this node")
    assert gone.returncode == 0 and "deleted shootout-2026" in gone.stdout, gone.stderr
    assert run("export", "shootout-2026").returncode == 1
    assert run("export", "kimi-k25-eagle3").returncode == 0  # the other campaign is untouched


def test_trials_lists_filters_and_exports(run, tmp_path):
    assert run("demo").returncode == 0
    engine = make_engine(f"sqlite:///{tmp_path / 'data' / 'campaign.db'}")
    seeded = seed_trials(engine)
    engine.dispose()
    table = run("trials", "--campaign", "c", "--limit", "2")
    assert table.returncode == 0, table.stderr
    assert f"{len(seeded.trial_ids)} trial(s), page 1 of 3" in table.stdout
    every = json.loads(run("trials", "--campaign", "c", "--format", "json").stdout)
    assert [t["id"] for t in every] == list(reversed(seeded.trial_ids))
    failed = list(
        csv.DictReader(io.StringIO(run("trials", "--state", "failed", "--sort", "id", "--format", "csv").stdout))
    )
    assert failed and {r["state"] for r in failed} == {"failed"}
    assert [int(r["id"]) for r in failed] == sorted(int(r["id"]) for r in failed)
    bad = run("trials", "--since", "someday")
    assert bad.returncode == 2 and "--since" in bad.stderr
    assert run("trials", "--campaign", "nope").returncode == 1
