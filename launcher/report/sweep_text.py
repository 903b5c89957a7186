"""The sweep report (``launcher.report.sweep``) as text."""

from __future__ import annotations

from launcher.report.accounting import CATEGORIES, LABELS
from launcher.report.clocks import totals_line
from launcher.report.text import _dur, _frac, _usd, compute_lines
from launcher.sweep.summary import params_text


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1f}%"


def _num(x) -> str:
    return "-" if x is None else f"{x:.6g}"


def _time_lines(d: dict) -> list[str]:
    span = d["span"]
    out = [f"element time {_dur(d['wall_s'])} (the elements' wall times added up; the sweep itself "
           f"{_dur(span['elapsed_s'])} from first submission to {'now, still open' if span['open'] else 'last end'})"]
    for c in CATEGORIES:
        v, pct = d["categories"][c], d["percent"][c]
        out.append(f"  {LABELS[c]:<20} {_dur(v):>10}" + (f"  {pct:5.1f}%" if pct is not None else ""))
    out.append(f"  {'total':<20} {_dur(d['sum_s']):>10}")
    out.append(f"goodput {_pct(d['goodput_pct'])} (useful compute / element time)")
    clocks = totals_line(d.get("clocks_total"), _dur)
    if clocks:
        out.append(f"  {clocks}")
    return out


def _cost_lines(d: dict) -> list[str]:
    c = d["cost"]
    if c["total_usd"] is None:
        return [f"cost - ({c['reason']})"]
    out = [f"cost {_usd(c['total_usd'])} ({c['priced']} of {d['size']} elements priced"
           + (f"; {c['reason']})" if c["reason"] else ")")]
    if c["usd_per_useful_gpu_hour"] is not None:
        out.append(f"  {_usd(c['usd_per_useful_gpu_hour'])} per useful GPU-hour ({c['useful_gpu_hours']:.4f} "
                   f"useful GPU-hours)")
    return out


def _best_line(d: dict) -> str:
    m, b = d["metric"], d["best"]
    if b is None:
        return f"best element: - ({d['best_reason']})"
    how = (f"{m['mode']} {m['name']}, {'its latest report' if m['scope'] == 'last' else 'its best report'}, "
           f"from {m['source']}")
    return (f"best element {b['index']} ({how}): {m['name']} {_num(b['metric'])} at step {b['metric_step']}, "
            f"{b['state']}; {params_text(b['params'])}")


def peak_short(p) -> str:
    """An element's peak in a table cell: "H100 SXM BF16 989" (TFLOPS per accelerator); "-" unknown."""
    return "-" if not p else f"{p['name']} {str(p['precision']).upper()} {p['tflops']:g}"


def _table(d: dict) -> list[str]:
    """One row per element. MFU is each element's own; where the elements' peaks differ (the MFU
    line says "mixed peaks") a peak column names each one's (TFLOPS per accelerator)."""
    m = d["metric"]
    best = d["best"]["index"] if d["best"] else None
    mixed = bool((d.get("compute") or {}).get("mixed_peaks"))
    head = ["", "index", "state", "attempts", "goodput", "MFU", *(["peak (TFLOPS)"] if mixed else []), "cost", "step",
            m["name"] if m else "metric", "params"]
    table = [head]
    for r in d["elements"]:
        table.append(["*" if r["index"] == best else "", str(r["index"]), r["state"], str(r["attempts"]),
                      _pct(r["goodput_pct"]), _frac(r.get("mfu")), *([peak_short(r.get("peak"))] if mixed else []),
                      _usd(r["cost_usd"]), "-" if r["final_step"] is None else str(r["final_step"]),
                      _num(r["metric"]) if r.get("metrics_read", True) else "?",
                      params_text(r["params"])])
    widths = [max(len(row[i]) for row in table) for i in range(len(head) - 1)]
    widths[0] = 1  # the best element's mark, "*"
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in table]


def format_sweep_report(d: dict) -> str:
    counts = ", ".join(f"{n} {s}" for s, n in d["counts"].items()) or "no elements"
    out = [f"sweep {d['sweep']}: {d['size']} elements: {counts}"]
    out += _time_lines(d)
    out += compute_lines(d.get("compute"), "elements' paid time")
    out += _cost_lines(d)
    out.append(_best_line(d))
    out += _table(d)
    out += [f"note: {n}" for n in d.get("notes") or []]
    return "\n".join(out) + "\n"
