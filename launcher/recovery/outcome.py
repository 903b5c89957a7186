"""What one watch pass did with a job (``Outcome``), and how a layer above recovery joins a
pass (``WatchHooks``).

Recovery knows single jobs. Sweeps (``launcher.sweep.watching``) add what a pass does with
their elements: judge early stopping on the refreshed jobs, act first on an element that must
stop or that bursts out of its array, close an ended element that was stopped, take back a queued element's start
that never reached the scheduler, start queued elements as slots free, and submit a further attempt of one element
alone (``resubmit_element``, which ``launcher.launching.launch.resubmit`` calls for an element). The application
context (``launcher.api.context.App.watch_hooks``) hands them to every pass and to every resubmission, so neither
recovery nor launching imports the sweep layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from launcher.core.errors import LauncherError


@dataclass
class Outcome:
    job_id: str
    action: str  # "running", "resubmitted", "waiting", "done", "gave_up", "superseded", "adopted", "failed",
    #              "claimed" (another watcher holds it), "control_plane"
    reason: str = ""


def _nothing(*_args) -> list:
    return []


def _no_outcome(*_args) -> Optional[Outcome]:
    return None


def _not_mine(*_args) -> bool:
    return False


def _no_sweep_layer(_app, row, *_args) -> tuple:
    raise LauncherError(f"job {row.job_id} is an element of sweep {(row.meta.get('sweep') or {}).get('id')}: "
                        "resubmitting it needs the sweep layer's hooks (launcher.sweep.watching.watch_hooks), "
                        "and these hooks have none")


@dataclass(frozen=True)
class WatchHooks:
    """Callables a watch pass calls at fixed points; each default does nothing."""

    # (app, open jobs just refreshed) -> outcomes, before any job is acted on
    judge: Callable[[Any, list], list] = _nothing
    # (app, open job row, its status, clock) -> an outcome that replaces recovery's own handling
    act_first: Callable[[Any, Any, Any, Callable[[], float]], Optional[Outcome]] = _no_outcome
    # (app, claim of a SUBMITTING row its token did not find, now) -> an outcome, or None for
    # recovery's own rule (wait out the grace, then close the row)
    unfound_submission: Callable[[Any, Any, float], Optional[Outcome]] = _no_outcome
    # (app, open job row) -> True when the layer above carries out this job's burst itself in
    # ``act_first`` (an element of an array is taken out of it: no race of two copies)
    owns_burst: Callable[[Any, Any], bool] = _not_mine
    # (job row read under its claim, its attempt ended) -> a decision (``launcher.recovery.decide``)
    # that replaces recovery's own, e.g. an element with an early stop recorded closes as STOPPED
    decide_ended: Callable[[Any], Any] = _no_outcome
    # (app, clock) -> outcomes, once every open job was handled
    after: Callable[[Any, Callable[[], float]], list] = _nothing
    # (app, element row of a sweep, target name, attempt) -> (lookup, submit) of that attempt of the element alone,
    # for the submission protocol (``launcher.launching.submit.fenced_submit``)
    resubmit_element: Callable[[Any, Any, str, int], tuple] = _no_sweep_layer


NO_HOOKS = WatchHooks()
