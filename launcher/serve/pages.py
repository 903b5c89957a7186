"""The web view's HTML: the jobs (state counts, filters, sweeps folded into one row each), one
job (its commands, log tail, attempts, timeline, goodput breakdown and events as sentences) and
one sweep (its element table and best element). Pure: the dicts of
``launcher.api.readview.ReadView`` in, HTML text out.

Everything that comes from the store or a checkpoint root (job names, reasons, params,
targets, events, notes, log text) is user-controlled: it goes through ``e()`` (``html.escape``
with quotes) for text and attributes, and through ``q()`` (percent-encoding, then escaping)
for a part of a URL. Nothing is ever inserted unescaped.

Times are written in UTC (``<time datetime="...Z" data-ts="EPOCH">``, readable without
JavaScript) and the page's script shows them in the viewer's own zone, naming it. The step of a
job is the one ``launcher status JOB`` shows: its row's last committed step (``JobRow.last_step``,
read by ``JobDetail`` and the jobs listing alike).
"""

from __future__ import annotations

import datetime
import json
import re
from functools import lru_cache
from html import escape
from typing import Optional
from urllib.parse import quote, urlencode

from launcher.core.ages import ago
from launcher.report.text import _dur, _frac, _usd, format_report, CLOCK_LABELS
from launcher.serve.actions import job_commands, sweep_commands
from launcher.serve.sentences import sentence
from launcher.core.status import is_final
from launcher.serve.timeline import timeline_svg, legend_rows
from launcher.state.rows import resume_words

DEFAULT_REFRESH_S = 5.0
LOG_POLL_S = 1.0  # seconds between a running job's log reads (a line shows within 2 s of being written)


_PLAIN = re.compile(r"[A-Za-z0-9._ ,:/+=@-]*\Z").match  # nothing to escape (the fast path of e)
_URL_PLAIN = re.compile(r"[A-Za-z0-9._~-]*\Z").match  # nothing to percent-encode (the fast path of q)


def e(x) -> str:
    """X as HTML text or attribute value: & < > " ' escaped."""
    s = "-" if x is None else str(x)
    return s if _PLAIN(s) else escape(s, quote=True)


def q(x) -> str:
    """X as one segment (or query value) of a URL inside an attribute."""
    s = str(x)
    return s if _URL_PLAIN(s) else escape(quote(s, safe=""), quote=True)


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1f}%"


def _num(x) -> str:
    return "-" if x is None else f"{x:.6g}"


@lru_cache(maxsize=256)
def _state(s) -> str:
    cls = "".join(c for c in str(s) if c.isalnum() or c == "_")
    return f'<span class="state state-{cls}">{e(s)}</span>'


@lru_cache(maxsize=4096)
def _name(s) -> str:  # names repeat: escaped once each
    return e(s)


def _params(p) -> str:
    if not isinstance(p, dict):
        return e(p)
    return e(", ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in p.items()))


def utc_iso(t: Optional[float]) -> Optional[str]:
    """T (epoch seconds) as UTC ISO 8601 ("2024-05-01T12:00:00Z"); None for None."""
    if t is None:
        return None
    return datetime.datetime.fromtimestamp(float(t), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def ts(t: Optional[float]) -> str:
    """A time for the page: UTC as text (readable without JavaScript), converted in the browser
    to the viewer's zone from its ``data-ts``."""
    iso = utc_iso(t)
    if iso is None:
        return "-"
    return f'<time datetime="{iso}" data-ts="{float(t):.3f}">{iso[:10]} {iso[11:19]} UTC</time>'


def resources_text(r: Optional[dict]) -> str:
    """A spec's resources in a few words: "2 nodes x 8 H100", "4 CPUs, 16GB", "-" when none."""
    if not r:
        return "-"
    nodes, gpus, acc = r.get("nodes"), r.get("gpus_per_node"), r.get("accelerator")
    parts = []
    if gpus or acc:
        g = f"{gpus or 1} {acc or 'GPU'}" if acc else f"{gpus} GPU"
        parts.append(f"{nodes} nodes x {g}" if nodes and nodes != 1 else g)
    elif nodes and nodes != 1:
        parts.append(f"{nodes} nodes")
    if r.get("cpus_per_node"):
        parts.append(f"{r['cpus_per_node']} CPUs")
    if r.get("memory_per_node"):
        parts.append(str(r["memory_per_node"]))
    return ", ".join(str(x) for x in parts) or "-"


def layout(title: str, body: str, refresh_s: Optional[float] = DEFAULT_REFRESH_S, home: str = "") -> str:
    """A page: HOME is the store it reads, as the header names it (a PostgreSQL URL without its
    password; a SQLite file's path)."""
    refresh = f"{refresh_s:g}" if refresh_s else ""
    noscript = f'<noscript><meta http-equiv="refresh" content="{refresh}"></noscript>' if refresh else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{e(title)}</title>"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<link rel="stylesheet" href="/static/style.css">' + noscript
            + '<script src="/static/refresh.js" defer></script></head>'
            f'<body data-refresh="{e(refresh)}"><header><span class="title"><a href="/">launcher</a></span>'
            f'<span class="store">store <code id="store">{e(home)}</code></span>'
            '<span id="zone" class="muted">times in UTC</span>'
            '<span id="refresh-status">read-only view</span></header>'
            f"<main>{body}</main></body></html>\n")


def _copyable(label: str, line: str) -> str:
    return (f'<div class="cmd"><span class="cmd-what">{e(label)}</span><code class="cmd-line">{e(line)}</code>'
            f'<button type="button" class="copy" data-copy="{e(line)}">copy</button></div>')


def commands_box(pairs: list) -> str:
    return ('<section id="commands"><h2>Act on it</h2><p class="muted">this view is read-only: run these in a '
            "shell</p>" + "".join(_copyable(what, line) for what, line in pairs) + "</section>")


# ---------------------------------------------------------------- the jobs
JOB_COLUMNS = ("job", "name", "state", "owner", "target", "region", "resources", "attempts", "duration", "cost",
               "MFU", "step", "changed", "created", "reason")


def _link(where: dict, **change) -> str:
    """The jobs page's address with WHERE's filters and CHANGE (None drops a key), escaped."""
    args = {("q" if k == "text" else k): v for k, v in where.items() if v}
    for k, v in change.items():
        if v is None:
            args.pop(k, None)
        else:
            args[k] = v
    return e("/?" + urlencode(args)) if args else "/"


def state_counts(d: dict) -> str:
    """The states of every job with their counts, each a link filtering by it."""
    where = d.get("where") or {}
    counts = (d.get("counts") or {}).get("state") or {}
    cur = where.get("state")
    items = [f'<a class="count{" on" if not cur else ""}" data-state="" href="{_link(where, state=None, page=None)}">'
             f'all <b>{e(d.get("all", d["total"]))}</b></a>']
    for s, n in counts.items():
        on = " on" if s == cur else ""
        items.append(f'<a class="count{on}" data-state="{e(s)}" href="{_link(where, state=s, page=None)}">'
                     f'{_state(s)} <b>{e(n)}</b></a>')
    return f'<nav id="state-counts">{"".join(items)}</nav>'


def _select(name: str, label: str, values, current: Optional[str]) -> str:
    opts = [f'<option value=""{" selected" if not current else ""}>every {e(label)}</option>']
    for v in values:
        opts.append(f'<option value="{e(v)}"{" selected" if v == current else ""}>{e(v)}</option>')
    if current and current not in values:
        opts.append(f'<option value="{e(current)}" selected>{e(current)}</option>')
    return f'<label>{e(label)} <select name="{name}" id="filter-{name}">{"".join(opts)}</select></label>'


def filters(d: dict) -> str:
    """The filter form (a GET of /: it works without JavaScript; the script sends it on a change)."""
    where, counts = d.get("where") or {}, d.get("counts") or {}
    per = d.get("per_page")
    return ('<form id="filters" method="get" action="/">'
            + _select("state", "state", list((counts.get("state") or {})), where.get("state"))
            + _select("owner", "owner", list((counts.get("owner") or {})), where.get("owner"))
            + _select("target", "target", list((counts.get("target") or {})), where.get("target"))
            + f'<label>name <input type="search" name="q" id="filter-q" value="{e(where.get("text") or "")}" '
              'placeholder="part of a name or id"></label>'
            + (f'<input type="hidden" name="per" value="{e(per)}">' if per and per != 500 else "")
            + '<button type="submit">filter</button>'
            + (' <a href="/" id="filter-clear">clear</a>' if where else "") + "</form>")


def _job_cells(j: dict, first: str) -> str:
    cost = _usd(j["cost_usd"]) + ("" if j["cost_complete"] or j["cost_usd"] is None else "+")
    return (f'<td class="id">{first}</td><td class="name">{_name(j["name"])}</td>'
            f'<td>{_state(j["state"])}</td><td>{_name(j.get("owner"))}</td><td>{_name(j["target"])}</td>'
            f'<td>{_name(j.get("region"))}</td><td>{e(resources_text(j.get("resources")))}</td>'
            f'<td class="num">{j["attempts"]}</td><td class="num">{e(_dur(j.get("duration_s")))}</td>'
            f'<td class="num">{e(cost)}</td>{mfu_cell(j.get("mfu"), j.get("mfu_reason"))}'
            f'<td class="num">{e(j["last_step"])}</td>{_changed(j)}'
            f'<td>{ts(j["created"])}</td><td class="reason">{e(j["reason"] or "")}</td>')


def _changed(j: dict) -> str:
    """When the row last changed: this view shows the store as it is, and an open job's row is only
    as fresh as the last launcher that wrote it (its owner's, or the watchers'), so its age is said."""
    if not j.get("open") or j.get("updated") is None or j.get("now") is None:
        return f'<td class="changed">{ts(j.get("updated"))}</td>'
    age = ago(j["now"] - j["updated"])
    return (f'<td class="changed" title="as stored: this row last changed {e(age)} before the page was made">'
            f'{ts(j["updated"])} <small class="muted age">{e(age)} ago</small></td>')


def _sweep_row(sweep: str, els: list) -> str:
    counts: dict = {}
    for j in els:
        counts[j["state"]] = counts.get(j["state"], 0) + 1
    states = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda x: -x[1]))
    targets = ", ".join(sorted({j["target"] for j in els}))
    owners = ", ".join(sorted({str(j.get("owner")) for j in els}))
    priced = [j["cost_usd"] for j in els if j["cost_usd"] is not None]
    cost = _usd(sum(priced)) if priced else "-"
    first = els[0]
    sid = e(sweep)
    return (f'<tr class="sweep-row" data-sweep="{sid}"><td class="id"><button type="button" class="toggle" '
            f'data-sweep="{sid}" aria-expanded="false" title="show its elements">&#9656;</button> '
            f'<a href="/sweep/{q(sweep)}">{sid}</a></td><td>{_name(first["name"])}</td>'
            f'<td class="sweep-states">{e(states)}</td><td>{e(owners)}</td><td>{e(targets)}</td><td>-</td>'
            f'<td>{e(resources_text(first.get("resources")))}</td>'
            f'<td class="num">{sum(j["attempts"] for j in els)}</td>'
            f'<td class="num">{e(_dur(max(j.get("duration_s") or 0.0 for j in els)))}</td>'
            f'<td class="num">{e(cost)}</td>{mfu_cell(None, "a sweep: its page gives its MFU")}<td class="num">-</td>'
            f'<td class="changed">{ts(max(j.get("updated") or 0.0 for j in els) or None)}</td>'
            f'<td>{ts(min(j["created"] for j in els))}</td>'
            f'<td class="muted">sweep: {len(els)} elements on this page</td></tr>')


def jobs_body(d: dict) -> str:
    where = d.get("where") or {}
    shown = f'{d["total"]} of {d.get("all", d["total"])}' if where else str(d["total"])
    out = [f'<h1>Jobs <span class="muted" id="job-count">{e(shown)}</span></h1>']
    if not d.get("exists", True):
        out.append(f'<p class="muted">no state store at {e(d.get("store"))} yet: no job was launched with this '
                   f"LAUNCHER_HOME</p>")
    else:
        out.append(state_counts(d))
        out.append(filters(d))
    for job_id, why in (d.get("unreadable") or {}).items():
        out.append(f'<p class="error">{e(job_id)}: not shown: {e(why)}</p>')
    out.append(_pager(d))
    by_sweep: dict = {}
    for j in d["jobs"]:
        if j.get("sweep"):
            by_sweep.setdefault(j["sweep"], []).append(j)
    rows = ['<table id="jobs"><thead><tr>' + "".join(f"<th>{c}</th>" for c in JOB_COLUMNS) + "</tr></thead><tbody>"]
    for j in d["jobs"]:
        jid, sweep = j["job_id"], j.get("sweep")
        if sweep:
            els = by_sweep.pop(sweep, None)
            if els is None:  # its sweep's row came earlier, with every element of this page under it
                continue
            rows.append(_sweep_row(sweep, els))
            for x in sorted(els, key=lambda x: (x["element"] is None, x["element"] or 0)):
                xid = x["job_id"]
                rows.append(f'<tr class="element" data-job="{e(xid)}" data-parent="{e(sweep)}" hidden>'
                            + _job_cells(x, f'<span class="muted">#{e(x["element"])}</span> '
                                            f'<a href="/job/{q(xid)}">{e(xid)}</a>') + "</tr>")
            continue
        rows.append(f'<tr data-job="{e(jid)}">' + _job_cells(j, f'<a href="/job/{q(jid)}">{e(jid)}</a>') + "</tr>")
    rows.append("</tbody></table>")
    out.append("".join(rows))
    if not d["jobs"] and d.get("exists", True):
        out.append('<p class="muted" id="no-jobs">no jobs' + (" match these filters" if where else "") + "</p>")
    out.append(_pager(d))
    if d.get("sweeps"):
        out.append('<p class="sweeps">Sweeps: ' + ", ".join(
            f'<a class="sweep-link" href="/sweep/{q(s["sweep"])}">{e(s["sweep"])}</a> '
            f'<span class="muted">({e(s["size"])})</span>' for s in d["sweeps"]) + "</p>")
    return "\n".join(out)


def _pager(d: dict) -> str:
    if d["pages"] <= 1:
        return ""
    per, where = d["per_page"], d.get("where") or {}
    links = []
    for p in sorted({1, d["page"] - 1, d["page"], d["page"] + 1, d["pages"]}):
        if 1 <= p <= d["pages"]:
            links.append(f"<span>page {p}</span>" if p == d["page"] else
                         f'<a href="{_link(where, page=p, per=per)}">{p}</a>')
    return f'<nav class="pages">{"".join(links)} <span class="muted">of {d["pages"]} ({per} a page)</span></nav>'


def jobs_page(d: dict, home: str = "", refresh_s: Optional[float] = DEFAULT_REFRESH_S) -> str:
    return layout(f"launcher: {d['total']} jobs", jobs_body(d), refresh_s, home)


# ---------------------------------------------------------------- one job
def log_box(log: Optional[dict]) -> str:
    """The job's log: its tail as the server read it (LOG), followed by the page's script from
    byte ``next`` on while the job is open (``/api/log/JOB``)."""
    if log is None:
        return ""
    jid = log["job_id"]
    where = (f'<p class="muted" id="log-where">{e(log["path"])}'
             + (f' <span id="log-cut">(the last {e(log["size"] - log["offset"])} of {e(log["size"])} bytes)</span>'
                if log["offset"] else "") + "</p>") if log.get("path") else ""
    why = f'<p class="muted" id="log-why">{e(log["why"])}</p>' if log.get("why") else ""
    follow = "1" if log.get("open") and log.get("path") else ""
    return (f'<section id="log" data-job="{e(jid)}" data-next="{e(log["next"])}" data-follow="{follow}" '
            f'data-poll="{LOG_POLL_S:g}"><h2>Log</h2>{where}{why}'
            + (f'<pre id="log-text">{e(log["text"])}</pre>' if log.get("path") else "") + "</section>")


def _summary(d: dict) -> str:
    bits = [f'name <b id="job-name">{e(d["name"])}</b>', f'owner <b id="job-owner">{e(d.get("owner"))}</b>',
            f'on <b id="job-target">{e(d["target"])}</b> [{e(d["backend"])}]']
    if d.get("region"):
        bits.append(f'in <b id="job-region">{e(d["region"])}</b>')
    if d.get("resources"):
        bits.append(f'with <b id="job-resources">{e(resources_text(d["resources"]))}</b>')
    if d.get("created") is not None:
        bits.append(f"created {ts(d['created'])}")
    if d.get("duration_s") is not None:
        bits.append(f'for <b id="job-duration">{e(_dur(d["duration_s"]))}</b>')
    return ("<p>" + ", ".join(bits) + f': <span id="job-state">{_state(d["state"])}</span>'
            + (f' <span class="reason" id="job-reason">({e(d["reason"])})</span>' if d.get("reason") else "")
            + "</p>")


def job_body(d: dict, home_prefix: Optional[str] = None) -> str:
    rep = d.get("report")
    out = [f'<h1>Job <span id="job-id">{e(d["job_id"])}</span></h1>', _summary(d)]
    if d.get("sweep"):
        out.append(f'<p>element {e(d.get("element"))} of sweep <a href="/sweep/{q(d["sweep"])}">{e(d["sweep"])}</a>'
                   "</p>")
    out.append(f'<p>last committed step <b id="last-step">{e(d.get("last_step"))}</b>'
               + (f'; checkpoints {e(d["ckpt_root"])}' if d.get("ckpt_root") else "") + "</p>")
    out.append(commands_box(job_commands(d["job_id"], bool(d.get("open")), home_prefix)))
    out.append(log_box(d.get("log")))
    out.append("<h2>Attempts</h2>")
    out.append('<table id="attempts"><thead><tr><th>#</th><th>target</th><th>native id</th><th>state</th>'
               "<th>resumed</th><th>submitted</th><th>started</th><th>ended</th><th>exit</th><th>cost</th>"
               "<th>reason</th></tr></thead><tbody>")
    # an attempt that ran has a start: where the store has none, the report's (its program's start)
    begun = {x["attempt"]: x.get("started") for x in (rep or {}).get("attempts") or []}
    # the tier it restored from: as the store copied it, else its generation's record (the report's)
    tiers = {x["attempt"]: x.get("resume_tier") for x in (rep or {}).get("attempts") or []}
    for a in d["attempts"]:
        where = resume_words(a.get("resume_step"), a.get("resume_tier") or tiers.get(a["attempt"]))
        out.append(f'<tr><td class="num">{e(a["attempt"])}</td><td>{e(a["target"])}</td>'
                   f'<td class="id">{e(a["native_id"])}</td><td>{_state(a["state"])}</td>'
                   f'<td class="resumed">{e(where)}</td>'
                   f'<td>{ts(a["submitted"])}</td><td>{ts(a["started"] if a["started"] is not None else begun.get(a["attempt"]))}'
                   f'</td><td>{ts(a["ended"])}'
                   f'</td><td class="num">{e(a["exit_code"])}</td><td class="num">{e(_usd(a["cost_usd"]))}</td>'
                   f'<td class="reason">{e(a["reason"] or "")}</td></tr>')
    out.append("</tbody></table>")
    out.append("<h2>Timeline and goodput</h2>")
    if rep is None:
        out.append(f'<p class="error">no report: {e(d.get("report_error"))}</p>')
    else:
        out.append(timeline_svg(rep))
        out.append(_breakdown(rep))
        out.append(f'<details><summary>as <code>launcher report</code> prints it</summary>'
                   f"<pre>{e(format_report(rep))}</pre></details>")
    ev = (d.get("events") or [])[-30:]
    if ev:
        out.append('<h2>Events</h2><table id="events"><thead><tr><th>when</th><th>what happened</th></tr>'
                   "</thead><tbody>")
        for x in ev:
            out.append(f'<tr data-kind="{e(x.get("kind"))}"><td>{ts(x.get("ts"))}</td>'
                       f'<td class="reason">{e(sentence(x))}</td></tr>')
        out.append("</tbody></table>")
    return "\n".join(out)


def _breakdown(rep: dict) -> str:
    rows = ['<table id="goodput"><thead><tr><th>category</th><th>time</th><th>share</th></tr></thead><tbody>']
    for cat, label, _colour, secs, pct in legend_rows(rep):
        rows.append(f'<tr data-category="{e(cat)}"><td><span class="swatch cat-{e(cat)}"></span>'
                    f'{e(label)}</td><td class="num">{e(_dur(secs))}</td><td class="num">{_pct(pct)}</td></tr>')
    rows.append(f'<tr><td>wall time</td><td class="num">{e(_dur(rep.get("wall_s")))}</td><td></td></tr>')
    rows.append("</tbody></table>")
    cost = rep.get("cost") or {}
    rows.append(f'<p>goodput <b id="goodput-pct">{_pct(rep.get("goodput_pct"))}</b>; cost <b id="job-cost">'
                f'{e(_usd(cost.get("total_usd")))}</b>'
                + (f' <span class="muted">({e(cost.get("reason"))})</span>' if cost.get("reason") else "") + "</p>")
    rows.append(_compute(rep.get("compute")))
    rows.append(_clocks(rep))
    for n in rep.get("notes") or []:
        rows.append(f'<p class="muted">note: {e(n)}</p>')
    return "".join(rows)


def mfu_cell(mfu: Optional[float], reason: Optional[str] = None) -> str:
    """A table's MFU cell: the figure as the job's page gives it (``_compute``), "-" where it is not
    known, the reason as its tooltip."""
    tip = f' title="{e(reason)}"' if mfu is None and reason else ""
    return f'<td class="num mfu"{tip}>{_frac(mfu)}</td>'


def _compute(c: Optional[dict]) -> str:
    """MFU against its named peak, and effective MFU (``launcher.report.mfu``); or why not."""
    if not c:
        return ""
    if c.get("mfu") is None:
        return f'<p id="mfu">MFU - <span class="muted">({e(c.get("reason") or "unknown")})</span></p>'
    return (f'<p id="mfu">MFU <b id="mfu-pct">{_frac(c["mfu"])}</b>'
            + (f" of {e(c['peak_text'])}" if c.get("peak_text") else " of mixed peaks" if c.get("mixed_peaks") else "")
            + f'; effective MFU <b id="effective-mfu-pct">{_frac(c.get("effective_mfu"))}</b> (MFU x useful '
            f'compute {_frac(c.get("useful_share"))} of the paid accelerator time)</p>')


def _clocks(rep: dict) -> str:
    """One row per interruption: its lost work and the clocks of its recovery; "-" with the reason
    where a clock cannot be known (``launcher.report.clocks``)."""
    clocks = rep.get("clocks") or []
    if not clocks:
        return ""
    head = "".join(f"<th>{e(label)}</th>" for label in CLOCK_LABELS.values())
    rows = ['<h3>Interruptions</h3><table id="clocks"><thead><tr><th>attempt</th><th>state</th><th>noticed by</th>'
            f"{head}<th>lost work</th><th>why a clock is unknown</th></tr></thead><tbody>"]
    for c in clocks:
        cells = "".join(f'<td class="num" data-clock="{e(k)}">{e(_dur(c.get(f"{k}_s")))}</td>' for k in CLOCK_LABELS)
        whys = "; ".join(f"{k[:-2]}: {why}" for k, why in (c.get("unknown") or {}).items())
        if c.get("unsplit_s"):
            whys = f"detection and cleanup together {_dur(c['unsplit_s'])}; " + whys
        rows.append(f'<tr data-attempt="{e(c["attempt"])}"><td class="num">{e(c["attempt"])}</td>'
                    f'<td>{_state(c["state"])}</td><td>{e(c.get("noticed_by") or "-")}</td>{cells}'
                    f'<td class="num" data-clock="lost_work">{e(_dur(c.get("lost_work_s")))}</td>'
                    f'<td class="reason">{e(whys)}</td></tr>')
    rows.append("</tbody></table>")
    return "".join(rows)


def job_page(d: dict, home: str = "", refresh_s: Optional[float] = DEFAULT_REFRESH_S,
             home_prefix: Optional[str] = None) -> str:
    return layout(f"launcher: {d['job_id']} {d['state']}", job_body(d, home_prefix), refresh_s, home)


# ---------------------------------------------------------------- a sweep
def sweep_body(d: dict, home_prefix: Optional[str] = None) -> str:
    m, best = d.get("metric"), d.get("best")
    counts = ", ".join(f"{n} {s}" for s, n in (d.get("counts") or {}).items()) or "no elements"
    out = [f'<h1>Sweep <span id="sweep-id">{e(d["sweep"])}</span></h1>',
           f'<p>{e(d["size"])} elements: {e(counts)}; goodput {_pct(d.get("goodput_pct"))}; cost '
           f'{e(_usd((d.get("cost") or {}).get("total_usd")))}</p>', _compute(d.get("compute"))]
    if best is not None and m:
        how = f"{m['mode']} {m['name']}, {'its latest report' if m['scope'] == 'last' else 'its best report'}"
        out.append(f'<div class="best-box" id="best">best element <b id="best-index">{e(best["index"])}</b> '
                   f'(<a href="/job/{q(best["job_id"])}">{e(best["job_id"])}</a>; {e(how)}): '
                   f'{e(m["name"])} <b id="best-metric">{e(_num(best["metric"]))}</b> at step '
                   f'{e(best["metric_step"])}, {_state(best["state"])}; {_params(best["params"])}</div>')
    else:
        out.append(f'<p id="best">best element: - ({e(d.get("best_reason"))})</p>')
    any_open = any(not is_final(r["state"]) for r in d.get("elements") or [])
    out.append(commands_box(sweep_commands(d["sweep"], any_open, home_prefix)))
    name = m["name"] if m else "metric"
    out.append('<table id="elements"><thead><tr><th>index</th><th>job</th><th>state</th><th>attempts</th>'
               f"<th>goodput</th><th>cost</th><th>step</th><th>MFU</th><th>{e(name)}</th><th>params</th>"
               "<th>reason</th>"
               "</tr></thead><tbody>")
    bi = best["index"] if best else None
    for r in d.get("elements") or []:
        metric = _num(r["metric"]) if r.get("metrics_read", True) else "?"
        best_cls = ' class="best"' if r["index"] == bi else ""
        out.append(f'<tr data-index="{e(r["index"])}"{best_cls}>'
                   f'<td class="num">{e(r["index"])}</td>'
                   f'<td class="id"><a href="/job/{q(r["job_id"])}">{e(r["job_id"])}</a></td>'
                   f'<td>{_state(r["state"])}</td><td class="num">{e(r["attempts"])}</td>'
                   f'<td class="num">{_pct(r["goodput_pct"])}</td><td class="num">{e(_usd(r["cost_usd"]))}</td>'
                   f'<td class="num">{e(r.get("last_step"))}</td>{mfu_cell(r.get("mfu"), r.get("mfu_reason"))}'
                   f'<td class="num">{e(metric)}</td>'
                   f'<td>{_params(r["params"])}</td><td class="reason">{e(r.get("reason") or "")}</td></tr>')
    out.append("</tbody></table>")
    for n in d.get("notes") or []:
        out.append(f'<p class="muted">note: {e(n)}</p>')
    return "\n".join(out)


def sweep_page(d: dict, home: str = "", refresh_s: Optional[float] = DEFAULT_REFRESH_S,
               home_prefix: Optional[str] = None) -> str:
    return layout(f"launcher: sweep {d['sweep']}", sweep_body(d, home_prefix), refresh_s, home)


def error_page(status: int, message: str, home: str = "", refresh_s: Optional[float] = None) -> str:
    return layout(f"launcher: {status}", f'<h1>{status}</h1><p class="error" id="error">{e(message)}</p>',
                  refresh_s, home)
