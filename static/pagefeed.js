// Page feed: the page's fragments re-fetch themselves on "X changed" notices from the page feed's
// websocket (app/api/pagefeed.py), so the HTML always comes from the server's templates. The feed element
// (<div data-feed-url=...>, written by the server: app/services/events.feed_attributes) says where to
// connect, which close code means "your session ended" and how long to wait before reconnecting; each
// notice names the DOM event it fires (app/services/events.PAGE_EVENTS, as the fragments' hx-trigger say). A websocket, not an
// EventSource: an event stream holds one of the browser's six HTTP/1.1 connections per origin for as
// long as the page is open, so the seventh tab never loaded.
//  - the last notice's id goes into the feed URL (since=...), so a reconnect is sent only the topics it
//    missed;
//  - a fragment the person is editing in (focus in a field, a field they changed, an open <details>
//    with a form) is not swapped under their hands: the refresh waits until they leave it and nothing
//    typed is pending (the "stale" event of <body data-page-events>); submitting the form swaps it anyway;
//  - a notice that arrives while a fragment re-fetches itself, or before its replacement is live, is
//    not lost: the fragment re-fetches once more.
//  - every feed element of the page gets its own socket: the page's (its content) and the navigation's
//    inbox (a person's unread count, base.html), each delivering to the fragments inside it.
(function () {
  "use strict";
  if (!window.htmx || window.__pageFeedLoaded) return;
  window.__pageFeedLoaded = true; // base.html and a page's head may both load this script
  const feeds = document.querySelectorAll("[data-feed-url]");
  if (!feeds.length) return;

  // The events' names are the server's (app/services/events.PAGE_EVENTS), by key.
  const STALE = JSON.parse(document.body.dataset.pageEvents).stale;
  const lastNotice = new Map(); // DOM event name -> performance.now() of its last notice (see below)

  feeds.forEach(function (feed) { follow(feed); });

  function follow(feed) {
  const endedCode = Number(feed.dataset.feedEndedCode);
  const retryMs = Number(feed.dataset.feedRetryMs) || 1000;
  let failures = 0;

  function socketUrl() {
    const url = new URL(feed.dataset.feedUrl, location.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    return url.href;
  }

  // A notice fires its event on every fragment of the page that may follow it, each on its own (no
  // bubbling: a fragment inside another fires once); htmx re-fetches those whose hx-trigger lists it.
  function deliver(notice) {
    lastNotice.set(notice.event, performance.now());
    if (notice.id) {
      const next = new URL(feed.dataset.feedUrl, location.href);
      next.searchParams.set("since", notice.id);
      feed.dataset.feedUrl = next.pathname + next.search;
      feed.dataset.feedSeen = notice.id;
    }
    feed.querySelectorAll("[hx-trigger]").forEach(function (el) {
      el.dispatchEvent(new CustomEvent(notice.event, { bubbles: false, detail: { pageFeed: notice } }));
    });
  }

  function connect() {
    const socket = new WebSocket(socketUrl());
    let opened = false;
    socket.onopen = function () {
      opened = true;
      failures = 0;
      feed.dataset.feed = "open";
    };
    socket.onmessage = function (evt) {
      deliver(JSON.parse(evt.data));
    };
    socket.onclose = function (evt) {
      if (evt.code === endedCode) {
        feed.dataset.feed = "ended";
        const flash = document.getElementById("flash");
        if (flash) flash.textContent = evt.reason;
        return;
      }
      feed.dataset.feed = "reconnecting";
      failures = opened ? 0 : Math.min(failures + 1, 4);
      setTimeout(connect, retryMs * Math.pow(2, failures));
    };
  }
  // After htmx processed the page (its DOMContentLoaded handler came first): a notice sent at once on
  // open (something changed since the page was drawn) finds every fragment listening.
  if (document.readyState === "complete") connect();
  else document.addEventListener("DOMContentLoaded", connect);
  }

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
    if (!trigger || !trigger.detail || !trigger.detail.pageFeed) return;
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
  // but before the new element is processed at settle (htmx has no listener on it yet). So: the time of
  // each notice event's last arrival is kept (above), and a fragment that settles re-fetches once more
  // when a notice of an event it follows came after its request started (a trial that ended while the
  // campaign page was reloading for its start; a runner killed while the Runners table was swapping in
  // its last heartbeat).
  function triggers(el) {
    return (el.getAttribute("hx-trigger") || "").split(",").map(function (spec) {
      return spec.trim().split(/[\s[]/)[0];
    });
  }
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
    if (triggers(el).some(function (name) { return (lastNotice.get(name) || -1) > started; })) {
      htmx.trigger(el, STALE);
    }
  });

  function refreshStale() {
    document.querySelectorAll("[data-feed-stale]").forEach(function (el) {
      if (editing(el)) return;
      delete el.dataset.feedStale;
      htmx.trigger(el, STALE);
    });
  }
  // Focus moves on (after the browser settled where it went), a field is emptied, or a <details> closes.
  document.addEventListener("focusout", function () { setTimeout(refreshStale, 0); });
  document.addEventListener("change", function () { setTimeout(refreshStale, 0); });
  document.addEventListener("toggle", refreshStale, true);
})();
