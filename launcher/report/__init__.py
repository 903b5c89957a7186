"""``launcher report JOB``: where a job's wall time went, and what it cost.

``accounting`` is the pure part (a job's history in, categories that add up to the
wall time out, plus cost and the achieved vs optimal checkpoint interval);
``collect`` gathers the history from the state store, the scheduler and the
checkpoint root; ``text`` formats it; ``plot`` draws the timeline (matplotlib,
imported only there: ``pip install 'launcher[plot]'``).
"""

from dataclasses import dataclass, field
from typing import Any, Optional

from launcher.launching.submission import job_spec
from launcher.report.accounting import CATEGORIES, LABELS, Accounting, AttemptIn, History, Save, account
from launcher.report.collect import collect, root_unread
from launcher.report.listing import root_metrics
from launcher.report.mfu import summarize
from launcher.state.rows import job_step
from launcher.report.deadline import collect_deadline
from launcher.backend.context import AppContext

__all__ = ["CATEGORIES", "LABELS", "Accounting", "AttemptIn", "History", "JobReport", "Save", "account", "build",
           "gather"]


@dataclass(frozen=True)
class JobReport:
    """A job's report: its accounting plus the job row's facts and what could not be read."""

    accounting: Accounting
    job: Any  # the state store's JobRow
    notes: list = field(default_factory=list)
    plot: Optional[str] = None  # the timeline PNG, when one was drawn
    deadline: Optional[dict] = None  # cost.deadline: launcher.report.deadline
    compute: Optional[dict] = None  # MFU, effective MFU and the peak: launcher.report.mfu

    def to_dict(self) -> dict:
        """The JSON-ready dict ``launcher report --json`` prints."""
        row = self.job
        d = self.accounting.to_dict()
        d.update(name=row.name, state=row.state, reason=row.reason, target=row.target, backend=row.backend,
                 ckpt_root=row.ckpt_root, last_step=job_step(row), notes=self.notes)
        d.update(compute_keys(self.compute, d["goodput_pct"]))
        if self.plot:
            d["plot"] = self.plot
        if self.deadline:
            d["deadline"] = self.deadline
        return d


def compute_keys(compute: Optional[dict], goodput_pct: Optional[float]) -> dict:
    """The report's top-level compute keys: mfu, effective_mfu, peak (fractions, not percent),
    goodput (useful compute / wall time, a fraction) and the details under "compute"."""
    c = compute or {}
    return {"mfu": c.get("mfu"), "effective_mfu": c.get("effective_mfu"), "peak": c.get("peak"),
            "goodput": goodput_pct / 100.0 if goodput_pct is not None else None, "compute": compute}


def gather(app: AppContext, job: str, refresh: bool = True, now=None) -> JobReport:
    """The report of JOB: the state store, the scheduler's records and the checkpoint root."""
    hist, row, notes = collect(app, job, refresh=refresh, now=now)  # (refreshed: its step recorded as status's)
    acc = account(hist)
    try:
        spec = job_spec(row)
    except Exception:  # noqa: BLE001 - collect noted it
        spec = None
    compute = summarize(acc, _metrics(row.ckpt_root, notes), spec)
    return JobReport(acc, row, notes, deadline=_deadline(app, row, spec, acc, notes), compute=compute)


def _metrics(root: Optional[str], notes: list) -> dict:
    """What the job reported (its model FLOPs among them), {} when nothing or unreadable (a root
    the report could not read already is not asked again: its note says why)."""
    return {} if root and root_unread(notes, root) else root_metrics(root, notes)


def _deadline(app: AppContext, row, spec, acc, notes: list) -> Optional[dict]:
    if spec is None:
        return None
    try:
        return collect_deadline(app, row, spec, acc.to_dict())
    except Exception as e:  # noqa: BLE001 - the rest of the report stands
        notes.append(f"deadline summary not made: {e}")
        return None


def build(app: AppContext, job: str, refresh: bool = True, now=None) -> dict:
    """The report of JOB as a JSON-ready dict."""
    return gather(app, job, refresh=refresh, now=now).to_dict()
