"""``launcher report JOB``: where a job's wall time went, and what it cost.

``accounting`` is the pure part (a job's history in, categories that add up to the
wall time out, plus cost and the achieved vs optimal checkpoint interval);
``collect`` gathers the history from the state store, the scheduler and the
checkpoint root; ``text`` formats it; ``plot`` draws the timeline (matplotlib,
imported only there: ``pip install 'launcher[plot]'``).
"""

from .accounting import CATEGORIES, LABELS, Accounting, AttemptIn, History, Save, account

__all__ = ["CATEGORIES", "LABELS", "Accounting", "AttemptIn", "History", "Save", "account", "build"]


def build(app, job: str, refresh: bool = True, now=None) -> dict:
    """The report of JOB as a JSON-ready dict."""
    from .collect import collect

    hist, row, notes = collect(app, job, refresh=refresh, now=now)
    acc = account(hist)
    d = acc.to_dict()
    d.update(name=row.name, state=row.state, reason=row.reason, target=row.target, backend=row.backend,
             ckpt_root=row.ckpt_root, notes=notes)
    return d
