// Page feed: the page's fragments re-fetch themselves on "X changed" notices from
// /api/pages/feed (server-sent events, htmx-ext-sse; hx-trigger="sse:campaign" and the like), so the
// HTML always comes from the server's templates. This file adds two things:
//  - the last notice's id goes into the feed URL (since=...), so a reconnect (the extension opens a
//    new EventSource) is sent only the topics it missed;
//  - a fragment the person is editing in (focus in a field, a field they changed, an open <details>
//    with a form) is not swapped under their hands: the refresh waits until they leave it and nothing
//    typed is pending ("feed-stale"); submitting the form swaps it anyway;
//  - a notice that arrives while a fragment re-fetches itself, or before its replacement is live, is
//    not lost: the fragment re-fetches once more.
(function () {
  "use strict";
  if (!window.htmx) return;

  function feedOf(el) {
    return el && el.closest ? el.closest("[sse-connect]") : null;
  }

  const lastNotice = new Map(); // topic kind -> performance.now() of its last notice (see below)

  // Every notice is seen on the EventSource itself, not through a fragment's listener: a fragment
  // being swapped has none (the old element left the page, the new one is not processed yet), and htmx
  // then fires nothing the page could see.
  function watch(feed, source) {
    if (source.pageFeedWatched) return;
    source.pageFeedWatched = true;
    const url = new URL(feed.getAttribute("sse-connect"), location.href);
    const kinds = new Set(url.searchParams.getAll("topic").map(function (t) { return t.split(":")[0]; }));
    kinds.forEach(function (kind) {
      source.addEventListener(kind, function (evt) {
        lastNotice.set(kind, performance.now());
        if (!evt.lastEventId) return;
        const next = new URL(feed.getAttribute("sse-connect"), location.href);
        next.searchParams.set("since", evt.lastEventId);
        feed.setAttribute("sse-connect", next.pathname + next.search);
      });
    });
  }

  document.body.addEventListener("htmx:sseOpen", function (evt) {
    const feed = feedOf(evt.target);
    if (!feed) return;
    feed.dataset.feed = "open";
    if (evt.detail && evt.detail.source) watch(feed, evt.detail.source);
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

  // A notice must never be lost between a fragment's request and its replacement being live. Two
  // windows lose one with htmx alone: a notice that arrives while the fragment is re-fetching (htmx
  // queues the request on the element, but the answer in flight replaces it, hx-swap="outerHTML", and
  // htmx drops the requests of an element no longer in the page), and one that arrives after the swap
  // but before the new element is processed at settle (it has no sse listener yet). So: the time of
  // each topic's last notice is kept (from the EventSource, above), and a fragment that settles
  // re-fetches once more when a notice of a topic it follows came after its request started (a trial
  // that ended while the campaign page was reloading for its start; a runner killed while the Runners
  // table was swapping in its last heartbeat).
  const requested = new Map(); // fragment id -> performance.now() when its last request started
  document.body.addEventListener("htmx:beforeRequest", function (evt) {
    const el = evt.detail.elt;
    if (el && el.id) requested.set(el.id, performance.now());
  });
  document.body.addEventListener("htmx:afterSettle", function (evt) {
    const el = evt.target;
    if (!el || !el.id || !requested.has(el.id) || !el.isConnected) return;
    const started = requested.get(el.id);
    requested.delete(el.id);
    const topics = (el.getAttribute("hx-trigger") || "").match(/sse:[\w-]+/g) || [];
    if (topics.some(function (t) { return (lastNotice.get(t.slice(4)) || -1) > started; })) {
      htmx.trigger(el, "feed-stale");
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
