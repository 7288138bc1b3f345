// Live trial log: follows /api/trials/{id}/logs/ws?after=<last seq we have>, reconnecting with
// backoff (and at once when the server says we fell behind: close code 4000). Log text is only ever
// inserted as text nodes (textContent); ANSI SGR colour codes become spans with fixed classes.
// Metric lines (@@campaign-metric {json}) refresh the server's metrics table and, like phase lines
// (@@campaign-phase name), are hidden from the console unless "show raw output" is on (localStorage).
// Each metric name also gets a small Plotly chart in #metric-plots that grows as values stream; once
// the trial has ended the charts show the stored values (the metrics fragment's #metric-series).
// The status next to "Log" says "live" while the trial runs and the socket is open, "trial ended" after.
(function () {
  "use strict";
  const section = document.getElementById("trial");
  const pre = document.getElementById("log");
  if (!section || !pre) return;
  const trialId = section.dataset.trialId;
  const statusEl = document.getElementById("log-status");
  const follow = document.getElementById("log-follow");
  const MAX_NODES = 20000; // keep the page responsive on huge logs: older nodes leave the view
  const TERMINAL = section.dataset.terminalStates.split(" "); // app/models.py TERMINAL_TRIAL_STATES
  let lastSeq = -1;
  let view = JSON.parse(section.dataset.view || "{}");
  let retry = 0;
  let style = { bold: false, dim: false, italic: false, underline: false, fg: null };
  let trimmed = false;
  // The server's formats come from the page (app/templating.py: app/protocol/metrics.py, app/protocol/messages.py).
  const METRIC = section.dataset.metricPrefix;
  const PHASE = section.dataset.phasePrefix;
  let common = 0;
  while (common < METRIC.length && METRIC[common] === PHASE[common]) common++;
  const META = METRIC.slice(0, common); // what every line the recipes write for the board begins with
  const CLOSE = JSON.parse(section.dataset.closeCodes); // app/protocol/messages.py CloseCode, by name
  const DROPPED = JSON.parse(section.dataset.droppedMarker); // app/domain/logs.py dropped_marker's parts
  const EVENTS = JSON.parse(document.body.dataset.pageEvents); // app/services/events.py PAGE_EVENTS, by key
  let lineStart = true; // the next character starts a log line
  let held = ""; // the start of a line that may be a metric or phase line, until its newline arrives
  const metrics = []; // metrics parsed from the log, in order
  const RAW_KEY = "livelog.showRaw";
  const rawToggle = document.getElementById("log-raw");
  function setRaw(on) {
    pre.classList.toggle("show-raw", on);
    if (rawToggle) rawToggle.checked = on;
  }
  let rawStored = null;
  try { rawStored = localStorage.getItem(RAW_KEY); } catch (e) { /* storage off: default */ }
  setRaw(rawStored === "1");
  if (rawToggle) rawToggle.addEventListener("change", () => {
    setRaw(rawToggle.checked);
    try { localStorage.setItem(RAW_KEY, rawToggle.checked ? "1" : "0"); } catch (e) { /* storage off */ }
  });

  const live = (name) => section.querySelector('[data-live="' + name + '"]');

  function applySgr(params) {
    const codes = params === "" ? [0] : params.split(";").map((p) => parseInt(p || "0", 10));
    for (let i = 0; i < codes.length; i++) {
      const c = codes[i];
      if (c === 0) style = { bold: false, dim: false, italic: false, underline: false, fg: null };
      else if (c === 1) style.bold = true;
      else if (c === 2) style.dim = true;
      else if (c === 3) style.italic = true;
      else if (c === 4) style.underline = true;
      else if (c === 22) { style.bold = false; style.dim = false; }
      else if (c === 23) style.italic = false;
      else if (c === 24) style.underline = false;
      else if (c >= 30 && c <= 37) style.fg = c - 30;
      else if (c >= 90 && c <= 97) style.fg = c - 90 + 8;
      else if (c === 39) style.fg = null;
      else if (c === 38 && codes[i + 1] === 5) { const n = codes[i + 2]; style.fg = n >= 0 && n < 16 ? n : null; i += 2; }
      else if (c === 38 && codes[i + 1] === 2) { i += 4; }
    }
  }

  function styled() {
    return style.bold || style.dim || style.italic || style.underline || style.fg !== null;
  }

  function classes() {
    const out = [];
    if (style.bold) out.push("sgr-bold");
    if (style.dim) out.push("sgr-dim");
    if (style.italic) out.push("sgr-italic");
    if (style.underline) out.push("sgr-underline");
    if (style.fg !== null) out.push("fg-" + style.fg);
    return out.join(" ");
  }

  // CSI sequences (colours and others) and OSC sequences; only SGR ("m") changes anything.
  const ESC = /\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)/g;

  function render(text, frag) {
    let at = 0;
    let m;
    ESC.lastIndex = 0;
    const emit = (s) => {
      if (!s) return;
      if (styled()) {
        const span = document.createElement("span");
        span.className = classes();
        span.textContent = s;
        frag.appendChild(span);
      } else {
        frag.appendChild(document.createTextNode(s));
      }
    };
    while ((m = ESC.exec(text)) !== null) {
      emit(text.slice(at, m.index));
      if (m[2] === "m") applySgr(m[1]);
      at = ESC.lastIndex;
    }
    emit(text.slice(at));
  }

  // One complete metric or phase line: a hidden span in the console, a row or the phase on the page.
  function meta(line, frag) {
    const span = document.createElement("span");
    span.className = "log-meta";
    span.textContent = line;
    frag.appendChild(span);
    const body = line.replace(/\r?\n$/, "");
    if (body.startsWith(METRIC)) {
      try {
        const m = JSON.parse(body.slice(METRIC.length));
        if (m && typeof m.name === "string" && typeof m.value === "number") {
          metrics.push({ name: m.name, value: m.value, unit: String(m.unit || ""),
                         tags: m.tags && typeof m.tags === "object" ? m.tags : {} });
          metricsArrived();
        }
      } catch (e) { /* not JSON: the line stays in the raw output only */ }
    } else if (body.startsWith(PHASE) && !TERMINAL.includes(view.state)) {
      const name = body.slice(PHASE.length).trim().slice(0, 40);
      if (name) { view.phase = name; live("phase").textContent = name; }
    }
  }

  // Log text split into lines only as far as metric and phase lines need it: other text shows at once.
  function feed(text, frag) {
    let s = held + text;
    held = "";
    while (s) {
      const nl = s.indexOf("\n");
      const piece = nl < 0 ? s : s.slice(0, nl + 1);
      s = nl < 0 ? "" : s.slice(nl + 1);
      if (lineStart && (piece.startsWith(META) || (nl < 0 && META.startsWith(piece)))) {
        if (nl < 0) { held = piece; break; }
        if (piece.startsWith(METRIC) || piece.startsWith(PHASE)) { meta(piece, frag); continue; }
      }
      render(piece, frag);
      lineStart = nl >= 0;
    }
  }

  // The metrics table is the server's (_partials/metrics_table.html: the one place its cells are written).
  // The hub stores a metric row in the same transaction as the log chunk that holds it and sends the chunk
  // after the commit, so a metric line seen here is already in the table the server renders: at most two
  // refreshes a second while lines stream, the last one always after the last line.
  let metricsTimer = null;
  function metricsArrived() {
    if (metricsTimer !== null || TERMINAL.includes(view.state)) return;
    metricsTimer = setTimeout(() => {
      metricsTimer = null;
      document.body.dispatchEvent(new CustomEvent(EVENTS.metrics_arrived));
    }, 500);
  }
  // Once the trial has ended, its stored series (#metric-series) are what the plots show.
  document.body.addEventListener("htmx:afterSettle", () => {
    if (TERMINAL.includes(view.state)) plotStored();
  });

  // ---- one small chart per metric name (Plotly, served locally) ----
  const plotBox = document.getElementById("metric-plots");
  const plotArea = plotBox ? plotBox.querySelector(".metric-plots") : null;
  const MAX_PLOTS = 24;
  const plots = new Map(); // name -> {div, n: points drawn}
  let plotQueued = false;
  let plotsStored = false; // the stored values are drawn: the log no longer drives the charts

  function seriesFromLog() {
    const out = new Map();
    for (const m of metrics) {
      if (!out.has(m.name)) out.set(m.name, { unit: m.unit, values: [] });
      out.get(m.name).values.push(m.value);
    }
    return out;
  }

  function plotLayout(name, unit) {
    return {
      title: { text: name + (unit ? " (" + unit + ")" : ""), font: { size: 12 } },
      height: 180, autosize: true, margin: { l: 50, r: 10, t: 28, b: 28 }, showlegend: false,
      xaxis: { title: { text: "" }, automargin: true }, yaxis: { automargin: true },
    };
  }

  function drawSeries(series, replace) {
    if (!window.Plotly || !plotArea) return;
    // Shown before the first chart is made: Plotly sizes a chart by its container, and a chart made in
    // a hidden one takes Plotly's default 700 px and spills out of the grid.
    if (series.size) plotBox.hidden = false;
    for (const [name, s] of series) {
      let p = plots.get(name);
      if (!p) {
        if (plots.size >= MAX_PLOTS) continue;
        const div = document.createElement("div");
        div.className = "metric-plot";
        div.dataset.metric = name;
        plotArea.appendChild(div);
        p = { div: div, n: 0 };
        plots.set(name, p);
        Plotly.newPlot(div, [{ x: [], y: [], type: "scatter", mode: "lines+markers", name: name }],
                       plotLayout(name, s.unit), { displayModeBar: false, responsive: true });
      }
      if (replace) {
        // The stored series carry their x (the point's bytes / tokens / batch, from the server): print
        // order only where the metric has no numeric coordinate.
        const layout = plotLayout(name, s.unit);
        if (s.x_tag) layout.xaxis.title.text = s.x_tag;
        Plotly.react(p.div, [{ x: s.x || s.values.map((_, i) => i + 1), y: s.values, type: "scatter",
                                 mode: "lines+markers", name: name }], layout,
                     { displayModeBar: false, responsive: true });
        p.n = s.values.length;
      } else if (s.values.length > p.n) {
        const ys = s.values.slice(p.n);
        Plotly.extendTraces(p.div, { x: [ys.map((_, i) => p.n + i + 1)], y: [ys] }, [0]);
        p.n = s.values.length;
      }
    }
  }

  function schedulePlots() {
    if (plotQueued || plotsStored || !metrics.length) return;
    plotQueued = true;
    requestAnimationFrame(() => { plotQueued = false; if (!plotsStored) drawSeries(seriesFromLog(), false); });
  }

  // plotly.js loads after this script (the log must not wait for 3.5 MB): draw what came meanwhile.
  const plotlyTag = document.querySelector("script[data-plotly]");
  if (plotlyTag && !window.Plotly) {
    plotlyTag.addEventListener("load", () => {
      if (plotsStored || TERMINAL.includes(view.state)) plotStored();
      if (!plotsStored) schedulePlots();
    });
  }

  function plotStored() {
    const island = document.getElementById("metric-series");
    if (!island) return;
    let stored;
    try { stored = JSON.parse(island.textContent); } catch (e) { return; }
    plotsStored = true;
    drawSeries(new Map(Object.entries(stored)), true);
  }

  // "follow" pins the view to the newest line: ticked, the view jumps to the end and stays there as lines
  // arrive; scrolling up to read unticks it (the reader is never pulled away), re-ticking resumes.
  function atBottom() {
    return pre.scrollHeight - pre.scrollTop - pre.clientHeight < 40;
  }
  function toEnd() {
    pre.scrollTop = pre.scrollHeight;
  }
  let lastTop = 0;
  follow.addEventListener("change", function () {
    if (follow.checked) toEnd();
    lastTop = pre.scrollTop;
  });
  pre.addEventListener("scroll", function () {
    // Only a move up is the reader's: appended lines and toEnd() move the view down.
    if (follow.checked && pre.scrollTop < lastTop - 4 && !atBottom()) follow.checked = false;
    lastTop = pre.scrollTop;
  });

  function append(chunks) {
    const frag = document.createDocumentFragment();
    for (const [seq, text] of chunks) {
      if (seq <= lastSeq) continue;
      lastSeq = seq;
      if (text.startsWith(DROPPED.start) && text.includes(DROPPED.words)) {
        const span = document.createElement("span");
        span.className = "marker";
        span.textContent = text;
        frag.appendChild(span);
      } else {
        feed(text, frag);
      }
    }
    pre.appendChild(frag);
    schedulePlots();
    let extra = pre.childNodes.length - MAX_NODES;
    if (extra > 0) {
      while (extra-- > 0) pre.removeChild(pre.firstChild);
      if (!trimmed) {
        trimmed = true;
        statusEl.textContent = "earlier lines left the view; download the log for all of it";
      }
    }
    if (follow.checked) toEnd();
    lastTop = pre.scrollTop;
  }

  function fmtElapsed(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    return (h ? h + "h " : "") + (h || m ? m + "min " : "") + r + "s";
  }

  // A queued trial gets its runner when it starts: the state names the runner's id, the name is asked once.
  function showRunner() {
    const el = live("runner");
    if (!el || !view.runner_id || el.dataset.runnerId === String(view.runner_id)) return;
    const id = String(view.runner_id);
    el.dataset.runnerId = id;
    fetch("/api/runners/" + id, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (runner) { if (runner && el.dataset.runnerId === id) el.textContent = runner.name; })
      .catch(function () { el.textContent = "runner #" + id; });
  }

  function showState() {
    const badge = document.createElement("span");
    badge.className = "badge badge-" + view.state;  // one colour per state: static/app.css --status-*
    badge.dataset.state = view.state;
    badge.textContent = String(view.state || "").replace("_", " ");
    live("state").replaceChildren(badge);
    // Before the recipe names a phase, the state says where the trial is.
    live("phase").textContent = view.phase || ({ queued: "queued", dispatched: "starting", running: "running" }[view.state] || "");
    live("exit").textContent = view.exit_code === null || view.exit_code === undefined
      ? (view.exit_signal ? "signal " + view.exit_signal : "–") : String(view.exit_code);
    live("error").textContent = view.error || "";
    live("dropped").textContent = view.log_dropped_bytes
      ? view.log_dropped_bytes.toLocaleString() + " bytes of the log were dropped (size cap): the head and tail are kept" : "";
    showRunner();
    const cancel = document.getElementById("cancel-trial");
    if (cancel) cancel.hidden = TERMINAL.includes(view.state);
    if (TERMINAL.includes(view.state) || statusEl.dataset.live === "live") showLive();
    tick();
  }

  // "live" only while the trial runs and its log socket is open.
  function showLive() {
    const over = TERMINAL.includes(view.state);
    statusEl.dataset.live = over ? "ended" : "live";
    statusEl.classList.toggle("is-live", !over);
    statusEl.textContent = over ? "trial ended" : "live";
  }

  function tick() {
    const start = view.started_at || view.dispatched_at;
    if (!start) {
      // Not started yet: how long it has waited, so the field moves from the first second.
      const waiting = view.created_at && !TERMINAL.includes(view.state);
      live("elapsed").textContent = waiting ? fmtElapsed(Date.now() - Date.parse(view.created_at)) + " waiting" : "–";
      return;
    }
    const end = view.finished_at ? Date.parse(view.finished_at) : Date.now();
    live("elapsed").textContent = fmtElapsed(end - Date.parse(start));
  }
  setInterval(() => { if (!TERMINAL.includes(view.state)) tick(); }, 1000);

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(scheme + location.host + "/api/trials/" + trialId + "/logs/ws?after=" + lastSeq);
    ws.onopen = () => { retry = 0; showLive(); };
    ws.onmessage = (ev) => {
      const msg = JSON.parse(ev.data);
      if (msg.type === "log") append(msg.chunks);
      else if (msg.type === "state") {
        const wasOver = TERMINAL.includes(view.state);
        view = msg; showState();
        if (TERMINAL.includes(view.state) && held) { // a last line without its newline
          const frag = document.createDocumentFragment();
          const rest = held; held = "";
          if (rest.startsWith(METRIC) || rest.startsWith(PHASE)) meta(rest, frag); else render(rest, frag);
          pre.appendChild(frag);
        }
        // The verdict and metrics fragments (htmx) reload when the trial ends.
        if (!wasOver && TERMINAL.includes(view.state) && window.htmx) htmx.trigger(document.body, EVENTS.trial_ended);
      }
    };
    ws.onclose = (ev) => {
      if (statusEl.dataset.live === "live") { statusEl.dataset.live = "off"; statusEl.classList.remove("is-live"); }
      if (ev.code === CLOSE.resync) { statusEl.textContent = "catching up…"; setTimeout(connect, 50); return; }
      if ([CLOSE.login_required, CLOSE.unauthorized, CLOSE.policy].includes(ev.code)) {  // unauthorized: the session was revoked
        statusEl.dataset.live = "ended-session";
        statusEl.textContent = "log in again to follow the log";
        return;
      }
      const wait = Math.min(10000, 500 * Math.pow(2, retry++));
      statusEl.textContent = TERMINAL.includes(view.state) ? "trial ended" : "disconnected; retrying…";
      setTimeout(connect, TERMINAL.includes(view.state) && retry > 3 ? 30000 : wait);
    };
  }

  showState();
  connect();
})();
