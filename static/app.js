// Campaign Board: htmx settings shared by every page.
(function () {
  if (!window.htmx) return;
  // Errors come back as a flash fragment retargeted to #flash (app/errors.py): let 4xx swap.
  htmx.config.responseHandling = [
    { code: "204", swap: false },
    { code: "[23]..", swap: true },
    { code: "4..", swap: true, error: false },
    { code: "...", swap: false, error: true },
  ];
  // A flash answers the person's last write: their next write clears it as it starts. A background
  // fragment (hx-trigger="load", "campaign-changed from:body") that succeeds later must not wipe it.
  document.addEventListener("htmx:beforeRequest", function (evt) {
    const flash = document.getElementById("flash");
    if (flash && evt.detail.requestConfig && evt.detail.requestConfig.verb !== "get") flash.replaceChildren();
  });
  document.addEventListener("htmx:afterRequest", function (evt) {
    const flash = document.getElementById("flash");
    if (!flash) return;
    const xhr = evt.detail.xhr;
    if (xhr && xhr.status >= 500) {
      const div = document.createElement("div");
      div.className = "flash flash-error";
      div.setAttribute("role", "alert");
      div.textContent = "The server failed (" + xhr.status + "). Nothing was changed; try again.";
      flash.replaceChildren(div);
    }
  });
  // Behaviour that used to be inline (CSP: script-src 'self', no inline handlers, no eval).
  document.addEventListener("htmx:afterRequest", function (evt) {
    const form = evt.detail.elt;
    if (evt.detail.successful && form && form.matches && form.matches("form[data-reset-on-success]")) form.reset();
  });
  document.addEventListener("click", function (evt) {
    const input = evt.target;
    if (input && input.matches && input.matches("input[data-select-on-click]")) input.select();
  });
  document.addEventListener("htmx:sendError", function () {
    const flash = document.getElementById("flash");
    if (!flash) return;
    const div = document.createElement("div");
    div.className = "flash flash-error";
    div.textContent = "Cannot reach the server.";
    flash.replaceChildren(div);
  });
})();
