from launcher.report.plot import COLORS
"""The web view's two static files, served from memory: its stylesheet and the small script
that refreshes a page in place (no front-end build step, nothing fetched from elsewhere).

The script asks for the page it is on again every few seconds (the interval is the
``data-refresh`` attribute of ``<body>``, in seconds) and swaps in the new ``<main>``: the
server rendered and escaped it, and HTML parsed by ``DOMParser`` runs no script. A failed
refresh says so in the header and is tried again. Without JavaScript, a ``<noscript>``
meta refresh reloads the whole page. It also: shows every ``<time data-ts>`` in the viewer's
zone and names the zone in the header; opens a sweep's row to its elements (kept open across
refreshes in ``sessionStorage``); sends the filter form when a choice changes; copies a
command line; and follows a running job's log (``/api/log/JOB?offset=N`` every
``data-poll`` seconds, appending what is new; the log box is kept across refreshes). Text
from the server only ever reaches the page as ``textContent`` or as the parsed, escaped page.
"""

REFRESH_JS = r"""(function () {
  "use strict";
  var body = document.body;
  var seconds = parseFloat(body.getAttribute("data-refresh")) || 0;
  var status = document.getElementById("refresh-status");
  var OPEN_KEY = "launcher-open-sweeps";
  var MAX_LOG = 262144;  // characters of log kept on the page (older ones are dropped)
  function say(text, bad) {
    if (!status) { return; }
    status.textContent = text;
    status.className = bad ? "stale" : "";
  }
  // ---- times: UTC in the page, shown in the viewer's zone (named in the header)
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  var zoneFormat = null;  // one formatter for every time of the page (making one costs more than using it)
  try { zoneFormat = new Intl.DateTimeFormat(undefined, {timeZoneName: "short"}); } catch (e) { zoneFormat = null; }
  function zoneName(d) {
    try {
      var parts = zoneFormat.formatToParts(d);
      for (var i = 0; i < parts.length; i++) { if (parts[i].type === "timeZoneName") { return parts[i].value; } }
    } catch (e) { /* an old browser: the offset below */ }
    var off = -d.getTimezoneOffset();
    return "UTC" + (off < 0 ? "-" : "+") + pad(Math.floor(Math.abs(off) / 60)) + ":" + pad(Math.abs(off) % 60);
  }
  function local(d) {
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + pad(d.getHours()) + ":" +
      pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + " " + zoneName(d);
  }
  function times(root) {
    var els = root.querySelectorAll("time[data-ts]");
    for (var i = 0; i < els.length; i++) {
      var d = new Date(parseFloat(els[i].getAttribute("data-ts")) * 1000);
      if (!isNaN(d.getTime())) { els[i].textContent = local(d); els[i].title = els[i].getAttribute("datetime"); }
    }
    var zone = document.getElementById("zone");
    if (zone) {
      var tz = "";
      try { tz = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { tz = ""; }
      zone.textContent = "times in " + (tz ? tz + " (" + zoneName(new Date()) + ")" : zoneName(new Date()));
      zone.setAttribute("data-zone", tz);
    }
  }
  // ---- sweeps: one row each, opened to their elements (kept open across refreshes)
  function opened() {
    try { return JSON.parse(window.sessionStorage.getItem(OPEN_KEY) || "{}"); } catch (e) { return {}; }
  }
  function show(sweep, open) {
    var rows = document.querySelectorAll("tr.element");
    for (var i = 0; i < rows.length; i++) {
      if (rows[i].getAttribute("data-parent") === sweep) { rows[i].hidden = !open; }
    }
    var buttons = document.querySelectorAll("button.toggle");
    for (var j = 0; j < buttons.length; j++) {
      if (buttons[j].getAttribute("data-sweep") === sweep) {
        buttons[j].setAttribute("aria-expanded", open ? "true" : "false");
        buttons[j].textContent = open ? "\u25BE" : "\u25B8";
      }
    }
  }
  function reopen() {
    var o = opened();
    for (var k in o) { if (Object.prototype.hasOwnProperty.call(o, k) && o[k]) { show(k, true); } }
  }
  document.addEventListener("click", function (ev) {
    var t = ev.target;
    if (!(t instanceof Element)) { return; }
    var toggle = t.closest("button.toggle");
    if (toggle) {
      var sweep = toggle.getAttribute("data-sweep");
      var o = opened();
      o[sweep] = toggle.getAttribute("aria-expanded") !== "true";
      try { window.sessionStorage.setItem(OPEN_KEY, JSON.stringify(o)); } catch (e) { /* private mode */ }
      show(sweep, o[sweep]);
      return;
    }
    var copy = t.closest("button.copy");
    if (copy) { copyText(copy, copy.getAttribute("data-copy")); }
  });
  // ---- copy a command line
  function copyText(button, text) {
    function done(ok) {
      button.textContent = ok ? "copied" : "press Ctrl+C";
      window.setTimeout(function () { button.textContent = "copy"; }, 1500);
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { done(true); }, function () { done(fallback()); });
    } else { done(fallback()); }
    function fallback() {
      var code = button.parentNode.querySelector("code");
      if (!code) { return false; }
      var range = document.createRange();
      range.selectNodeContents(code);
      var sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      try { return document.execCommand("copy"); } catch (e) { return false; }
    }
  }
  // ---- filters: a change sends the form (it works without this, with its button)
  document.addEventListener("change", function (ev) {
    var t = ev.target;
    if (t instanceof HTMLSelectElement && t.form && t.form.id === "filters") { t.form.submit(); }
  });
  // ---- a job's log: followed from byte data-next while the job runs
  var logTimer = null;
  function followLog() {
    var box = document.getElementById("log");
    if (logTimer !== null || !box || box.getAttribute("data-follow") !== "1") { return; }
    var every = (parseFloat(box.getAttribute("data-poll")) || 1) * 1000;
    function poll() {
      logTimer = null;
      var cur = document.getElementById("log");
      if (!cur) { return; }
      var next = cur.getAttribute("data-next") || "0";
      fetch("/api/log/" + encodeURIComponent(cur.getAttribute("data-job")) + "?offset=" + encodeURIComponent(next),
            {credentials: "same-origin", cache: "no-store"})
        .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
        .then(function (d) {
          var pre = document.getElementById("log-text");
          if (!pre) { return; }
          if (d.size < parseInt(next, 10)) {  // the file was replaced (a new attempt): its tail again
            cur.setAttribute("data-next", String(-65536));
            pre.textContent = "";
          } else if (d.text) {
            var stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
            var text = pre.textContent + d.text;
            pre.textContent = text.length > MAX_LOG ? text.slice(text.length - MAX_LOG) : text;
            cur.setAttribute("data-next", String(d.next));
            if (stick) { pre.scrollTop = pre.scrollHeight; }
          }
          if (!d.open) { cur.setAttribute("data-follow", ""); }
        })
        .catch(function (e) { say("log read failed (" + e.message + "): retrying", true); })
        .then(function () {
          var again = document.getElementById("log");
          if (again && again.getAttribute("data-follow") === "1") { logTimer = window.setTimeout(poll, every); }
        });
    }
    logTimer = window.setTimeout(poll, every);
  }
  // ---- the page: asked for again every data-refresh seconds, its <main> swapped in place
  function tick() {
    fetch(window.location.href, {credentials: "same-origin", cache: "no-store",
                                 headers: {"X-Launcher-Refresh": "1"}})
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.text();
      })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.querySelector("main");
        var old = document.querySelector("main");
        if (fresh && old) {
          var oldLog = old.querySelector("#log");
          var newLog = fresh.querySelector("#log");
          var oldPre = old.querySelector("#log-text");
          var scrolled = oldPre ? (oldPre.scrollTop + oldPre.clientHeight >= oldPre.scrollHeight - 4 ? -1
                                   : oldPre.scrollTop) : null;  // -1: kept at the end
          if (oldLog && newLog) {  // the followed log stays (its text and scroll); the job's state comes along
            oldLog.setAttribute("data-follow", oldLog.getAttribute("data-follow") === "1" &&
                                newLog.getAttribute("data-follow") === "1" ? "1" : "");
            newLog.replaceWith(oldLog);
          }
          var form = old.querySelector("#filters");
          var typing = form && form.contains(document.activeElement);
          var newForm = fresh.querySelector("#filters");
          if (typing && newForm) { newForm.replaceWith(form); }  // never under the viewer's fingers
          old.replaceWith(document.adoptNode(fresh));
          var pre = document.getElementById("log-text");  // a moved node forgets its scroll: given back
          if (pre && scrolled !== null) { pre.scrollTop = scrolled < 0 ? pre.scrollHeight : scrolled; }
        }
        if (doc.title) { document.title = doc.title; }
        times(document);
        reopen();
        followLog();
        say("updated " + new Date().toLocaleTimeString(), false);
      })
      .catch(function (e) { say("refresh failed (" + e.message + "): retrying", true); })
      .then(function () { window.setTimeout(tick, seconds * 1000); });
  }
  times(document);
  reopen();
  followLog();
  var pre = document.getElementById("log-text");
  if (pre) { pre.scrollTop = pre.scrollHeight; }
  if (seconds > 0) { window.setTimeout(tick, seconds * 1000); }
})();
"""

STYLE_CSS = """
body { font-family: system-ui, sans-serif; margin: 0; color: #222; background: #fafafa; }
header { background: #263238; color: #eceff1; padding: 8px 16px; display: flex; gap: 24px; align-items: baseline; }
header a { color: #eceff1; }
header .title { font-weight: 600; }
#refresh-status { font-size: 85%; color: #b0bec5; margin-left: auto; }
#refresh-status.stale { color: #ffab91; }
main { padding: 12px 16px; }
table { border-collapse: collapse; background: #fff; font-size: 90%; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #eceff1; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.best td { background: #e8f5e9; font-weight: 600; }
.state { font-weight: 600; }
.state-RUNNING, .state-PENDING, .state-SUBMITTING, .state-QUEUED { color: #1565c0; }
.state-COMPLETED { color: #2e7d32; }
.state-FAILED, .state-GAVE_UP, .state-LOST, .state-UNKNOWN { color: #c62828; }
.state-PREEMPTED, .state-CANCELLED, .state-STOPPED, .state-TIMEOUT { color: #ef6c00; }
.reason { color: #555; max-width: 40em; overflow-wrap: anywhere; }
.muted { color: #777; }
.swatch { display: inline-block; width: 12px; height: 12px; vertical-align: middle; margin-right: 4px; }
pre { background: #fff; border: 1px solid #ddd; padding: 8px; overflow-x: auto; }
svg.timeline { background: #fff; border: 1px solid #ddd; font-size: 12px; max-width: 100%; height: auto; }
nav.pages a, nav.pages span { margin-right: 8px; }
.best-box { background: #e8f5e9; border: 1px solid #a5d6a7; padding: 8px 12px; margin: 8px 0; display: inline-block; }
.error { color: #c62828; }
header .store code { color: #eceff1; background: none; }
#zone { font-size: 85%; color: #b0bec5; }
td.id, td.id a, td.name, time { white-space: nowrap; }
#state-counts { display: flex; flex-wrap: wrap; gap: 6px; margin: 4px 0 8px; }
#state-counts a.count { border: 1px solid #cfd8dc; background: #fff; border-radius: 12px; padding: 2px 10px;
  text-decoration: none; color: #222; }
#state-counts a.count.on { border-color: #263238; background: #eceff1; }
#filters { display: flex; flex-wrap: wrap; gap: 12px; align-items: baseline; margin: 4px 0 8px; }
tr.sweep-row td { background: #f3f6f8; }
tr.element td:first-child { padding-left: 24px; }
button.toggle { border: 0; background: none; cursor: pointer; font-size: 100%; padding: 0 4px; }
.sweep-states { white-space: nowrap; }
#commands .cmd { display: flex; gap: 8px; align-items: baseline; margin: 2px 0; }
#commands .cmd-what { min-width: 9em; color: #555; }
#commands code.cmd-line { background: #fff; border: 1px solid #ddd; padding: 2px 6px; }
button.copy { font-size: 80%; }
#log pre { max-height: 24em; overflow-y: auto; white-space: pre-wrap; overflow-wrap: anywhere; }
"""


def style_css() -> str:
    """The stylesheet, with a swatch class per report category in the timeline's colours."""
    return STYLE_CSS + "".join(f".cat-{c} {{ background: {colour}; }}\n" for c, colour in COLORS.items())
