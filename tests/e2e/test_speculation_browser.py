"""In Chromium against a real `campaign serve`: the charts page draws the speedup-vs-batch chart of the
answer over batch sizes, with its points inside the axes and an interval band, and the Deploy panel."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.support.browser import login_url, on_board
from tests.support.speculation import BATCHES, SLUG, build_sweep_campaign

pytestmark = pytest.mark.browser


@pytest.fixture
def server(live_server):
    on_board(live_server, build_sweep_campaign)
    live_server.login = login_url(live_server, f"/campaigns/{SLUG}/charts")
    return live_server


def test_speedup_against_batch_has_points_in_the_axes_and_a_band(server, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(server.login)
        page.wait_for_url(f"**/campaigns/{SLUG}/charts")
        page.wait_for_function(
            "() => { const d = document.getElementById('chart-speedup-batch');"
            " return d && d.data && d.data.length && d.querySelector('.main-svg'); }"
        )
        traces = page.evaluate(
            "document.getElementById('chart-speedup-batch').data.map(t => ({name: t.name, fill: t.fill || null,"
            " x: Array.from(t.x), y: Array.from(t.y)}))"
        )
        lines = [t for t in traces if t["name"] in ("NCCL in a CUDA graph", "symmetric memory one-shot in a graph")]
        assert len(lines) == 2 and all(t["x"] == list(BATCHES) for t in lines)
        bands = [t for t in traces if t["fill"] == "tonexty"]
        assert len(bands) == 3  # one per approach with a speedup
        one = next(t for t in traces if t["name"] == "1.0: no gain")
        assert one["y"] == [1.0, 1.0]
        # Every point of every line lies inside the plot area Plotly drew (its axes' pixel ranges).
        inside = page.evaluate(
            """() => {
              const d = document.getElementById('chart-speedup-batch');
              const xa = d._fullLayout.xaxis, ya = d._fullLayout.yaxis;
              const out = [];
              d._fullData.forEach(t => { if (t.mode && t.mode.includes('markers')) {
                t.x.forEach((x, i) => { const px = xa.l2p(xa.d2l(x)), py = ya.l2p(ya.d2l(t.y[i]));
                  out.push(px >= 0 && px <= xa._length && py >= 0 && py <= ya._length); }); } });
              return out; }"""
        )
        assert inside and all(inside)
        # The band is drawn (a filled path) and the markers too.
        assert page.locator("#chart-speedup-batch .scatterlayer .trace .js-fill").count() >= 3
        assert page.locator("#chart-speedup-batch .scatterlayer .point").count() >= 2 * len(BATCHES)
        page.wait_for_function("() => document.querySelector('#chart-speedup-heatmap .main-svg')")
        sentence = page.locator("[data-sentence]").inner_text()
        # One sentence per batch range, as the grid says it (issue 43 item 10): k named for each range that pays.
        assert (
            sentence.startswith("On this node EAGLE-3 with ") and "draft token" in sentence and " at batch" in sentence
        )
        sglang = page.locator("#deploy-shell-sglang").input_value()
        assert "--speculative-algorithm EAGLE3" in sglang and "--speculative-adaptive" in sglang
        assert "--cuda-graph" not in sglang and "--max-running-requests" not in sglang
        assert "num_speculative_tokens_per_batch_size" in page.locator("#deploy-shell-vllm").input_value()
        assert errors == []
    finally:
        context.close()


def test_deploy_panel_copies_the_quoted_line_and_downloads_the_file(server, browser):
    """Issue 32 item 9: the vLLM line pasted into a shell is two arguments; Copy puts it on the clipboard;
    Download saves the file the launch line names; the served range changes SGLang's one-k line."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    page = context.new_page()
    try:
        page.goto(server.login)
        page.wait_for_url(f"**/campaigns/{SLUG}/charts")
        line = page.locator("#deploy-shell-vllm").input_value()
        assert shlex.split(line)[0] == "--speculative-config" and len(shlex.split(line)) == 2
        assert json.loads(shlex.split(line)[1])["method"] == "eagle3"
        page.locator('#deploy [data-copy="#deploy-shell-vllm"]').click()
        page.wait_for_function(
            "() => document.querySelector('[data-copy=\"#deploy-shell-vllm\"]').textContent === 'Copied'"
        )
        assert page.evaluate("navigator.clipboard.readText()") == line
        # issue 45 item 5: the whole launch command, its file first; Copy gives exactly the text the API gives
        whole = page.locator("#deploy-launch-sglang").input_value()
        assert whole.startswith("cat > sglang-adaptive-spec.json <<'CAMPAIGN_BOARD_EOF'\n")
        command = whole.rstrip("\n").splitlines()[-1]
        assert shlex.split(command)[:3] == ["python", "-m", "sglang.launch_server"]
        assert "--tp-size" in shlex.split(command) and "--speculative-adaptive" in shlex.split(command)
        page.locator('#deploy [data-copy="#deploy-launch-sglang"]').click()
        page.wait_for_function(
            "() => document.querySelector('[data-copy=\"#deploy-launch-sglang\"]').textContent === 'Copied'"
        )
        assert page.evaluate("navigator.clipboard.readText()") == whole
        assert "<target-model-path>" in page.locator('[data-testid="launch-vllm"]').inner_text()
        with page.expect_download() as info:
            page.locator('[data-testid="download-sglang"]').click()
        download = info.value
        assert download.suggested_filename == "sglang-adaptive-spec.json"
        slots = json.loads(open(download.path()).read())
        assert slots["1"]["candidate_steps"][0] >= 1
        with page.expect_download() as info:
            page.locator('[data-testid="download-trtllm"]').click()
        assert "draft_len_schedule" in open(info.value.path()).read()
        # the served range: the one-k line's cost table covers just those batches
        page.fill('[data-testid="serve-form"] input[name="serve_batches"]', "64-128")
        page.click('[data-testid="serve-form"] button')
        page.wait_for_url("**serve_batches=64-128**")
        page.locator('[data-testid="static-sglang"] summary').click()
        rows = page.locator('[data-testid="static-sglang"] tbody tr td:first-child').all_inner_texts()
        assert rows == ["64", "128"]
    finally:
        context.close()


def test_what_if_refuses_what_the_browser_cannot_parse_and_clears_a_stored_input(server, browser):
    """Issue 32 items 7 and 8 in Chromium: 1e309 reaches the server and is refused at its field (a number input
    sent it empty); tau 10 with 3 draft steps is refused; a stored input is cleared from the form."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    try:
        page.goto(server.login)
        page.wait_for_url(f"**/campaigns/{SLUG}/charts")
        invalid = page.locator('[data-testid="whatif-invalid"]')
        page.fill('#whatif-form input[name="accept_length"]', "1e309")
        invalid.wait_for()
        assert "Accept length τ" in invalid.inner_text()
        page.fill('#whatif-form input[name="accept_length"]', "10")
        page.fill('#whatif-form input[name="draft_steps"]', "3")
        page.wait_for_function(
            "() => { const e = document.querySelector('[data-testid=whatif-invalid]'); return e && e.textContent.includes('above 4'); }"
        )
        page.fill('#whatif-form input[name="accept_length"]', "")
        page.fill('#whatif-form input[name="draft_steps"]', "")
        page.fill('#whatif-form input[name="allreduce_latency_us"]', "500")
        page.locator('[data-testid="whatif-t-ar"]').wait_for()
        page.fill('#whatif-form input[name="allreduce_latency_us"]', "")
        clear = page.locator('[data-testid="clear-allreduces_per_verify"]')
        assert clear.count() == 1
        with page.expect_navigation():
            clear.click()
        assert page.locator('[data-testid="clear-allreduces_per_verify"]').count() == 0
    finally:
        context.close()


def test_a_what_if_redraws_the_answer_over_batches(server, browser):
    """Typing a what-if swaps in the whole answer (out of band): the sentence and the speedup chart are those
    of the what-if, and the page still has one answer (issue 33: the what-if changes the whole answer)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(server.login)
        page.wait_for_url(f"**/campaigns/{SLUG}/charts")
        page.wait_for_function("() => document.getElementById('chart-speedup-batch')?.data?.length")
        before = page.inner_text("#speculation-answer [data-sentence]")
        first = page.evaluate("JSON.stringify(document.getElementById('chart-speedup-batch').data.map(t => t.y))")
        page.fill("input[name=allreduces_per_verify]", "1220")  # ten times the communication
        page.wait_for_selector("#whatif-result [data-testid=whatif-active]")
        page.wait_for_function(
            "(s) => document.querySelector('#speculation-answer [data-sentence]')?.innerText !== s", arg=before
        )
        after = page.evaluate("JSON.stringify(document.getElementById('chart-speedup-batch').data.map(t => t.y))")
        assert after != first  # the chart was re-plotted from the what-if's figure
        assert page.locator("#speculation-answer").count() == 1 and page.locator("#speculation").count() == 1
        assert errors == [], errors
    finally:
        context.close()
