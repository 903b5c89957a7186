"""A job's attempt timeline as inline SVG, drawn from its report (``JobReport.to_dict``) the way
``launcher report --plot`` draws it (``launcher.report.plot``): one row per attempt, its
segments coloured by category, committed checkpoints as ticks, preemption notices and
interruptions marked. Pure: a dict in, SVG text out (every text escaped); no matplotlib."""

from __future__ import annotations

from html import escape

from launcher.report.accounting import CATEGORIES, LABELS
from launcher.report.plot import CLOCK_COLORS, CLOCK_LABELS, COLORS  # matplotlib is imported inside plot() only
from launcher.state.rows import resume_words

WIDTH = 960
LEFT, RIGHT, TOP, ROW, AXIS = 140, 20, 10, 34, 36


def _n(x) -> str:
    return f"{x:.1f}"


def timeline_svg(report: dict) -> str:
    attempts = report.get("attempts") or []
    t0 = report.get("t0") or 0.0
    wall = max(1e-9, float(report.get("wall_s") or 0.0))
    rows = {a["attempt"]: i for i, a in enumerate(attempts)}
    n = max(1, len(attempts))
    inner = WIDTH - LEFT - RIGHT
    height = TOP + n * ROW + AXIS

    def x(t) -> float:
        return LEFT + inner * min(max((t - t0) / wall, 0.0), 1.0)

    def y(attempt) -> float:
        return TOP + rows.get(attempt, 0) * ROW

    out = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
           f'width="{WIDTH}" height="{height}" role="img" aria-label="attempt timeline">']
    for s in report.get("segments") or []:
        x0, x1 = x(s["start"]), x(s["end"])
        cat = s["category"]
        out.append(f'<rect x="{_n(x0)}" y="{_n(y(s["attempt"]) + 5)}" width="{_n(max(x1 - x0, 0.5))}" '
                   f'height="{ROW - 10}" fill="{COLORS.get(cat, "#999")}" data-category="{escape(cat)}">'
                   f'<title>{escape(LABELS.get(cat, cat))}: {s["end"] - s["start"]:.1f} s</title></rect>')
        clock = s.get("clock")
        if clock in CLOCK_COLORS:  # the interruption's clock, as a strip under its restart overhead
            out.append(f'<rect x="{_n(x0)}" y="{_n(y(s["attempt"]) + ROW - 10)}" width="{_n(max(x1 - x0, 0.5))}" '
                       f'height="4" fill="{CLOCK_COLORS[clock]}" data-clock="{escape(clock)}">'
                       f'<title>{escape(CLOCK_LABELS[clock])}: {s["end"] - s["start"]:.1f} s</title></rect>')
    for a in attempts:
        top = y(a["attempt"])
        label = f"attempt {a['attempt']}"
        where = resume_words(a.get("resume_step"), a.get("resume_tier"))  # as status and report say it
        if where == "-":
            out.append(f'<text x="{LEFT - 6}" y="{_n(top + ROW / 2 + 4)}" text-anchor="end">{escape(label)}</text>')
        else:
            out.append(f'<text x="{LEFT - 6}" y="{_n(top + ROW / 2)}" text-anchor="end">{escape(label)}'
                       f'<title>{escape(label)}: resumed {escape(where)}</title></text>'
                       f'<text class="resumed" x="{LEFT - 6}" y="{_n(top + ROW / 2 + 11)}" text-anchor="end" '
                       f'font-size="9">{escape(where)}</text>')
        for sv in a.get("saves") or []:
            if sv.get("committed"):
                xs = _n(x(sv["end"]))
                out.append(f'<line x1="{xs}" x2="{xs}" y1="{_n(top + 2)}" y2="{_n(top + ROW - 2)}" stroke="#000" '
                           f'stroke-width="1.5"><title>checkpoint committed: step {int(sv["step"])}</title></line>')
        if a.get("preempt_notice"):
            px = x(a["preempt_notice"])
            out.append(f'<path d="M{_n(px - 5)},{_n(top)} L{_n(px + 5)},{_n(top)} L{_n(px)},{_n(top + 7)} Z" '
                       f'fill="purple"><title>preemption notice</title></path>')
        if a.get("failed"):
            at = a.get("failure_at") or a.get("ended")
            if at is not None:
                fx, fy = x(at), top + ROW / 2
                out.append(f'<g class="interrupted"><title>interrupted: {escape(str(a.get("state")))}</title>'
                           f'<line x1="{_n(fx - 5)}" y1="{_n(fy - 5)}" x2="{_n(fx + 5)}" y2="{_n(fy + 5)}" '
                           f'stroke="darkred" stroke-width="3"/><line x1="{_n(fx - 5)}" y1="{_n(fy + 5)}" '
                           f'x2="{_n(fx + 5)}" y2="{_n(fy - 5)}" stroke="darkred" stroke-width="3"/></g>')
    base = TOP + n * ROW
    out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{base}" y2="{base}" stroke="#666"/>')
    for k in range(5):
        tx = LEFT + inner * k / 4
        out.append(f'<line x1="{_n(tx)}" x2="{_n(tx)}" y1="{base}" y2="{base + 4}" stroke="#666"/>'
                   f'<text x="{_n(tx)}" y="{base + 16}" text-anchor="middle">{wall * k / 4:.0f} s</text>')
    out.append(f'<text x="{LEFT + inner / 2:.0f}" y="{base + 32}" text-anchor="middle">'
               f'seconds since the first submission</text>')
    out.append("</svg>")
    return "".join(out)


def legend_rows(report: dict) -> list[tuple]:
    """[(category, label, colour, seconds, percent or None)] in the report's order."""
    cats = report.get("categories") or {}
    pct = report.get("percent") or {}
    return [(c, LABELS[c], COLORS[c], cats.get(c) or 0.0, pct.get(c)) for c in CATEGORIES]
