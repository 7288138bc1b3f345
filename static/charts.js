// Charts and status pages: draw every [data-figure] div from the JSON <script type="application/json">
// it names, and re-plot with Plotly.react when an htmx swap (the what-if) brings new JSON. A null figure
// hides its div; a card whose figures are all null shows its .chart-empty note, or hides when it is
// [data-optional]. No inline script anywhere: the pages pass data only.
// A figure narrower than NARROW px (on a phone), a figure is fitted first (fit): its titles, legend names and labels
// wrap at spaces to the width, category labels shorten, point labels and text beside markers give way to the
// legend and the hover, and the heading, plot, axis and legend take fixed bands top down.
(function () {
  const CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  const NARROW = 500;

  // Break text at spaces into lines of at most `chars` characters (Plotly draws <br> as a line break).
  function wrap(text, chars) {
    if (typeof text !== "string" || text.length <= chars) return text;
    const lines = [];
    let line = "";
    text.split(" ").forEach(function (word) {
      if (line && (line + " " + word).length > chars) { lines.push(line); line = word; }
      else line = line ? line + " " + word : word;
    });
    if (line) lines.push(line);
    return lines.join("<br>");
  }

  function shorten(text, chars) {
    return typeof text === "string" && text.length > chars ? text.slice(0, chars - 1) + "…" : text;
  }

  // A copy of the figure for a plot `width` px wide (nothing changes at NARROW and above).
  function fit(figure, width) {
    if (width >= NARROW) return figure;
    const chars = Math.max(16, Math.floor((width - 40) / 7.5));
    const layout = JSON.parse(JSON.stringify(figure.layout || {}));
    const data = (figure.data || []).map(function (trace) {
      const t = Object.assign({}, trace);
      if (t.name) t.name = wrap(t.name, chars - 4);
      if (typeof t.mode === "string" && t.mode.indexOf("text") >= 0 && t.type === "scatter") {
        t.mode = t.mode.replace(/\+?text/, "") || "markers";  // the hover still says it
      }
      return t;
    });
    if (layout.title) {
      layout.title.text = wrap(layout.title.text, Math.floor(chars * 0.85));
      if (layout.title.subtitle) layout.title.subtitle.text = wrap(layout.title.subtitle.text, chars + 4);
    }
    // Category labels on the y axis take part of the width: the x title centres on what is left.
    const labelled = layout.yaxis && layout.yaxis.categoryarray;
    ["xaxis", "yaxis"].forEach(function (name) {
      const axis = layout[name];
      if (!axis) return;
      const room = name === "yaxis" ? 30 : labelled ? Math.floor(chars * 0.45) : chars;
      if (axis.title && axis.title.text) axis.title.text = wrap(axis.title.text, room);
      if (axis.categoryarray) {
        axis.tickmode = "array";
        axis.tickvals = axis.categoryarray;
        axis.ticktext = axis.categoryarray.map(function (c) { return shorten(String(c), 16); });
      }
    });
    layout.annotations = [];  // point labels crowd a phone's plot: the legend and the hover name every point
    const lines = function (text) { return typeof text === "string" ? text.split("<br>").length : 0; };
    const heading = layout.title ? 20 * lines(layout.title.text) + (layout.title.subtitle ? 16 * lines(layout.title.subtitle.text) : 0) : 0;
    const legend = 19 * data.reduce(function (n, t) { return n + (t.showlegend === false ? 0 : lines(t.name) || 1); }, 0);
    const xTitle = layout.xaxis && layout.xaxis.title ? 18 * lines(layout.xaxis.title.text) : 0;
    // Top down in fixed bands: the heading, the plot, the x axis' ticks and title, then the legend.
    if (layout.title) Object.assign(layout.title, { yref: "container", y: 1, yanchor: "top", pad: { t: 16 } });
    layout.margin = Object.assign({}, layout.margin, { t: heading + 36, b: 44 + xTitle + legend });
    layout.legend = Object.assign({}, layout.legend, { yref: "container", y: 0, yanchor: "bottom", x: 0 });
    layout.height = Math.max(layout.height || 440, 300 + heading + xTitle + legend);
    return { data: data, layout: layout };
  }

  function plot(div, text, figure) {
    if (div._drawnFrom !== text) return;  // a newer figure came meanwhile (a what-if swap)
    const fitted = fit(figure, div.clientWidth || div.parentElement.clientWidth);
    return Plotly.react(div, fitted.data, fitted.layout, CONFIG);
  }

  function draw() {
    if (!window.Plotly) return;
    const queue = [];
    document.querySelectorAll("[data-figure]").forEach(function (div) {
      const source = document.getElementById(div.dataset.figure);
      const text = source ? source.textContent : "null";
      const narrow = (div.clientWidth || div.parentElement.clientWidth) < NARROW;
      if (div._drawnFrom === text && div._narrow === narrow) return;
      div._drawnFrom = text;
      div._narrow = narrow;
      const figure = JSON.parse(text);
      if (!figure) {
        Plotly.purge(div);
        div.hidden = true;
        return;
      }
      div.hidden = false;
      queue.push([div, text, figure]);
    });
    document.querySelectorAll(".card").forEach(function (card) {
      const divs = Array.prototype.slice.call(card.querySelectorAll("[data-figure]"));
      if (!divs.length) return;
      const none = divs.every(function (d) { return d.hidden; });
      const empty = card.querySelector(".chart-empty");
      if (empty) empty.hidden = !none;
      if (card.hasAttribute("data-optional")) card.hidden = none;
    });
    // One chart, then let the browser paint it, then the next: the first chart shows without waiting for
    // the others' layout (the first visit's time to a drawn chart, docs/performance.md).
    (function next() {
      const item = queue.shift();
      if (!item) return;
      Promise.resolve(plot(item[0], item[1], item[2])).then(function () { setTimeout(next, 0); });
    })();
  }

  function drawn() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-figure]")).filter(function (d) { return !d.hidden; });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("form[data-no-submit]").forEach(function (form) {
      form.addEventListener("submit", function (event) { event.preventDefault(); });
    });
    draw();
  });
  document.addEventListener("htmx:afterSwap", draw);
  // Crossing NARROW (a phone turned, a window resized) fits the figures again.
  let resizing = null;
  window.addEventListener("resize", function () { clearTimeout(resizing); resizing = setTimeout(draw, 150); });
  // Paper is narrower than the screen: size the charts for it, then back.
  window.addEventListener("beforeprint", function () {
    if (window.Plotly) drawn().forEach(function (d) { Plotly.relayout(d, { width: 680 }); });
  });
  window.addEventListener("afterprint", function () {
    if (window.Plotly) drawn().forEach(function (d) { Plotly.relayout(d, { width: null }); Plotly.Plots.resize(d); });
  });
})();
