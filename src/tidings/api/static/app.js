// tidings dashboard: live sections and form niceties. No framework, no build step.
//
// A page marks a container with data-live-src (a /ui/live/... URL answering the
// same sections without the page frame), and data-live-body when the sections answer
// a form (a search is posted, so what was typed stays out of URLs): the body is
// posted again. Every few seconds the sections are fetched
// and each [data-live] element is swapped for its fresh twin with the same id. A
// section is left alone while someone types in it or submits one of its forms, and
// nothing is fetched while the tab is hidden.
(function () {
  "use strict";

  var root = document.querySelector("[data-live-src]");
  var badge = document.getElementById("live");
  var every = Number(document.body.getAttribute("data-refresh-ms")) || 4000;
  var timer = null;
  var inflight = false;
  var failures = 0;

  function show(state, text, title) {
    if (!badge) return;
    badge.hidden = false;
    badge.setAttribute("data-state", state);
    badge.querySelector(".live-text").textContent = text;
    badge.title = title || "";
  }

  function busy(section) {
    var active = document.activeElement;
    var typing = active && section.contains(active) && active.matches("input[type=text], input[type=search], textarea, select");
    return typing || section.querySelector("form[data-submitting]") !== null;
  }

  function schedule(delay) {
    if (timer === null && !document.hidden) timer = setTimeout(refresh, delay);
  }

  function refresh() {
    timer = null;
    if (document.hidden || inflight) return;
    inflight = true;
    var body = root.getAttribute("data-live-body");
    var request = {
      headers: { "X-Tidings-Fragment": "1", "Accept": "text/html" },
      credentials: "same-origin", cache: "no-store"
    };
    if (body !== null) {
      request.method = "POST";
      request.headers["Content-Type"] = "application/x-www-form-urlencoded";
      request.body = body;
    }
    fetch(root.getAttribute("data-live-src"), request).then(function (response) {
      if (response.status === 401) {
        location.assign("/ui/login?next=" + encodeURIComponent(location.pathname + location.search));
        return null;
      }
      if (!response.ok) throw new Error("HTTP " + response.status);
      return response.text();
    }).then(function (html) {
      inflight = false;
      if (html === null) return;
      var fresh = new DOMParser().parseFromString(html, "text/html");
      fresh.querySelectorAll("[data-live]").forEach(function (section) {
        var old = document.getElementById(section.id);
        if (old && !busy(old)) old.replaceWith(document.importNode(section, true));
      });
      failures = 0;
      show("ok", "Live", "Updated " + new Date().toLocaleTimeString());
      schedule(every);
    }).catch(function (error) {
      inflight = false;
      failures += 1;
      show("stale", "Reconnecting…", "Last attempt failed: " + error.message);
      schedule(Math.min(every * Math.pow(2, failures), 60000));
    });
  }

  if (root) {
    show("ok", "Live", "Refreshes every " + Math.round(every / 1000) + " s");
    schedule(every);
    document.addEventListener("visibilitychange", function () {
      if (document.hidden) {
        show("paused", "Paused", "Not refreshing while this tab is hidden");
      } else {
        clearTimeout(timer);
        refresh();
      }
    });
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
      return;
    }
    form.setAttribute("data-submitting", "");
    // After the submit has been taken: disabling first would drop the button's value.
    setTimeout(function () {
      form.querySelectorAll("button").forEach(function (button) {
        button.disabled = true;
        button.setAttribute("aria-busy", "true");
      });
    }, 0);
  });
})();
