"""``launcher report JOB``: where a job's wall time went, and what it cost.

``accounting`` is the pure part (a job's history in, categories that add up to the
wall time out, plus cost and the achieved vs optimal checkpoint interval);
``collect`` gathers the history from the state store, the scheduler and the
checkpoint root; ``text`` formats it; ``plot`` draws the timeline (matplotlib,
imported only there: ``pip install 'launcher[plot]'``).
"""

from dataclasses import dataclass, field
from typing import Any, Optional

from launcher.report.accounting import CATEGORIES, LABELS, Accounting, AttemptIn, History, Save, account
from launcher.report.collect import collect

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

    def to_dict(self) -> dict:
        """The JSON-ready dict ``launcher report --json`` prints."""
        row = self.job
        d = self.accounting.to_dict()
        d.update(name=row.name, state=row.state, reason=row.reason, target=row.target, backend=row.backend,
                 ckpt_root=row.ckpt_root, notes=self.notes)
        if self.plot:
            d["plot"] = self.plot
        if self.deadline:
            d["deadline"] = self.deadline
        return d


def gather(app, job: str, refresh: bool = True, now=None) -> JobReport:
    """The report of JOB: the state store, the scheduler's records and the checkpoint root."""
    hist, row, notes = collect(app, job, refresh=refresh, now=now)
    acc = account(hist)
    return JobReport(acc, row, notes, deadline=_deadline(app, row, acc, notes))


def _deadline(app, row, acc, notes: list) -> Optional[dict]:
    # a report with a deadline only
    from launcher.report.deadline import collect_deadline
    # a report with a deadline only
    from launcher.launching.submission import job_spec

    try:
        spec = job_spec(row)
    except Exception:  # noqa: BLE001 - collect noted it
        return None
    try:
        return collect_deadline(app, row, spec, acc.to_dict())
    except Exception as e:  # noqa: BLE001 - the rest of the report stands
        notes.append(f"deadline summary not made: {e}")
        return None


def build(app, job: str, refresh: bool = True, now=None) -> dict:
    """The report of JOB as a JSON-ready dict."""
    return gather(app, job, refresh=refresh, now=now).to_dict()
