"""What a watch pass does with a sweep's elements: the sweep's ``WatchHooks``.

``launcher.recovery.watch`` handles single jobs and calls these at fixed points of a pass
(``launcher.recovery.outcome.WatchHooks``); the application context hands them over
(``launcher.api.context.App.watch_hooks``):

- ``judge``: early stopping is judged on the jobs the pass just refreshed, and every stop
  recorded for them is carried out in one batch (one cancel per target, one grace period);
- ``act_first``: an element with a stop recorded that the batch left open says why (or, if the
  batch did not take it, is stopped on its own); an element of an array that waited past
  ``burst.after`` is taken out of its array and launched on its burst target;
- ``owns_burst``: so an element of an array never runs the single job's race of two copies;
- ``decide_ended``: an element whose attempt ended after its stop was recorded closes as STOPPED;
- ``unfound_submission``: a queued element's start, or element 0's by the sweep's launch, that
  never reached the scheduler goes back into its queue;
- ``after``: queued elements start as their sweep's slots free;
- ``resubmit_element``: a further attempt of one element (recovery's, a deadline's or a burst's
  ``launcher.launching.launch.resubmit``) is submitted alone: its index of the array again, or its
  own job (``launcher.sweep.launch.resubmit_element``).
"""

from __future__ import annotations

from launcher.launching.submission import job_spec
from launcher.recovery.outcome import Outcome, WatchHooks
from launcher.sweep import burst, one_by_one, stopping
from launcher.sweep.arrays import adopt_array
from launcher.sweep.elements import runs_arrays
from launcher.sweep.launch import resubmit_element
from launcher.backend.context import AppContext


def act_first(app: AppContext, row, status, clock):
    if stopping.pending_stop(row) is not None:
        return stopping.carried_out(app, row.job_id) or stopping.stop_element(app, row.job_id)
    if burst.applies(app, row):
        return burst.step(app, row, job_spec(row), status, clock)
    return None


def unfound_submission(app: AppContext, claim, now: float):
    """A SUBMITTING element whose own dedupe token the backend does not know: a queued
    element's start (``one_by_one.requeue_lost_start``), element 0 of a sweep of separate jobs
    whose launch died before submitting it (``one_by_one.requeue_lost_launch``), or an element of an array whose
    launch ended before recording it, adopted with every other element by the array's token in one
    lookup (``arrays.adopt_array``)."""
    job = claim.job
    if one_by_one.started_at(job) is not None:
        return one_by_one.requeue_lost_start(app, claim, now)
    sweep = job.meta.get("sweep") or {}
    if sweep.get("id") is not None and not runs_arrays(app.backend(job.target)):
        return one_by_one.requeue_lost_launch(app, claim, now)
    if sweep.get("id") is not None:
        found = adopt_array(app, sweep["id"])
        if found is not None:
            return Outcome(job.job_id, "adopted", f"the sweep's array {found.native_id}, by its dedupe token")
    return None


def after(app: AppContext, clock):
    return one_by_one.fill_all(app)


def watch_hooks() -> WatchHooks:
    return WatchHooks(judge=stopping.judge_and_stop, act_first=act_first, owns_burst=burst.applies,
                      decide_ended=stopping.stop_close, unfound_submission=unfound_submission, after=after,
                      resubmit_element=resubmit_element)
