// Page feed: the page's fragments re-fetch themselves on "X changed" notices from
// /api/pages/feed (server-sent events, htmx-ext-sse; hx-trigger="sse:campaign" and the like), so the
// HTML always comes from the server's templates. This file adds two things:
//  - the last notice's id goes into the feed URL (since=...), so a reconnect (the extension opens a
//    new EventSource) is sent only the topics it missed;
//  - a fragment the person is editing in (focus in a field, a field they changed, an open <details>
//    with a form) is not swapped under their hands: the refresh waits until they leave it and nothing
//    typed is pending ("feed-stale"); submitting the form swaps it anyway.
(function () {
  "use strict";
  if (!window.htmx) return;

  function feedOf(el) {
    return el && el.closest ? el.closest("[sse-connect]") : null;
  }

  document.body.addEventListener("htmx:sseMessage", function (evt) {
    const id = evt.detail && evt.detail.lastEventId;
    const feed = feedOf(evt.target);
    if (!id || !feed) return;
    const url = new URL(feed.getAttribute("sse-connect"), location.href);
    url.searchParams.set("since", id);
    feed.setAttribute("sse-connect", url.pathname + url.search);
  });

  document.body.addEventListener("htmx:sseOpen", function (evt) {
    const feed = feedOf(evt.target);
    if (feed) feed.dataset.feed = "open";
  });
  document.body.addEventListener("htmx:sseError", function (evt) {
    const feed = feedOf(evt.target);
    if (feed) feed.dataset.feed = "reconnecting";
  });

  const FIELDS = "input:not([type=hidden]):not([type=submit]):not([type=button]), select, textarea";

  function changed(field) {
    if (field.type === "checkbox" || field.type === "radio") return field.checked !== field.defaultChecked;
    if (field.tagName === "SELECT") {
      // With no option marked selected, a single select starts on its first option.
      const options = Array.from(field.options);
      const marked = options.some(function (o) { return o.defaultSelected; });
      return options.some(function (o, i) {
        return o.selected !== (marked ? o.defaultSelected : (!field.multiple && i === 0));
      });
    }
    return field.value !== field.defaultValue;
  }

  function editing(el) {
    const active = document.activeElement;
    if (active && el.contains(active) && active.matches(FIELDS)) return true;
    if (el.querySelector("details[open] form")) return true;
    return Array.from(el.querySelectorAll("form " + FIELDS.split(", ").join(", form "))).some(changed);
  }

  document.body.addEventListener("htmx:confirm", function (evt) {
    const trigger = evt.detail.triggeringEvent;
    if (!trigger || typeof trigger.type !== "string" || !trigger.type.startsWith("sse:")) return;
    const el = evt.detail.elt;
    if (editing(el)) {
      evt.preventDefault();
      el.dataset.feedStale = "1";
    }
  });

  function refreshStale() {
    document.querySelectorAll("[data-feed-stale]").forEach(function (el) {
      if (editing(el)) return;
      delete el.dataset.feedStale;
      htmx.trigger(el, "feed-stale");
    });
  }
  // Focus moves on (after the browser settled where it went), a field is emptied, or a <details> closes.
  document.addEventListener("focusout", function () { setTimeout(refreshStale, 0); });
  document.addEventListener("change", function () { setTimeout(refreshStale, 0); });
  document.addEventListener("toggle", refreshStale, true);
})();
