"""The report as text."""

from __future__ import annotations

import datetime
from typing import Optional

from launcher.report.accounting import CATEGORIES, LABELS
from launcher.report.clocks import LABELS as CLOCK_NAMES, totals_line
from launcher.report.deadline import deadline_lines
from launcher.state.rows import resume_words


def _dur(s: Optional[float]) -> str:
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.2f} h"


def _ts(t: Optional[float]) -> str:
    if t is None:
        return "-"
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _usd(x: Optional[float]) -> str:
    return "-" if x is None else (f"${x:.4f}" if x < 1 else f"${x:,.2f}")


def _frac(x: Optional[float]) -> str:
    """A fraction as a percentage: one decimal, or two significant digits below 1% (an MFU of
    0.00047 is "0.047%", not "0.0%")."""
    if x is None:
        return "-"
    pct = 100.0 * x
    return f"{pct:.2g}%" if pct and abs(round(pct, 1)) < 1 else f"{pct:.1f}%"


def compute_lines(c: Optional[dict], paid_what: str = "paid accelerator time") -> list[str]:
    """MFU (naming its peak), the useful share of the paid time and effective MFU; or why not."""
    if not c:
        return []
    if c.get("mfu") is None:
        lines = [f"MFU - ({c.get('reason') or 'unknown'})"]
        if c.get("peak_text"):
            lines.append(f"  peak: {c['peak_text']}")
        return lines
    of = f" of {c['peak_text']}" if c.get("peak_text") else \
        " of mixed peaks (each element against its own peak, named in the table)" if c.get("mixed_peaks") else ""
    return [f"MFU {_frac(c['mfu'])}{of}",
            f"effective MFU {_frac(c['effective_mfu'])} = MFU x useful compute {_frac(c['useful_share'])} of the "
            f"{paid_what}: the kept model FLOPs over peak x accelerators x every attempt's allocation time"]


CLOCK_LABELS = {k: CLOCK_NAMES[k] for k in ("detection", "cleanup", "reallocation", "restore")}


def clock_text(c: dict, k: str) -> str:
    """One clock of an interruption: its duration, or "-" (why not known is said apart)."""
    return _dur(c.get(f"{k}_s"))


def interruption_lines(d: dict) -> list[str]:
    """Per interruption: its lost work, then the clocks of its recovery (launcher.report.clocks)."""
    fails = d["failures"]
    if not fails:
        return []
    clocks = {c["attempt"]: c for c in d.get("clocks") or []}
    out = ["lost work and recovery per interruption:"]
    for f in fails:
        since = (f"since step {f['last_commit_step']} was committed" if f["last_commit_step"] is not None
                 else "nothing committed in this attempt")
        out.append(f"  attempt {f['attempt']} {f['state']} at {_ts(f['at'])}: {_dur(f['lost_s'])} lost ({since})")
        c = clocks.get(f["attempt"])
        if c is None:
            continue
        by = f" (noticed by the {c['noticed_by']})" if c.get("noticed_by") else ""
        out.append("    " + ", ".join(f"{label} {clock_text(c, k)}" + (by if k == "detection" else "")
                                      for k, label in CLOCK_LABELS.items())
                   + (f"; detection and cleanup together {_dur(c['unsplit_s'])}" if c.get("unsplit_s") else ""))
        whys: dict = {}  # clocks unknown for one reason are named together
        for k, why in (c.get("unknown") or {}).items():
            whys.setdefault(why, []).append(CLOCK_LABELS.get(k[:-2], k[:-2]))
        out += [f"    {' and '.join(names)} -: {why}" for why, names in whys.items()]
        if c.get("noticed_after_end_s"):
            out.append(f"    noticed {_dur(c['noticed_after_end_s'])} after the run's end, which ends the wall time")
    tot = totals_line(d.get("clocks_total"), _dur)
    if len(fails) > 1 and tot:
        out.append(f"  {tot}")
    return out


def _header_lines(d: dict) -> list[str]:
    """The job, its state and attempts, and its wall time."""
    return [f"job {d['job_id']} ({d['name']}) on {d['target']} [{d['backend']}]: {d['state']}"
            + (f" ({d['reason']})" if d.get("reason") else "") + f", {len(d['attempts'])} attempt(s)",
            f"wall time {_dur(d['wall_s'])}  ({_ts(d['t0'])} -> {_ts(d['t_end'])}"
            f"{', still open' if d['open'] else ''})"]


def _category_lines(d: dict) -> list[str]:
    """The wall time by category, the drain lag of a local tier, and the goodput."""
    out = []
    for c in CATEGORIES:
        v = d["categories"][c]
        pct = d["percent"][c]
        out.append(f"  {LABELS[c]:<20} {_dur(v):>10}  {pct:5.1f}%" if pct is not None else f"  {LABELS[c]:<20} {_dur(v):>10}")
    out.append(f"  {'total':<20} {_dur(d['sum_s']):>10}")
    dl = d.get("drain_lag") or {}
    if dl.get("saves") or dl.get("undrained"):
        out.append(f"  {'drain lag':<20} {_dur(dl.get('mean_s')):>10}  mean, max {_dur(dl.get('max_s'))} over "
                   f"{dl['saves']} local save(s): how far the durable tier trailed the local one (beside training)"
                   + (f"; {dl['undrained']} not drained when their attempt ended" if dl.get("undrained") else ""))
    gp = d["goodput_pct"]
    out.append(f"goodput {gp:.1f}%" if gp is not None else "goodput -")
    return out


def cost_lines(c: dict) -> list[str]:
    """The job's cost (C: ``summary.cost_summary``), per attempt and per useful GPU-hour."""
    out = []
    parts = [f"#{p['attempt']} {_usd(p['usd'])}" for p in c["per_attempt"]]
    if c["total_usd"] is None:
        out.append(f"cost - ({c.get('reason') or 'no price'})")
    else:
        line = f"cost {_usd(c['total_usd'])}" + ("" if c["complete"] else " (some attempts have no price)")
        line += f"  per attempt: {', '.join(parts)}" if parts else ""
        out.append(line)
    if c["usd_per_useful_gpu_hour"] is not None:
        out.append(f"  {_usd(c['usd_per_useful_gpu_hour'])} per useful GPU-hour "
                   f"({c['useful_gpu_hours']:.4f} useful GPU-hours on {c['gpus']} GPU(s))")
    elif c.get("reason") and c["total_usd"] is not None:
        out.append(f"  per useful GPU-hour: - ({c['reason']})")
    return out


def interval_lines(iv: dict) -> list[str]:
    """The checkpoint interval achieved (IV: ``summary.checkpoint_interval``) and its optimum."""
    line = (f"checkpoint interval: achieved {_dur(iv['achieved_s'])} of compute between commits "
            f"({iv['intervals']} interval(s)); save cost C {_dur(iv['checkpoint_cost_s'])}"
            + {"local": " (local tier: the time training was blocked)",
               "mixed": " (time training was blocked: local tier and synchronous saves to the root)"}.get(
                iv.get("cost_tier"), ""))
    if iv.get("planned_s"):
        line += f"; planned {_dur(iv['planned_s'])}"
    out = [line]
    if iv.get("young_s") is not None:
        out.append(f"  observed MTBF {_dur(iv['mtbf_s'])} ({iv['failures']} failure(s) in {_dur(iv['exposure_s'])} "
                   f"running); optimum: Young {_dur(iv['young_s'])}, Daly {_dur(iv['daly_s'])}"
                   + (f", exact {_dur(iv['optimal_s'])} (restart {_dur(iv['restart_s'])}, "
                      f"{100 * iv.get('notice_fraction', 0):.0f}% with notice)" if iv.get("optimal_s") else ""))
    elif iv.get("reason"):
        out.append(f"  optimum: - ({iv['reason']})")
    return out


def attempt_lines(attempts: list) -> list[str]:
    """One row per attempt: its state, times, host, useful and lost time, and where it resumed
    (``launcher.state.rows.resume_words``: the step and the checkpoint tier)."""
    out = ["attempts:",
           f"  {'#':>3} {'state':<12} {'queued':<19} {'started':<19} {'ended':<19} {'host':<10} "
           f"{'useful':>9} {'lost':>9}  resumed"]
    for a in attempts:
        out.append(f"  {a['attempt']:>3} {a['state']:<12} {_ts(a['queued']):<19} {_ts(a['started']):<19} "
                   f"{_ts(a['ended']) if not a['open'] else '(running)':<19} {str(a['host'] or '-'):<10} "
                   f"{_dur(a['seconds']['useful_compute']):>9} {_dur(a['seconds']['lost_work']):>9}  "
                   f"{resume_words(a['resume_step'], a.get('resume_tier'))}")
    return out


def format_report(d: dict) -> str:
    out = [*_header_lines(d), *_category_lines(d), *compute_lines(d.get("compute")), *interruption_lines(d),
           *cost_lines(d["cost"]), *deadline_lines(d.get("deadline")), *interval_lines(d["interval"]),
           *attempt_lines(d["attempts"]), *(f"note: {n}" for n in d.get("notes") or [])]
    return "\n".join(out) + "\n"
