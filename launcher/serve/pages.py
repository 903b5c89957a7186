"""The web view's HTML: the jobs, one job (attempts, timeline, goodput breakdown, events) and
one sweep (its element table and best element). Pure: the dicts of
``launcher.api.readview.ReadView`` in, HTML text out.

Everything that comes from the store or a checkpoint root (job names, reasons, params,
targets, events, notes) is user-controlled: it goes through ``e()`` (``html.escape`` with
quotes) for text and attributes, and through ``q()`` (percent-encoding, then escaping) for a
part of a URL. Nothing is ever inserted unescaped.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from html import escape
from typing import Optional
from urllib.parse import quote

from launcher.report.text import _dur, _ts, _usd

DEFAULT_REFRESH_S = 5.0


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


def layout(title: str, body: str, refresh_s: Optional[float] = DEFAULT_REFRESH_S, home: str = "") -> str:
    refresh = f"{refresh_s:g}" if refresh_s else ""
    noscript = f'<noscript><meta http-equiv="refresh" content="{refresh}"></noscript>' if refresh else ""
    script = '<script src="/static/refresh.js" defer></script>' if refresh else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{e(title)}</title>"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<link rel="stylesheet" href="/static/style.css">' + noscript + script + "</head>"
            f'<body data-refresh="{e(refresh)}"><header><span class="title"><a href="/">launcher</a></span>'
            f'<span class="muted">{e(home)}</span><span id="refresh-status">read-only view</span></header>'
            f"<main>{body}</main></body></html>\n")


# ---------------------------------------------------------------- the jobs
JOB_COLUMNS = ("job", "name", "state", "target", "attempts", "cost", "step", "sweep", "created", "reason")


def jobs_body(d: dict) -> str:
    out = [f'<h1>Jobs <span class="muted" id="job-count">{d["total"]}</span></h1>']
    if not d.get("exists", True):
        out.append(f'<p class="muted">no state store at {e(d.get("store"))} yet: no job was launched with this '
                   f"LAUNCHER_HOME</p>")
    if d.get("sweeps"):
        out.append("<p>Sweeps: " + ", ".join(
            f'<a class="sweep-link" href="/sweep/{q(s["sweep"])}">{e(s["sweep"])}</a> '
            f'<span class="muted">({e(s["size"])})</span>' for s in d["sweeps"]) + "</p>")
    for job_id, why in (d.get("unreadable") or {}).items():
        out.append(f'<p class="error">{e(job_id)}: not shown: {e(why)}</p>')
    out.append(_pager(d))
    rows = ["<table id=\"jobs\"><thead><tr>" + "".join(f"<th>{c}</th>" for c in JOB_COLUMNS)
            + "</tr></thead><tbody>"]
    for j in d["jobs"]:
        jid = j["job_id"]
        sweep = (f'<a href="/sweep/{q(j["sweep"])}">{e(j["sweep"])}</a> #{e(j["element"])}' if j.get("sweep")
                 else "")
        cost = _usd(j["cost_usd"]) + ("" if j["cost_complete"] or j["cost_usd"] is None else "+")
        rows.append(f'<tr data-job="{e(jid)}"><td><a href="/job/{q(jid)}">{e(jid)}</a></td><td>{_name(j["name"])}</td>'
                    f'<td>{_state(j["state"])}</td><td>{_name(j["target"])}</td><td class="num">{j["attempts"]}</td>'
                    f'<td class="num">{e(cost)}</td><td class="num">{e(j["last_step"])}</td><td>{sweep}</td>'
                    f'<td>{e(_ts(j["created"]))}</td><td class="reason">{e(j["reason"] or "")}</td></tr>')
    rows.append("</tbody></table>")
    out.append("".join(rows))
    if not d["jobs"] and d.get("exists", True):
        out.append('<p class="muted">no jobs</p>')
    out.append(_pager(d))
    return "\n".join(out)


def _pager(d: dict) -> str:
    if d["pages"] <= 1:
        return ""
    per = d["per_page"]
    links = []
    for p in sorted({1, d["page"] - 1, d["page"], d["page"] + 1, d["pages"]}):
        if 1 <= p <= d["pages"]:
            links.append(f"<span>page {p}</span>" if p == d["page"] else f'<a href="/?page={p}&amp;per={per}">{p}</a>')
    return f'<nav class="pages">{"".join(links)} <span class="muted">of {d["pages"]} ({per} a page)</span></nav>'


def jobs_page(d: dict, home: str = "", refresh_s: Optional[float] = DEFAULT_REFRESH_S) -> str:
    return layout(f"launcher: {d['total']} jobs", jobs_body(d), refresh_s, home)


# ---------------------------------------------------------------- one job
def job_body(d: dict) -> str:
    # loaded by the page kind that draws it
    from launcher.serve.timeline import timeline_svg

    rep = d.get("report")
    out = [f'<h1>Job <span id="job-id">{e(d["job_id"])}</span></h1>',
           f'<p>name <b id="job-name">{e(d["name"])}</b> on <b>{e(d["target"])}</b> [{e(d["backend"])}]: '
           f'<span id="job-state">{_state(d["state"])}</span>'
           + (f' <span class="reason" id="job-reason">({e(d["reason"])})</span>' if d.get("reason") else "")
           + "</p>"]
    if d.get("sweep"):
        out.append(f'<p>element {e(d.get("element"))} of sweep <a href="/sweep/{q(d["sweep"])}">{e(d["sweep"])}</a></p>')
    if d.get("ckpt_root"):
        out.append(f'<p>checkpoints {e(d["ckpt_root"])}; last committed step <b id="last-step">'
                   f'{e(d.get("last_step"))}</b></p>')
    out.append("<h2>Attempts</h2>")
    out.append('<table id="attempts"><thead><tr><th>#</th><th>target</th><th>native id</th><th>state</th>'
               "<th>resumed</th><th>submitted</th><th>started</th><th>ended</th><th>exit</th><th>cost</th>"
               "<th>reason</th></tr></thead><tbody>")
    for a in d["attempts"]:
        rs = a.get("resume_step")
        out.append(f'<tr><td class="num">{e(a["attempt"])}</td><td>{e(a["target"])}</td><td>{e(a["native_id"])}</td>'
                   f'<td>{_state(a["state"])}</td><td class="num">{"-" if rs is None else ("fresh" if rs < 0 else rs)}'
                   f'</td><td>{e(_ts(a["submitted"]))}</td><td>{e(_ts(a["started"]))}</td><td>{e(_ts(a["ended"]))}'
                   f'</td><td class="num">{e(a["exit_code"])}</td><td class="num">{e(_usd(a["cost_usd"]))}</td>'
                   f'<td class="reason">{e(a["reason"] or "")}</td></tr>')
    out.append("</tbody></table>")
    out.append("<h2>Timeline and goodput</h2>")
    if rep is None:
        out.append(f'<p class="error">no report: {e(d.get("report_error"))}</p>')
    else:
        out.append(timeline_svg(rep))
        out.append(_breakdown(rep))
        # loaded by the page kind that draws it
        from launcher.report.text import format_report

        out.append(f'<details><summary>as <code>launcher report</code> prints it</summary>'
                   f"<pre>{e(format_report(rep))}</pre></details>")
    ev = [x for x in d.get("events") or [] if x.get("kind") != "submitted"][-20:]
    if ev:
        out.append("<h2>Events</h2><table id=\"events\"><thead><tr><th>when</th><th>event</th><th>detail</th></tr>"
                   "</thead><tbody>")
        for x in ev:
            detail = {k: v for k, v in x.items() if k not in ("ts", "kind")}
            out.append(f"<tr><td>{e(_ts(x.get('ts')))}</td><td>{e(x.get('kind'))}</td>"
                       f"<td class=\"reason\">{e(json.dumps(detail, default=str))}</td></tr>")
        out.append("</tbody></table>")
    return "\n".join(out)


def _breakdown(rep: dict) -> str:
    # loaded by the page kind that draws it
    from launcher.serve.timeline import legend_rows

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
    for n in rep.get("notes") or []:
        rows.append(f'<p class="muted">note: {e(n)}</p>')
    return "".join(rows)


def job_page(d: dict, home: str = "", refresh_s: Optional[float] = DEFAULT_REFRESH_S) -> str:
    return layout(f"launcher: {d['job_id']} {d['state']}", job_body(d), refresh_s, home)


# ---------------------------------------------------------------- a sweep
def sweep_body(d: dict) -> str:
    m, best = d.get("metric"), d.get("best")
    counts = ", ".join(f"{n} {s}" for s, n in (d.get("counts") or {}).items()) or "no elements"
    out = [f'<h1>Sweep <span id="sweep-id">{e(d["sweep"])}</span></h1>',
           f'<p>{e(d["size"])} elements: {e(counts)}; goodput {_pct(d.get("goodput_pct"))}; cost '
           f'{e(_usd((d.get("cost") or {}).get("total_usd")))}</p>']
    if best is not None and m:
        how = f"{m['mode']} {m['name']}, {'its latest report' if m['scope'] == 'last' else 'its best report'}"
        out.append(f'<div class="best-box" id="best">best element <b id="best-index">{e(best["index"])}</b> '
                   f'(<a href="/job/{q(best["job_id"])}">{e(best["job_id"])}</a>; {e(how)}): '
                   f'{e(m["name"])} <b id="best-metric">{e(_num(best["metric"]))}</b> at step '
                   f'{e(best["metric_step"])}, {_state(best["state"])}; {_params(best["params"])}</div>')
    else:
        out.append(f'<p id="best">best element: - ({e(d.get("best_reason"))})</p>')
    name = m["name"] if m else "metric"
    out.append('<table id="elements"><thead><tr><th>index</th><th>job</th><th>state</th><th>attempts</th>'
               f"<th>goodput</th><th>cost</th><th>step</th><th>{e(name)}</th><th>params</th><th>reason</th>"
               "</tr></thead><tbody>")
    bi = best["index"] if best else None
    for r in d.get("elements") or []:
        metric = _num(r["metric"]) if r.get("metrics_read", True) else "?"
        best_cls = ' class="best"' if r["index"] == bi else ""
        out.append(f'<tr data-index="{e(r["index"])}"{best_cls}>'
                   f'<td class="num">{e(r["index"])}</td><td><a href="/job/{q(r["job_id"])}">{e(r["job_id"])}</a></td>'
                   f'<td>{_state(r["state"])}</td><td class="num">{e(r["attempts"])}</td>'
                   f'<td class="num">{_pct(r["goodput_pct"])}</td><td class="num">{e(_usd(r["cost_usd"]))}</td>'
                   f'<td class="num">{e(r["final_step"])}</td><td class="num">{e(metric)}</td>'
                   f'<td>{_params(r["params"])}</td><td class="reason">{e(r.get("reason") or "")}</td></tr>')
    out.append("</tbody></table>")
    for n in d.get("notes") or []:
        out.append(f'<p class="muted">note: {e(n)}</p>')
    return "\n".join(out)


def sweep_page(d: dict, home: str = "", refresh_s: Optional[float] = DEFAULT_REFRESH_S) -> str:
    return layout(f"launcher: sweep {d['sweep']}", sweep_body(d), refresh_s, home)


def error_page(status: int, message: str, home: str = "", refresh_s: Optional[float] = None) -> str:
    return layout(f"launcher: {status}", f'<h1>{status}</h1><p class="error" id="error">{e(message)}</p>',
                  refresh_s, home)
