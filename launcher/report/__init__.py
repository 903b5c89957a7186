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

    def to_dict(self) -> dict:
        """The JSON-ready dict ``launcher report --json`` prints."""
        row = self.job
        d = self.accounting.to_dict()
        d.update(name=row.name, state=row.state, reason=row.reason, target=row.target, backend=row.backend,
                 ckpt_root=row.ckpt_root, notes=self.notes)
        if self.plot:
            d["plot"] = self.plot
        return d


def gather(app, job: str, refresh: bool = True, now=None) -> JobReport:
    """The report of JOB: the state store, the scheduler's records and the checkpoint root."""
    hist, row, notes = collect(app, job, refresh=refresh, now=now)
    return JobReport(account(hist), row, notes)


def build(app, job: str, refresh: bool = True, now=None) -> dict:
    """The report of JOB as a JSON-ready dict."""
    return gather(app, job, refresh=refresh, now=now).to_dict()
