"""Bad nodes remembered (docs/bad-nodes.md): the watch blames the nodes of an attempt that failed
on them (and a status refresh those of a run the scheduler restarted in place after a node failure,
``blame_run``), and a node blamed ``recovery.bad_nodes.after`` times within ``window`` is quarantined on
its target for the whole store (``launcher.state.nodes``), before the next attempt is submitted
(which then keeps off it: ``launcher.launching.submission.excluded_nodes``).

An attempt failed on its nodes when the scheduler says NODE_FAIL, or when the program exited with
one of ``recovery.bad_nodes.exit_codes`` (the user's classifier: its way of saying "this node is
bad"). Every node the attempt ran on is blamed (the scheduler names the job's nodes, not which of
them failed): a node that fails several jobs is blamed by each, a healthy neighbour of a bad node
seldom reaches the threshold alone.

``blame_reason`` is the pure rule; ``record`` is the thin I/O around it.
"""

from __future__ import annotations

from typing import Optional

from launcher.backend.protocols import ExcludesNodes, can
from launcher.core.errors import LauncherError
from launcher.core.status import JobState, Status
from launcher.launching.submission import job_spec
from launcher.state.nodes import blame
from launcher.backend.context import AppContext


def blame_reason(state: str, exit_code: Optional[int], exit_codes) -> str:
    """Pure: why an attempt that ended in STATE with EXIT_CODE blames its nodes ("": it does not).
    EXIT_CODES: ``recovery.bad_nodes.exit_codes``."""
    if state == JobState.NODE_FAIL.value:
        return "the scheduler says NODE_FAIL"
    if state == JobState.FAILED.value and exit_code is not None and exit_code in exit_codes:
        return f"exit {exit_code}, one of recovery.bad_nodes.exit_codes"
    return ""


def record(app: AppContext, job, latest, st, spec, now: float) -> list:
    """Blame the nodes of JOB's attempt LATEST (its row), which ended with status ST, when it
    failed on them; quarantine those blamed often enough. Returns the events to record ((kind,
    detail) each): ``node_blamed``, ``node_quarantined``, or ``node_fault_unplaced`` (the target's
    backend cannot exclude nodes, or does not say which nodes the attempt had: nothing blamed);
    none when that attempt blamed its nodes already."""
    why = blame_reason(latest.state, latest.exit_code, spec.recovery.bad_nodes.exit_codes)
    if not why:
        return []
    target = latest.target or job.target
    try:
        backend = app.backend_class(target)
    except LauncherError as e:
        return [("node_fault_unplaced", {"attempt": latest.attempt, "why": why, "reason": str(e)})]
    if not can(backend, ExcludesNodes):
        return [("node_fault_unplaced", {"attempt": latest.attempt, "why": why,
                                         "reason": f"backend {backend.name} cannot exclude nodes: nothing is "
                                                   f"quarantined on target {target}"})]
    nodes = list(backend.attempt_nodes(st)) if st is not None else []
    if not nodes:
        return [("node_fault_unplaced", {"attempt": latest.attempt, "why": why,
                                         "reason": "the scheduler did not say which nodes the attempt had"})]
    return _blame(app, target, nodes, job.job_id, latest.attempt, why, spec, now)


def _blame(app: AppContext, target: str, nodes: list, job_id: str, attempt: int, why: str, spec, now: float) -> list:
    rule = spec.recovery.bad_nodes
    blamed, made = blame(app.store, target, nodes, job_id, attempt, why, now, after=rule.after,
                         window=rule.window, quarantine_s=rule.quarantine)
    if not blamed:  # that attempt blamed them already (decided on again after a resubmission failed)
        return []
    events = [("node_blamed", {"attempt": attempt, "target": target, "nodes": blamed, "why": why})]
    events += [("node_quarantined", {"target": q.target, "node": q.node, "until": q.expires, "blames": q.blames,
                                     "reason": q.reason}) for q in made]
    return events


def blame_run(app: AppContext, row, attempt: int, run: dict, now: float) -> list:
    """Blame the nodes of a run of ROW's job that the scheduler restarted in place (Slurm's requeue
    after a node failure: RUN, one entry of ``Scheduler.run_history``, which was ATTEMPT) when it
    ended NODE_FAIL: the events to record, as ``record`` gives them ([] for any other run)."""
    if run.get("state") != JobState.NODE_FAIL.value or not run.get("nodes"):
        return []
    try:
        backend = app.backend_class(row.target)
    except LauncherError:
        return []
    if not can(backend, ExcludesNodes):
        return []
    nodes = list(backend.attempt_nodes(Status(JobState.NODE_FAIL, nodes=run["nodes"])))
    if not nodes:
        return []
    return _blame(app, row.target, nodes, row.job_id, attempt, "the scheduler says NODE_FAIL (restarted in place)",
                  job_spec(row), now)
