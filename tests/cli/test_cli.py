"""The `campaign` command: demo, export/import with clear errors, tokens, login URLs."""

import os
import subprocess
import sys

from tests.support.paths import ROOT


def test_demo_export_import_round_trip(run, tmp_path):
    assert run("demo").returncode == 0
    again = run("demo")
    assert again.returncode == 0 and "already loaded" in again.stdout
    out = tmp_path / "kimi.yaml"
    r = run("export", "kimi-k25-eagle3", "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "KeyError: 12" in text
    r = run("import", str(out))
    assert r.returncode == 0 and "0 approach(es) added, 0 changed" in r.stdout
    r = run("export", "kimi-k25-eagle3")
    assert r.stdout == text


def test_bad_file_exits_nonzero_and_imports_nothing(run, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "format: campaign-board/v1\ncampaign: {slug: x, name: X}\napproaches:\n- key: a\n  title: A\n  status: nope\n"
    )
    r = run("import", str(bad))
    assert r.returncode == 1
    assert "line 6" in r.stderr and "status" in r.stderr and "nothing was imported" in r.stderr
    r = run("export", "x")
    assert r.returncode == 1 and "No campaign named 'x'" in r.stderr
    r = run("export", "x", "-o", str(tmp_path / "x.yaml"))
    assert r.returncode == 1 and not (tmp_path / "x.yaml").exists()
    r = run("import", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "cannot read" in r.stderr
    # A binary file and an export into a folder that is not there: one line each, exit code 2, no traceback.
    (tmp_path / "photo.jpg").write_bytes(bytes(range(256)) * 64)
    r = run("import", str(tmp_path / "photo.jpg"))
    assert r.returncode == 2 and "not a UTF-8 text file" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert run("demo").returncode == 0
    r = run("export", "kimi-k25-eagle3", "-o", "/no/such/dir/x.yaml")
    assert r.returncode == 2 and "cannot write /no/such/dir/x.yaml: No such file or directory" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_login_url_and_tokens(run, tmp_path):
    # No board here yet (run outside the checkout): refused, saying which database, and none is created.
    db = tmp_path / "data" / "campaign.db"
    for args in (("login-url",), ("token", "create", "ci"), ("runners", "create", "node-1")):
        r = run(*args)
        assert r.returncode == 2 and f"no board at sqlite:///{db}" in r.stderr, (args, r.stderr)
        assert "CAMPAIGN_DATABASE_URL" in r.stderr and "Traceback" not in r.stderr
        assert not db.exists() and r.stdout == ""
    assert run("demo").returncode == 0  # a board (as `campaign serve` makes one)
    r = run("login-url")
    assert r.returncode == 0 and "/login?token=login_" in r.stdout
    r = run("token", "create", "ci")
    assert r.returncode == 0 and r.stdout.strip().startswith("cbt_")
    assert run("token", "revoke", "ci").returncode == 0
    r = run("token", "revoke", "ci")
    assert r.returncode == 1 and "no live API token" in r.stderr


def test_serve_refuses_no_auth_on_a_public_address(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--host", "0.0.0.0", "--no-runner"],
        env={**os.environ, "CAMPAIGN_AUTH_ENABLED": "false", "CAMPAIGN_DATA_DIR": str(tmp_path)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "only allowed on a loopback address" in r.stderr


def test_notify_add_and_list_show_the_url_redacted_and_refuse_unknown_events(run):
    run("demo")
    added = run("notify", "add", "json://ops:hunter2@127.0.0.1:9/hook", "--event", "trial.ended", "-e", "runner.lost")
    assert added.returncode == 0, added.stderr
    assert "json://ops:****@127.0.0.1:9/hook <- runner.lost, trial.ended" in added.stdout
    listed = run("notify", "list")
    assert "hunter2" not in listed.stdout and "[every campaign] runner.lost, trial.ended: nothing sent" in listed.stdout
    bad = run("notify", "add", "json://127.0.0.1:9/hook", "--event", "trial.started")
    assert bad.returncode != 0 and "unknown event 'trial.started'" in bad.stderr + bad.stdout


def test_a_gzip_compressed_results_campaign_past_the_yaml_limit_imports(run, tmp_path):
    """The committed faithful MoE sweep is 3.3 MB of YAML (past the 2 MiB limit) and 0.3 MB compressed: it
    imports; a small gzip file that expands past CAMPAIGN_MAX_CAMPAIGN_FILE_EXPANDED_BYTES (64 MiB) does not."""
    import gzip

    results = ROOT / "docs" / "results" / "moe-faithful-h200x1.yaml.gz"
    assert len(gzip.decompress(results.read_bytes())) > 2 * 1024 * 1024
    r = run("import", str(results))
    assert r.returncode == 0, r.stderr
    assert "created campaign 'moe-faithful-h200x1'" in r.stdout and "16 trials" in r.stdout
    bomb = tmp_path / "bomb.yaml.gz"
    bomb.write_bytes(gzip.compress(b"#" * (65 << 20)))
    r = run("import", str(bomb))
    assert r.returncode == 2 and "expands past 67108864 bytes" in r.stderr and "nothing was imported" in r.stderr
    assert "Traceback" not in r.stderr
