"""What ``launcher status SWEEP`` shows: counts by state and one row per element. Pure.

The JSON shape (``--json``)::

    {"sweep": ID, "size": N, "metric": NAME or null,      # the early-stop metric, if any
     "counts": {STATE: n, ...},                      # states in a fixed order, zeros left out
     "elements": [{"index": i, "params": {...}, "state": STATE, "step": int or null,
                   "metric": float or null,          # the latest value of METRIC
                   "metrics": {NAME: float, ...},    # the latest value of every metric reported
                                                     # (a stopped element's: up to its stopping rung)
                   "rung": int or null, "reason": str or null}, ...]}   # why it was stopped

The text is the same table, one line per element, every value kept on its line: the column
after the step is METRIC's latest value, or, in a sweep without ``early_stop``, every metric
reported (``name=value``).
"""

from __future__ import annotations

import json
import re
from typing import Iterable, Mapping, Optional

from launcher.core.status import STOPPED
from launcher.sweep.early_stop import Judgement
from launcher.spec.sweep_elements import Element

# the order counts are listed in; any other state comes after these, alphabetically
STATE_ORDER = ("QUEUED", "PENDING", "RUNNING", "COMPLETED", STOPPED, "PREEMPTED", "NODE_FAIL",
               "TIMEOUT", "OUT_OF_MEMORY", "ATTEMPT_FAILED", "FAILED", "CANCELLED", "GAVE_UP", "UNKNOWN")
_PLAIN = re.compile(r"^[A-Za-z0-9_.,:/+@%=-]+$")


def summarize(sweep_id: str, elements: Iterable[Element], states: Mapping[int, str],
              steps: Optional[Mapping[int, Optional[int]]] = None, metric: Optional[str] = None,
              metrics: Optional[Mapping[int, Mapping[str, float]]] = None,
              stopped: Optional[Mapping[int, Judgement]] = None,
              attempts: Optional[Mapping[int, list]] = None,
              metric_steps: Optional[Mapping[int, Optional[int]]] = None) -> dict:
    """STATES: index -> state (an element without one is PENDING); STEPS: its one step (its row's
    last committed step: ``launcher.state.rows.job_step``); METRICS: the latest value of each
    metric it reported, METRIC_STEPS the latest step it reported them at (``metric_step``, beside
    them); STOPPED: index -> the judgement that stopped it (its state is then STOPPED: the
    scheduler only saw a cancel); ATTEMPTS: index -> [(attempt, state)] of the elements that ran
    more than once."""
    steps, metrics, stopped, attempts = steps or {}, metrics or {}, stopped or {}, attempts or {}
    metric_steps = metric_steps or {}
    rows = []
    for e in sorted(elements, key=lambda e: e.index):
        state = STOPPED if e.index in stopped else (states.get(e.index) or "PENDING")
        latest = dict(metrics.get(e.index) or {})
        j = stopped.get(e.index)
        rows.append({"index": e.index, "params": dict(e.params), "state": state, "step": steps.get(e.index),
                     "metric": latest.get(metric) if metric else None, "metrics": latest,
                     "metric_step": metric_steps.get(e.index),
                     "rung": j.rung if j else None, "reason": j.reason if j else None,
                     "attempts": [{"attempt": n, "state": st} for n, st in attempts.get(e.index, [])]})
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    ordered = {s: counts[s] for s in STATE_ORDER if s in counts}
    ordered.update({s: counts[s] for s in sorted(counts) if s not in ordered})
    return {"sweep": sweep_id, "size": len(rows), "metric": metric, "counts": ordered, "elements": rows}


def _one_line(text: str) -> str:
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def param_text(value) -> str:
    """A parameter in the table: plain values as they are, anything else as JSON (quoted, on one line)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return value if _PLAIN.match(value) else _one_line(json.dumps(value, ensure_ascii=False))


def params_text(params: Mapping) -> str:
    return " ".join(f"{k}={param_text(v)}" for k, v in params.items())


def _number(v) -> str:
    return "-" if v is None else f"{v:.6g}"


def _metric_cell(summary: dict, row: dict) -> str:
    if summary["metric"]:
        return _number(row["metric"])
    return " ".join(f"{_one_line(k)}={_number(v)}" for k, v in sorted(row["metrics"].items())) or "-"


def format_text(summary: dict) -> str:
    counts = ", ".join(f"{n} {s}" for s, n in summary["counts"].items()) or "no elements"
    lines = [f"sweep {_one_line(summary['sweep'])}: {summary['size']} elements: {counts}"]
    head = ["index", "state", "step", _one_line(summary["metric"] or "metrics"), "params"]
    table = [head]
    for r in summary["elements"]:
        table.append([str(r["index"]), r["state"], "-" if r["step"] is None else str(r["step"]),
                      _metric_cell(summary, r), params_text(r["params"])])
    widths = [max(len(row[i]) for row in table) for i in range(len(head) - 1)]
    for row in table:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    for r in summary["elements"]:
        if r["reason"]:
            lines.append(f"element {r['index']} stopped: {_one_line(r['reason'])}")
    for r in summary["elements"]:
        if r.get("attempts"):
            runs = ", ".join(f"{a['attempt']} {a['state']}" for a in r["attempts"])
            lines.append(f"element {r['index']} attempts: {runs}")
    return "\n".join(lines) + "\n"
