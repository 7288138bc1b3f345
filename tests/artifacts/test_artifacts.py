"""Trial artifacts against a real server (uvicorn, SQLite file and PostgreSQL): a real runner uploads what a
trial wrote; the upload protocol resumes, refuses others' trials and what passes the caps; retention removes
the oldest first; downloads carry their type and nothing runs in the page; a trace gives its kernel table."""

from __future__ import annotations

import hashlib
import json
import os
import signal

import httpx
import pytest

from app.db import session_scope
from app.domain.logins import create_api_token
from app.models import Role
from app.state import app_state
from runners.artifacts import Client, UploadError, files_of, upload_dir
from tests.support.artifacts import ended_trial
from tests.support.auth import _user, add_user
from tests.support.servers import ThreadServer
from tests.support.traces import cuda_trace
from tests.support.trials import (
    command_recipe,
    make_settings,
    new_runner_token,
    real_runner_available,
    run_next,
    seed_campaign,
    start_real_runner,
    trial,
)
from tests.support.waiting import wait_for


def _file(tmp_path, name: str, data: bytes):
    path = tmp_path / "out" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_an_upload_resumes_where_the_board_stopped(server, tmp_path):
    trial_id, token = ended_trial(server)
    data = os.urandom(1_500_000)
    path = _file(tmp_path, "profile.bin", data)
    client = Client(server.url, token)
    # A first runner process sent 600,000 bytes, then died.
    r = httpx.put(
        f"{server.url}/api/trials/{trial_id}/uploads/profile.bin?offset=0",
        content=data[:600_000],
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 200 and r.json()["offset"] == 600_000
    stale = httpx.put(
        f"{server.url}/api/trials/{trial_id}/uploads/profile.bin?offset=0",
        content=b"x",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert stale.status_code == 409 and "resume from 600000" in stale.json()["detail"]
    done = client.upload(trial_id, "profile.bin", path)  # the next runner process resumes
    assert done.resumed_from == 600_000 and done.size == len(data)
    assert done.sha256 == hashlib.sha256(data).hexdigest()
    listed = httpx.get(f"{server.url}/api/trials/{trial_id}/artifacts", headers=server.api_headers()).json()
    assert [(a["name"], a["size"], a["sha256"], a["content_type"]) for a in listed] == [
        ("profile.bin", len(data), done.sha256, "application/octet-stream")
    ]
    got = httpx.get(f"{server.url}/api/trials/{trial_id}/artifacts/profile.bin", headers=server.api_headers())
    assert got.content == data and got.headers["content-disposition"].startswith("attachment")


def test_uploads_are_refused_to_others_runners_viewers_and_anonymous(server, tmp_path):
    trial_id, _ = ended_trial(server, "node-1")
    _, other = new_runner_token(server.engine, "node-2")
    url = f"{server.url}/api/trials/{trial_id}/uploads/x.txt?offset=0"
    assert httpx.put(url, content=b"hi", headers={"Authorization": f"Bearer {other}"}).status_code == 403
    assert httpx.put(url, content=b"hi").status_code == 401
    add_user(server.app, "vera", Role.viewer)
    with session_scope(server.engine) as session:
        viewer = {"Authorization": f"Bearer {create_api_token(session, 'v', _user(session, 'vera'))}"}
    assert httpx.put(url, content=b"hi", headers=viewer).status_code == 403
    assert httpx.put(url, content=b"hi", headers=server.api_headers()).status_code == 200  # an operator may
    bad = httpx.put(
        f"{server.url}/api/trials/{trial_id}/uploads/../../etc/passwd?offset=0",
        content=b"x",
        headers=server.api_headers(),
    )
    assert bad.status_code in (404, 422)


def test_size_caps_and_retention(server, tmp_path):
    trial_id, token = ended_trial(server)
    client = Client(server.url, token)
    with pytest.raises(UploadError, match="413") as exc:
        client.upload(trial_id, "huge.bin", _file(tmp_path, "huge.bin", os.urandom(2_100_000)))  # over the file cap
    assert exc.value.refused
    client.upload(trial_id, "a.bin", _file(tmp_path, "a.bin", os.urandom(1_800_000)))
    with pytest.raises(UploadError, match="413"):  # 1.8 MB + 1.8 MB passes the trial's 3 MB
        client.upload(trial_id, "b.bin", _file(tmp_path, "b.bin", os.urandom(1_800_000)))
    # Other trials of the campaign: past 5 MB the oldest go first.
    for n in range(3):
        other, other_token = ended_trial(server, f"node-{n + 5}")
        Client(server.url, other_token).upload(other, "c.bin", _file(tmp_path, f"c{n}.bin", os.urandom(1_500_000)))
    listed = httpx.get(f"{server.url}/api/trials/{trial_id}/artifacts", headers=server.api_headers()).json()
    assert listed[0]["name"] == "a.bin" and "retention limit" in (listed[0]["removed"] or "")
    gone = httpx.get(f"{server.url}/api/trials/{trial_id}/artifacts/a.bin", headers=server.api_headers())
    assert gone.status_code == 404 and "retention limit" in gone.json()["detail"]
    objects = list((server.settings.data_dir / "artifacts" / "objects").rglob("*"))
    assert sum(p.stat().st_size for p in objects if p.is_file()) == 3 * 1_500_000  # a.bin's bytes are gone too


def test_text_is_shown_escaped_and_html_is_never_served_inline(server, tmp_path):
    trial_id, token = ended_trial(server)
    client = Client(server.url, token)
    evil = b"<script>alert(1)</script>\n"
    client.upload(trial_id, "notes.txt", _file(tmp_path, "notes.txt", evil))
    client.upload(trial_id, "report.html", _file(tmp_path, "report.html", evil))
    cookies = {"cb_session": server.session_cookie()}
    view = httpx.get(f"{server.url}/trials/{trial_id}/artifact-view?name=notes.txt", cookies=cookies)
    assert (
        view.status_code == 200 and "&lt;script&gt;alert(1)&lt;/script&gt;" in view.text and "<script>" not in view.text
    )
    html = httpx.get(f"{server.url}/api/trials/{trial_id}/artifacts/report.html", cookies=cookies)
    assert (
        html.headers["content-disposition"].startswith("attachment")
        and html.headers["x-content-type-options"] == "nosniff"
    )
    txt = httpx.get(f"{server.url}/api/trials/{trial_id}/artifacts/notes.txt", cookies=cookies)
    assert txt.headers["content-type"].startswith("text/plain") and txt.headers["content-disposition"].startswith(
        "inline"
    )
    fragment = httpx.get(f"{server.url}/trials/{trial_id}/artifacts", cookies=cookies)
    assert 'data-name="report.html"' in fragment.text and "view</button>" in fragment.text


def test_an_uploaded_trace_gives_its_kernel_table(server, tmp_path):

    trial_id, token = ended_trial(server)
    trace = cuda_trace(
        tmp_path / "verify.trace.json", [("gemm", 40.0), ("ncclDevKernel_AllReduce_Sum_bf16", 17.0)] * 61
    )
    Client(server.url, token).upload(trial_id, "verify.trace.json", trace)
    table = httpx.get(f"{server.url}/api/trials/{trial_id}/kernels", headers=server.api_headers()).json()
    assert table["allreduces_per_step"] == 61 and table["allreduce_us"] == pytest.approx(17.0)
    assert table["kernels"][0]["name"] == "gemm" and table["kernels"][1]["kind"] == "NCCL allreduce"
    none = httpx.get(
        f"{server.url}/api/trials/{ended_trial(server, 'node-3')[0]}/kernels", headers=server.api_headers()
    )
    assert none.status_code == 404
    page = httpx.get(f"{server.url}/trials/{trial_id}/artifacts", cookies={"cb_session": server.session_cookie()})
    assert "N_ar = <b>61</b>" in page.text


@pytest.mark.serial
@pytest.mark.skipif(not real_runner_available(), reason="runners.agent is not installed")
def test_a_real_runner_uploads_what_the_trial_wrote(tmp_path):
    srv = ThreadServer(make_settings(tmp_path, runner_lost_after_s=10.0)).start()
    script = (
        'echo "{\\"ok\\": true}" > "$CAMPAIGN_ARTIFACTS_DIR/result.json" && mkdir -p "$CAMPAIGN_ARTIFACTS_DIR/logs" '
        '&& head -c 300000 /dev/zero > "$CAMPAIGN_ARTIFACTS_DIR/logs/big.log" && echo done'
    )
    seed_campaign(srv.engine, "spec", [{"key": "w", "title": "Writes", "recipe": command_recipe("sh", "-c", script)}])
    _, token = new_runner_token(srv.engine, "test-node")
    proc = start_real_runner(srv, token, tmp_path / "spool")
    try:
        wait_for(lambda: app_state(srv.app).hub.online(), timeout=30, what="the runner to connect")
        started = run_next(srv)
        wait_for(lambda: trial(srv, started["trial_id"])["state"] == "succeeded", timeout=60, what="the trial")
        listed = wait_for(
            lambda: (
                len(
                    r := httpx.get(
                        f"{srv.url}/api/trials/{started['trial_id']}/artifacts", headers=srv.api_headers()
                    ).json()
                )
                == 2
                and r
            ),
            timeout=30,
            what="the uploads",
        )
        assert [(a["name"], a["size"], a["content_type"]) for a in listed] == [
            ("logs/big.log", 300_000, "text/plain"),
            ("result.json", len('{"ok": true}\n'), "application/json"),
        ]
        got = httpx.get(f"{srv.url}/api/trials/{started['trial_id']}/artifacts/result.json", headers=srv.api_headers())
        assert json.loads(got.text) == {"ok": True}
        assert not (tmp_path / "spool" / "artifacts" / str(started["trial_id"])).exists()  # cleaned up once uploaded
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
        srv.stop()


def test_files_of_skips_links_and_upload_dir_cleans_up(server, tmp_path):
    trial_id, token = ended_trial(server)
    directory = tmp_path / "art"
    (directory / "sub").mkdir(parents=True)
    (directory / "sub" / "a.txt").write_text("a")
    (directory / "link.txt").symlink_to("/etc/hostname")
    assert [n for n, _ in files_of(directory)] == ["sub/a.txt"]
    assert [u.name for u in upload_dir(server.url, token, trial_id, directory)] == ["sub/a.txt"]
    assert not directory.exists()
