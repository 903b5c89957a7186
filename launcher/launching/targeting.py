"""Before a launch submits: which target it goes to and what it would submit there.

``pick_target``: --target, else the planner's first row when the spec names several targets
(``plan_spec``, which is also ``launcher plan``; ``queue_waits`` measures the queues it ranks
with), else the spec's only target, else the default. ``render_for``: the Request a launch would
submit. ``launcher render`` needs these and not the modules of submitting and recording
(``launcher.launching.launch``), which imports them from here.
"""

from __future__ import annotations

from typing import Optional

from launcher.backend.context import AppContext
from launcher.backend.protocols import JobRef, Request, Scheduler, can
from launcher.backend.support import require_supported
from launcher.core.errors import LauncherError
from launcher.launching.submission import facts_for
from launcher.plan import egress, params_for, plan
from launcher.spec.model import JobSpec
from launcher.spec.secretenv import lift


def pick_target(app: AppContext, spec: JobSpec, explicit: Optional[str], note=None) -> str:
    """--target wins; with several targets in the spec the planner's first row does
    (cheapest expected cost to finish); else the spec's only target, else the default."""
    if explicit:
        return explicit
    if len(spec.targets) > 1:
        chosen = planned_target(app, spec, note)
        if chosen:
            return chosen
    if spec.targets:
        return spec.targets[0]
    return app.config.default_target()


def queue_waits(app: AppContext, spec: JobSpec, targets, note=None) -> dict:
    """{target: hours, (target, queue): hours} measured on every reachable target whose
    backend has a queue (Scheduler), for the planner."""
    out = {}
    for name in targets:
        try:
            if not can(app.backend_class(name), Scheduler):
                continue
            est = app.backend(name).queue_wait(spec)
        except LauncherError as e:
            if note:
                note(f"planner: queue wait on {name} not measured: {e}")
            continue
        if est is not None:
            if est.queue:
                out[(name, est.queue)] = est.hours
            out[name] = est.hours
    return out


def planned_target(app: AppContext, spec: JobSpec, note=None) -> Optional[str]:
    try:
        result = plan_spec(app, spec, targets=list(spec.targets), note=note)  # with the rates `launcher watch` learned
    except LauncherError as e:
        if note:
            note(f"planner: {e}; using the spec's first target")
        return None
    if result.best is None:
        if note:
            note("planner: no offer fits the spec and its budgets (see `launcher plan`); "
                 "using the spec's first target")
        return None
    best = result.best
    if note:
        note(f"planner: {best.offer.target} ranks first" + (f": {best.why}" if best.why else ""))
    return best.offer.target


def plan_spec(app: AppContext, spec: JobSpec, targets=None, params=None, live_spot: bool = False, queue: bool = True,
              note=None):
    """``launcher plan``: the offers of TARGETS (default: the spec's, else every configured
    one) ranked by expected cost, with the queue waits measured on the targets that have a queue
    (unless ``queue`` is false) and the rates `launcher watch` learned (when a state store exists).
    What could not be measured goes to NOTE when given, else into the result's notes. Under
    ``cost.deadline``, the region pairs among the ranked offers whose egress price the backends
    do not know (``launcher.plan.egress.unknown_pairs``)."""
    config = app.config
    names = list(targets or spec.targets or config.file.targets)
    configured = [n for n in names if n in config.file.targets]  # queue_waits asks the ones with a queue
    notes: list = []
    waits = queue_waits(app, spec, configured, note or notes.append) if queue else {}
    store = app.store if app.has_store() else None  # no store yet: nothing learned
    result = plan(spec, config, params or params_for(spec), targets=list(targets) if targets else None,
                  live_spot=live_spot, queue_waits=waits, store=store)
    if result.deadline is not None:
        registry = app.registry
        result = result.with_egress_unknown(egress.unknown_pairs(
            result.candidates(), lambda backend, cloud, src, dst: egress.rate(registry, backend, cloud, src, dst)))
    return result.with_notes(notes) if notes else result


def render_for(app: AppContext, spec: JobSpec, target_name: str, job: JobRef, shape=None) -> Request:
    """The Request a launch of SPEC on TARGET_NAME would submit. SHAPE (spec -> spec), when
    given, is applied once the spec is checked and its secret-looking env lifted: the caller's
    (``launcher.api.facade.Launcher.render``) way to render a sweep as its launch submits it."""
    require_supported(app, spec, target_name)  # a field the target cannot honour is an error, never dropped
    spec = lift(spec)[0]  # what launch submits: secret-looking env delivered as secrets
    if shape is not None:  # a sweep: what its launch submits (``launcher.sweep.elements.spec_to_render``)
        spec = shape(spec)
    return app.backend(target_name).render(spec, facts_for(app, spec, target_name), job)
