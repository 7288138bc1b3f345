// Campaign Board: htmx settings shared by every page. No inline script anywhere: behaviour lives here.
(function () {
  if (!window.htmx) return;
  // Errors come back as a flash fragment retargeted to #flash (app/errors.py): let 4xx swap.
  htmx.config.responseHandling = [
    { code: "204", swap: false },
    { code: "[23]..", swap: true },
    { code: "4..", swap: true, error: false },
    { code: "...", swap: false, error: true },
  ];

  function flashError(text) {
    const flash = document.getElementById("flash");
    if (!flash) return;
    const div = document.createElement("div");
    div.className = "flash flash-error";
    div.setAttribute("role", "alert");
    div.textContent = text;
    flash.replaceChildren(div);
  }

  function clearFormErrors(form) {
    form.querySelectorAll(".field-error").forEach(function (el) { el.remove(); });
    form.querySelectorAll("[aria-invalid]").forEach(function (el) {
      el.removeAttribute("aria-invalid");
      el.removeAttribute("aria-describedby");
    });
  }

  // The field an error names ("key", "requirements.gpus", "approaches[2].key"): the form's input
  // with that name, else with its last part; else none (the message goes by the submit button).
  function fieldFor(form, name) {
    if (!name) return null;
    const tries = [name, name.split(".").pop().replace(/\[\d+\]$/, "")];
    for (const n of tries) {
      const el = form.querySelector('[name="' + CSS.escape(n) + '"]');
      if (el && el.type !== "hidden") return el;
    }
    return null;
  }

  let errorSeq = 0;
  // app/errors.py sends HX-Trigger {<the form_error event>: {message, field}} with every htmx error.
  document.body.addEventListener(JSON.parse(document.body.dataset.pageEvents).form_error, function (evt) {
    const form = evt.target.closest ? evt.target.closest("form") : null;
    if (!form) return;  // not a form: the #flash swap shows it
    clearFormErrors(form);
    const field = fieldFor(form, evt.detail.field);
    const p = document.createElement("p");
    p.className = "field-error";
    p.id = "field-error-" + (++errorSeq);
    p.setAttribute("role", "alert");
    p.textContent = evt.detail.message;
    if (field) {
      (field.closest("label") || field).after(p);
      field.setAttribute("aria-invalid", "true");
      field.setAttribute("aria-describedby", p.id);
      field.focus({ preventScroll: true });
    } else {
      const submit = form.querySelector("button[type=submit], button:not([type])");
      if (submit) submit.before(p); else form.prepend(p);
    }
    p.scrollIntoView({ block: "nearest" });
  });

  // A form's error is shown inside the form (above), not in #flash at the top of the page. An element with
  // data-swap-errors (the what-if form) swaps its 4xx answer into its target: it replaces a stale result.
  document.body.addEventListener("htmx:beforeSwap", function (evt) {
    const xhr = evt.detail.xhr;
    const source = evt.detail.requestConfig && evt.detail.requestConfig.elt;  // detail.elt is the target here
    if (xhr && xhr.status >= 400 && xhr.status < 500 && source && source.closest("form")
        && xhr.getResponseHeader("HX-Trigger") && !source.hasAttribute("data-swap-errors")) {
      evt.detail.shouldSwap = false;
    }
  });

  document.body.addEventListener("htmx:beforeRequest", function (evt) {
    const form = evt.detail.elt.closest("form");
    if (form) clearFormErrors(form);
    // A flash answers the person's last write: their next write clears it as it starts. A background
    // fragment (hx-trigger="load", "campaign-changed from:body") that succeeds later must not wipe it.
    const flash = document.getElementById("flash");
    if (flash && evt.detail.requestConfig && evt.detail.requestConfig.verb !== "get") flash.replaceChildren();
  });

  document.body.addEventListener("htmx:afterRequest", function (evt) {
    const xhr = evt.detail.xhr;
    if (xhr && xhr.status >= 500) flashError("The server failed (" + xhr.status + "). Nothing was changed; try again.");
    // <form data-reset-on-success>: cleared only after a 2xx; an error keeps what was typed.
    // <form data-revert-on-error>: a control that acts at once (the role select) goes back to the stored
    // value (its `selected` default) when the server refused the change; the message stays by it.
    const form = evt.detail.elt.closest("form");
    if (form && form.hasAttribute("data-revert-on-error") && xhr && xhr.status >= 400 && document.contains(form)) {
      form.reset();
    }
    if (form && form.hasAttribute("data-reset-on-success") && xhr && xhr.status >= 200 && xhr.status < 300
        && document.contains(form)) {
      form.reset();
    }
  });

  // <input data-select-on-click>: a share link selected whole on click (was an inline handler).
  document.addEventListener("click", function (evt) {
    const input = evt.target;
    if (input && input.matches && input.matches("input[data-select-on-click]")) input.select();
  });

  document.body.addEventListener("htmx:sendError", function () {
    flashError("Cannot reach the server.");
  });
})();
