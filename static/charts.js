// Charts page: draw every [data-figure] div from the JSON <script> it names, and re-plot with
// Plotly.react when an htmx swap (the what-if) brings new JSON. A null figure hides the chart.
(function () {
  const CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  function draw() {
    if (!window.Plotly) return;
    document.querySelectorAll("[data-figure]").forEach(function (div) {
      const source = document.getElementById(div.dataset.figure);
      if (!source || div._drawnFrom === source.textContent) return;
      div._drawnFrom = source.textContent;
      const figure = JSON.parse(source.textContent);
      const empty = div.parentElement.querySelector(".chart-empty");
      if (!figure) {
        Plotly.purge(div);
        div.hidden = true;
        if (empty) empty.hidden = false;
        return;
      }
      div.hidden = false;
      if (empty) empty.hidden = true;
      Plotly.react(div, figure.data, figure.layout, CONFIG);
    });
  }

  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:afterSwap", draw);
})();
