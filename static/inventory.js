// The campaign page's inventory: search and status filters (client-side, kept in the URL as ?q=&status=),
// and keyboard reorder: after a move the focus returns to the moved row's button, even though htmx
// replaced the whole #inventory section.
(function () {
  const search = document.getElementById("inventory-search");
  const status = document.getElementById("inventory-status");
  const shown = document.getElementById("inventory-shown");
  if (!search || !status) return;

  const params = new URLSearchParams(location.search);
  search.value = params.get("q") || "";
  if ([...status.options].some((o) => o.value === params.get("status"))) status.value = params.get("status");

  function applyFilter() {
    const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    const rows = document.querySelectorAll("#inventory tr[data-key]");
    let visible = 0;
    rows.forEach(function (row) {
      const text = row.dataset.search || "";
      const ok = (!status.value || (row.dataset.states || "").split(" ").includes(status.value)) && words.every((w) => text.includes(w));
      row.hidden = !ok;
      if (ok) visible++;
    });
    const filtering = words.length || status.value;
    shown.textContent = filtering ? visible + " of " + rows.length + " approaches shown" : "";
    const url = new URL(location.href);
    url.searchParams.delete("q");
    url.searchParams.delete("status");
    if (search.value.trim()) url.searchParams.set("q", search.value.trim());
    if (status.value) url.searchParams.set("status", status.value);
    history.replaceState(history.state, "", url);
  }

  search.addEventListener("input", applyFilter);
  status.addEventListener("change", applyFilter);
  applyFilter();

  // Focus survives the swaps of #inventory (a move, or a refresh after anyone's change): remember the
  // focused control's row and value before the swap, focus the same control after it. A moved row's
  // arrow that became disabled (top or bottom reached) hands the focus to the row's other arrow.
  let focusBack = null;
  document.body.addEventListener("htmx:beforeSwap", function (evt) {
    if (!evt.detail.target || evt.detail.target.id !== "inventory") return;
    const el = document.activeElement;
    const row = el && el.closest ? el.closest("#inventory tr[data-key]") : null;
    if (row && el.name) focusBack = { key: row.dataset.key, name: el.name, value: el.value || "" };
  });
  // afterSwap, not afterSettle: in the same task as the swap, so no key press lands on <body> between.
  document.body.addEventListener("htmx:afterSwap", function (evt) {
    if (!evt.detail.elt || evt.detail.elt.id !== "inventory") return;
    applyFilter();  // a swapped-in inventory keeps the filter
    if (!focusBack) return;
    const row = document.getElementById("approach-" + focusBack.key);
    const want = [focusBack.value];
    if (focusBack.name === "direction") want.push(focusBack.value === "up" ? "down" : "up");
    const name = focusBack.name;
    focusBack = null;
    if (!row) return;
    for (const value of want) {
      const el = row.querySelector('[name="' + CSS.escape(name) + '"][value="' + CSS.escape(value) + '"]');
      if (el && !el.disabled) { el.focus(); break; }
    }
  });
})();
