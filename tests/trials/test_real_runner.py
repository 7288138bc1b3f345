"""Trials end to end with real processes: uvicorn, `campaign runner`, and the trial's process tree."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import time

import httpx
import pytest

from app.state import app_state
from tests.support.servers import ThreadServer
from tests.support.trials import (
    command_recipe,
    log_text,
    make_settings,
    new_runner_token,
    real_runner_available,
    run_next,
    seed_campaign,
    start_real_runner,
    stored_log,
    trial,
    trial_output,
    viewer_messages,
)
from tests.support.waiting import wait_for

# serial: a real runner heartbeating every 0.5 s and declared lost after 3 s; starved of CPU by tests on
# the other xdist workers (browsers, recipe subprocesses), it could be declared lost mid-test.
pytestmark = [
    pytest.mark.skipif(not real_runner_available(), reason="runners.agent is not installed"),
    pytest.mark.serial,
]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
    return True


@pytest.fixture
def node(tmp_path):
    """A server and a real runner connected to it; yields (server, runner process)."""
    srv = ThreadServer(make_settings(tmp_path, runner_lost_after_s=3.0, cancel_grace_s=1.0)).start()
    _, token = new_runner_token(srv.engine, "test-node")
    proc = start_real_runner(srv, token, tmp_path / "spool")
    try:
        wait_for(lambda: app_state(srv.app).hub.online(), timeout=30, what="the runner to connect")
        yield srv, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except Exception:
                os.killpg(proc.pid, signal.SIGKILL)
        srv.stop()


def _stored(srv, trial_id: int) -> str:
    """The trial's own output as stored (after the runner's first line)."""
    return trial_output(stored_log(srv, trial_id))


def test_output_arrives_complete_and_in_order(node):
    srv, _ = node
    script = "import sys\nfor i in range(20000): sys.stdout.write(f'line {i:06d}\\n')\n"
    seed_campaign(
        srv.engine, "spec", [{"key": "print", "title": "Print", "recipe": command_recipe(sys.executable, "-c", script)}]
    )
    started = run_next(srv)
    assert started["started"], started
    tid = started["trial_id"]
    wait_for(lambda: trial(srv, tid)["state"] == "succeeded", timeout=60, what="trial to succeed")
    expected = "".join(f"line {i:06d}\n" for i in range(20000))
    assert _stored(srv, tid) == expected
    msgs = viewer_messages(srv, tid, until=lambda m: len(trial_output(log_text(m))) >= len(expected))
    assert trial_output(log_text(msgs)) == expected


def test_cancel_kills_the_process_tree_within_grace(node, tmp_path):
    srv, _ = node
    pids = tmp_path / "pids"
    pids.mkdir()
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        if os.fork() == 0:                      # a child that ignores SIGTERM
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            open("{pids}/child", "w").write(str(os.getpid()))
            while True: time.sleep(1)
        if os.fork() == 0:                      # a daemonized grandchild: new session, parent gone
            os.setsid()
            if os.fork() == 0:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                open("{pids}/daemon", "w").write(str(os.getpid()))
                while True: time.sleep(1)
            os._exit(0)
        print("ready", flush=True)
        while True: time.sleep(1)
    """)
    seed_campaign(
        srv.engine, "spec", [{"key": "tree", "title": "Tree", "recipe": command_recipe(sys.executable, "-c", script)}]
    )
    tid = run_next(srv)["trial_id"]
    wait_for(lambda: (pids / "child").exists() and (pids / "daemon").exists(), timeout=30, what="the process tree")
    tree = [int((pids / n).read_text()) for n in ("child", "daemon")]
    assert all(_alive(p) for p in tree)
    t0 = time.monotonic()
    r = httpx.post(f"{srv.url}/api/trials/{tid}/cancel", headers=srv.api_headers())
    assert r.status_code == 200, r.text
    wait_for(
        lambda: not any(_alive(p) for p in tree),
        timeout=srv.settings.cancel_grace_s + 2,
        interval=0.02,
        what="the process tree to die",
    )
    assert time.monotonic() - t0 <= srv.settings.cancel_grace_s + 2
    wait_for(lambda: trial(srv, tid)["state"] == "cancelled", timeout=10, what="the trial to be cancelled")


def test_runner_killed_mid_trial_loses_the_trial(node, tmp_path):
    srv, proc = node
    pidfile = tmp_path / "trial.pid"
    script = f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\nprint('working', flush=True)\ntime.sleep(60)\n"
    seed_campaign(
        srv.engine, "spec", [{"key": "hang", "title": "Hang", "recipe": command_recipe(sys.executable, "-c", script)}]
    )
    tid = run_next(srv)["trial_id"]
    wait_for(lambda: trial(srv, tid)["state"] == "running" and pidfile.exists(), timeout=30, what="the trial to run")
    os.kill(proc.pid, signal.SIGKILL)
    try:
        wait_for(
            lambda: trial(srv, tid)["state"] == "lost",
            timeout=srv.settings.runner_lost_after_s + 5,
            what="the trial to be lost",
        )
        runners = httpx.get(f"{srv.url}/api/runners", headers=srv.api_headers()).json()
        assert [r["status"] for r in runners] == ["offline"]
    finally:
        try:
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def test_socket_cut_mid_stream_keeps_the_stored_log_exact(node):
    srv, _ = node
    script = (
        "import sys, time\n"
        "for i in range(30000):\n"
        "    sys.stdout.write(f'n {i:06d}\\n')\n"
        "    if i % 1000 == 0: sys.stdout.flush(); time.sleep(0.02)\n"
    )
    seed_campaign(
        srv.engine,
        "spec",
        [{"key": "stream", "title": "Stream", "recipe": command_recipe(sys.executable, "-c", script)}],
    )
    tid = run_next(srv)["trial_id"]
    wait_for(lambda: trial(srv, tid)["log_bytes"] > 20000, timeout=30, what="some output")
    hub = app_state(srv.app).hub
    for link in list(hub.runners.values()):  # cut the runner's socket from the server side, mid-stream
        asyncio.run_coroutine_threadsafe(link.close(1012, "test cut"), srv.loop).result(5)
    wait_for(lambda: trial(srv, tid)["state"] == "succeeded", timeout=60, what="the trial to succeed")
    assert _stored(srv, tid) == "".join(f"n {i:06d}\n" for i in range(30000))
