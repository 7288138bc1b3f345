// Charts and status pages: draw every [data-figure] div from the JSON <script type="application/json">
// it names, and re-plot with Plotly.react when an htmx swap (the what-if) brings new JSON. A null figure
// hides its div; a card whose figures are all null shows its .chart-empty note, or hides when it is
// [data-optional]. No inline script anywhere: the pages pass data only.
(function () {
  const CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  function draw() {
    if (!window.Plotly) return;
    document.querySelectorAll("[data-figure]").forEach(function (div) {
      const source = document.getElementById(div.dataset.figure);
      const text = source ? source.textContent : "null";
      if (div._drawnFrom === text) return;
      div._drawnFrom = text;
      const figure = JSON.parse(text);
      if (!figure) {
        Plotly.purge(div);
        div.hidden = true;
        return;
      }
      div.hidden = false;
      Plotly.react(div, figure.data, figure.layout, CONFIG);
    });
    document.querySelectorAll(".card").forEach(function (card) {
      const divs = Array.prototype.slice.call(card.querySelectorAll("[data-figure]"));
      if (!divs.length) return;
      const none = divs.every(function (d) { return d.hidden; });
      const empty = card.querySelector(".chart-empty");
      if (empty) empty.hidden = !none;
      if (card.hasAttribute("data-optional")) card.hidden = none;
    });
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
  // Paper is narrower than the screen: size the charts for it, then back.
  window.addEventListener("beforeprint", function () {
    if (window.Plotly) drawn().forEach(function (d) { Plotly.relayout(d, { width: 680 }); });
  });
  window.addEventListener("afterprint", function () {
    if (window.Plotly) drawn().forEach(function (d) { Plotly.relayout(d, { width: null }); Plotly.Plots.resize(d); });
  });
})();
