// Page feed: the page's fragments re-fetch themselves on "X changed" notices from
// /api/pages/feed (server-sent events, htmx-ext-sse; hx-trigger="sse:campaign" and the like), so the
// HTML always comes from the server's templates. This file adds two things:
//  - the last notice's id goes into the feed URL (since=...), so a reconnect (the extension opens a
//    new EventSource) is sent only the topics it missed;
//  - a fragment the person is editing in (focus in a field, a field they changed, an open <details>
//    with a form) is not swapped under their hands: the refresh waits until they leave it and nothing
//    typed is pending ("feed-stale"); submitting the form swaps it anyway;
//  - a notice that arrives while a fragment that replaces itself is re-fetching is not lost.
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

  // A notice that arrives while a fragment is re-fetching itself: htmx queues the new request on that
  // element, but the answer in flight replaces the element (hx-swap="outerHTML") and htmx drops the
  // requests of an element no longer in the page, so the newer change would never show (a trial that
  // ended while the inventory was reloading for its start). The fragment's id is remembered, and the
  // element that replaced it re-fetches once more.
  const refetch = new Map(); // fragment id -> the element whose request was in flight
  document.body.addEventListener("htmx:beforeRequest", function (evt) { evt.detail.elt.feedBusy = true; });
  document.body.addEventListener("htmx:afterRequest", function (evt) { evt.detail.elt.feedBusy = false; });
  document.body.addEventListener("htmx:confirm", function (evt) {
    const trigger = evt.detail.triggeringEvent;
    const el = evt.detail.elt;
    if (trigger && typeof trigger.type === "string" && trigger.type.startsWith("sse:") && el.feedBusy && el.id) {
      refetch.set(el.id, el);
    }
  });
  document.body.addEventListener("htmx:afterSettle", function () {
    refetch.forEach(function (busy, id) {
      const now = document.getElementById(id);
      if (busy.isConnected && !busy.feedBusy) {
        refetch.delete(id); // still in the page: htmx runs its queued request itself
      } else if (now && now !== busy) {
        refetch.delete(id);
        htmx.trigger(now, "feed-stale");
      }
    });
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
