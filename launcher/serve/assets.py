"""The web view's two static files, served from memory: its stylesheet and the small script
that refreshes a page in place (no front-end build step, nothing fetched from elsewhere).

The script asks for the page it is on again every few seconds (the interval is the
``data-refresh`` attribute of ``<body>``, in seconds) and swaps in the new ``<main>``: the
server rendered and escaped it, and HTML parsed by ``DOMParser`` runs no script. A failed
refresh says so in the header and is tried again. Without JavaScript, a ``<noscript>``
meta refresh reloads the whole page.
"""

REFRESH_JS = r"""(function () {
  "use strict";
  var body = document.body;
  var seconds = parseFloat(body.getAttribute("data-refresh")) || 5;
  var status = document.getElementById("refresh-status");
  function say(text, bad) {
    if (!status) { return; }
    status.textContent = text;
    status.className = bad ? "stale" : "";
  }
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
        if (fresh && old) { old.replaceWith(document.importNode(fresh, true)); }
        if (doc.title) { document.title = doc.title; }
        say("updated " + new Date().toLocaleTimeString(), false);
      })
      .catch(function (e) { say("refresh failed (" + e.message + "): retrying", true); })
      .then(function () { window.setTimeout(tick, seconds * 1000); });
  }
  window.setTimeout(tick, seconds * 1000);
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
"""


def style_css() -> str:
    """The stylesheet, with a swatch class per report category in the timeline's colours."""
    from launcher.report.plot import COLORS  # matplotlib is imported inside plot() only

    return STYLE_CSS + "".join(f".cat-{c} {{ background: {colour}; }}\n" for c, colour in COLORS.items())
