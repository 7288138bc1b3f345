"""In Chromium: a trial writes a text file with HTML in it and a profiler trace into $CAMPAIGN_ARTIFACTS_DIR.
Its open trial page lists them once the embedded runner has uploaded them (no reload), shows the text
escaped (nothing runs), and the trace's kernel table with its N_ar and t_ar; the compare view diffs two
trials' kernels."""

from __future__ import annotations

import json
import sys

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from app.db import make_engine
from tests.support.browser import login_context
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import command_recipe, seed_campaign

pytestmark = pytest.mark.browser

EVIL = "<img src=x onerror=alert(1)>"


def _trace(allreduce: tuple[str, float] = ("ncclDevKernel_AllReduce_Sum_bf16", 17.5)) -> str:
    events = []
    corr = 0
    for step in range(2):
        t = 1000.0 + step * 2000
        events.append({"ph": "X", "cat": "user_annotation", "name": "verify_step", "pid": 1, "ts": t, "dur": 100})
        for i, (name, dur) in enumerate([("sm90_gemm_bf16", 40.0), allreduce] * 4):
            corr += 1
            launch = t + 1 + i * 10
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "ts": launch,
                    "dur": 1,
                    "args": {"correlation": corr},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "ts": launch + 300,
                    "dur": dur,
                    "args": {"correlation": corr},
                }
            )
    return json.dumps({"traceEvents": events})


SCRIPT = f"""
import os, pathlib
out = pathlib.Path(os.environ["CAMPAIGN_ARTIFACTS_DIR"])
(out / "notes.txt").write_text({EVIL!r} + "\\nsecond line\\n")
(out / "verify.trace.json").write_text({_trace()!r})
print("wrote artifacts")
"""


def _second_traced_trial(engine, url: str, first: int) -> int:
    """Another ended trial of the campaign (on the same runner), whose trace an operator uploads."""
    import hashlib

    import httpx

    from app.db import session_scope
    from app.domain.logins import create_api_token
    from app.domain.scheduling import create_trial
    from app.domain.trials import end_trial
    from app.models import Approach, Runner, Trial, TrialState
    from tests.support.auth import ensure_admin

    with session_scope(engine) as session:
        done = session.get_one(Trial, first)
        approach = Approach(campaign_id=done.campaign_id, key="symm", title="Symm", position=9)
        session.add(approach)
        session.flush()
        trial = create_trial(session, approach, session.get(Runner, done.runner_id), "test")
        end_trial(session, trial, TrialState.succeeded)
        headers = {"Authorization": f"Bearer {create_api_token(session, 'upload', ensure_admin(session))}"}
        trial_id = trial.id or 0
    body = _trace(("one_shot_all_reduce_kernel<bf16>", 6.5)).encode()
    put = httpx.put(f"{url}/api/trials/{trial_id}/uploads/verify.trace.json?offset=0", content=body, headers=headers)
    assert put.status_code == 200, put.text
    done_upload = httpx.post(
        f"{url}/api/trials/{trial_id}/artifacts",
        json={"name": "verify.trace.json", "size": len(body), "sha256": hashlib.sha256(body).hexdigest()},
        headers=headers,
    )
    assert done_upload.status_code == 201, done_upload.text
    return trial_id


def test_the_trial_page_lists_artifacts_escaped_and_the_traces_kernels(tmp_path, browser):
    db_url = f"sqlite:///{tmp_path / 'e2e.db'}"
    server = start_live_server(tmp_path, db_url)  # with its embedded runner
    engine = make_engine(db_url)
    seed_campaign(
        engine,
        "art",
        [{"key": "writes", "title": "Writes artifacts", "recipe": command_recipe(sys.executable, "-c", SCRIPT)}],
    )
    context, page = login_context(browser, server.url, engine)
    dialogs: list[str] = []

    def on_dialog(dialog) -> None:  # an alert() would mean artifact text ran as HTML
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    try:
        page.goto(f"{server.url}/campaigns/art")
        for _ in range(60):
            with page.expect_response(lambda r: r.url.endswith("/run-next")) as answer:
                page.click("#run-next-button")
            if "Started" in answer.value.text():
                break
            page.wait_for_timeout(500)
        page.click("#run-next-result a")
        # The page was open before the upload: the fragment follows the trial's feed.
        expect(page.locator("#artifacts tr[data-name='notes.txt']")).to_be_visible(timeout=30000)
        expect(page.locator("#artifacts tr[data-name='verify.trace.json']")).to_be_visible()
        expect(page.locator("#trace-inputs")).to_contain_text("N_ar = 4")
        expect(page.locator("#trace-inputs")).to_contain_text("t_ar = 17.5 us")
        nccl = page.locator("#artifacts table.kernels tr[data-kind='NCCL allreduce']")
        expect(nccl).to_contain_text("ncclDevKernel_AllReduce_Sum_bf16")
        # The fragment follows the trial's feed: a refresh landing just after the click swaps the opened view
        # away (the whole fragment is re-rendered), so the view is opened again until it stays.
        for _ in range(5):
            page.locator("#artifacts tr[data-name='notes.txt'] button", has_text="view").click()
            try:
                page.locator("#artifact-view pre").wait_for(timeout=5000)
                break
            except PlaywrightTimeout:
                continue
        expect(page.locator("#artifact-view pre")).to_contain_text(EVIL)
        assert page.locator("#artifacts img").count() == 0 and dialogs == []

        # A second trial's trace, where symmetric memory replaced NCCL: the compare view's kernel diff says so.
        first = int(page.url.rsplit("/", 1)[1])
        second = _second_traced_trial(engine, server.url, first)
        page.goto(f"{server.url}/campaigns/art/compare?trial={first}&trial={second}")
        diff = page.locator("#kernel-diff")
        expect(diff.locator("tr[data-change='vanished']")).to_contain_text("ncclDevKernel_AllReduce_Sum_bf16")
        expect(diff.locator("tr[data-change='appeared']")).to_contain_text("one_shot_all_reduce")
        expect(diff.locator("tr[data-change='same']")).to_contain_text("sm90_gemm_bf16")
    finally:
        context.close()
        engine.dispose()
        stop_live_server(server)
