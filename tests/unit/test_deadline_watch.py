"""launcher.recovery.deadline: what one `watch` step does for a job with ``cost.deadline``.

The state store is the real one (SQLite in tmp); the backends are test doubles that implement
whole protocols of ``launcher.backend.protocols`` (a cloud: Backend + Pricing; a Slurm-like
cluster: Backend + Pricing + Scheduler), registered through an entry-point double, so the step
runs the real planner (``gather_offers``, measured queue waits), the real submission protocol
(``resubmit`` under the job's claim) and the real observations (a preempted region cools down).
The clock is the test's: the job's creation plus the hours each case needs.

Targets: ``spot`` (spot in regions east $1/h and west $1.5/h), ``od`` (on-demand, east, $3/h),
``cluster`` (a Slurm queue at $2/h whose queue wait the test sets). The job: 10 h of work
(``resources.expected_runtime``), 100 steps, deadline 14 h after its submission, restart
overhead 0.5 h (measured from its first attempt).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import pytest
import yaml

from launcher.api.context import App
from launcher.backend.protocols import (Backend, ChoosesPlacement, Facts, Handle, Pricing, QueueEstimate, Request,
                                        Scheduler, can)
from launcher.backend.registry import Registry
from launcher.core.status import JobState, Status
from launcher.plan.offers import Offer
from launcher.recovery import deadline as live

H = 3600.0
WORK_H, DEADLINE_H, OVERHEAD_H = 10.0, 14.0, 0.5


# ---- test doubles ------------------------------------------------------------------------------

class _Scheduled:
    """What every double does with jobs: keeps them in a class-level list (the "scheduler")."""

    name: ClassVar[str] = "?"
    target_options: ClassVar = None
    install_hint: ClassVar[str] = "nothing to install (a test double)"
    price_section: ClassVar[Optional[str]] = None
    price_options: ClassVar = None
    submitted: ClassVar[list] = []    # (target, Request, Handle); shared: the test reads one list
    cancelled: ClassVar[list] = []    # native ids

    def __init__(self, target, app):
        self.target, self.app = target, app

    def probe(self) -> Facts:
        return Facts(self.target.name, self.name, {})

    def render(self, spec, facts, job) -> Request:
        return Request(self.name, self.target.name, job, f"run {spec.name} attempt {job.attempt}",
                       meta={"avoid": list(job.avoid)})

    def submit(self, request: Request) -> Handle:
        native = f"{self.target.name}-{len(_Scheduled.submitted) + 1}"
        h = Handle(self.name, self.target.name, request.job.job_id, native, request.job.attempt,
                   {"avoid": list(request.job.avoid)})
        _Scheduled.submitted.append((self.target.name, request, h))
        return h

    def status(self, handles):
        return [Status(JobState.PENDING) for _ in handles]

    def cancel(self, handle: Handle) -> None:
        _Scheduled.cancelled.append(handle.native_id)

    def cancel_many(self, handles):
        for h in handles:
            self.cancel(h)
        return {}

    def logs(self, handle, follow=False, done=None):
        return iter(())

    def find(self, job):
        return None  # no earlier submission of this attempt: the fence then submits

    def close(self) -> None:
        pass

    @classmethod
    def merge_prices(cls, merged, section, source):
        raise NotImplementedError("no price section")

    @classmethod
    def _offer(cls, context, region, spot, price, kind="", wait=0.0) -> Offer:
        return Offer(backend=cls.name, target=context.target, cloud=cls.name, region=region, zone=None,
                     instance_type="vm", accelerator=None, accelerator_count=1, vcpus=None, memory_gib=None,
                     spot=spot, hourly_usd=price, preemption_rate=0.1 if spot else 0.0, queue_wait_hours=wait,
                     kind=kind, rate_source="catalog", restart_hours=OVERHEAD_H)


class Cloud(_Scheduled):
    """Spot regions (option ``spot: true``) or on-demand in region east; prices from PRICES."""

    name: ClassVar[str] = "dlcloud"
    PRICES: ClassVar[dict] = {}

    @classmethod
    def offers(cls, spec, context) -> list:
        spot = bool(context.options.get("spot"))
        return [cls._offer(context, r, spot, p) for r, p in cls.PRICES[spot].items()]

    @classmethod
    def offer_key(cls, target, handle_extra, status_extra):
        region = status_extra.get("region") or handle_extra.get("region")
        return (cls.name, region, "", "vm", bool(handle_extra.get("spot"))) if region else None


class Cluster(_Scheduled):
    """A Slurm-like queue: its offer is kind "queue", priced $2/h, waiting what WAIT_H says
    (measured through ``Scheduler.queue_wait``, as `watch` measures a real cluster's)."""

    name: ClassVar[str] = "dlslurm"
    WAIT_H: ClassVar[float] = 0.25

    @classmethod
    def offers(cls, spec, context) -> list:
        wait = float(context.queue_waits.get(context.target, 99.0))
        return [cls._offer(context, None, False, 2.0, kind="queue", wait=wait)]

    @classmethod
    def offer_key(cls, target, handle_extra, status_extra):
        return None

    def queue_wait(self, spec, exclude_job=None):
        return QueueEstimate(type(self).WAIT_H, "test double", queue="")

    def find_many(self, jobs):
        return {}

    def run_history(self, handle):
        return []

    @classmethod
    def run_of(cls, scheduler):
        return None

    @classmethod
    def runs_arrays(cls, options):
        return False

    @classmethod
    def array_of(cls, native_id):
        raise NotImplementedError

    @classmethod
    def element_native_id(cls, array_id, index):
        raise NotImplementedError


class EntryPoint:
    """An entry point of the ``launcher.backends`` group, naming a class of this module."""

    def __init__(self, cls):
        self.name, self.value, self.group, self._cls = cls.name, f"{__name__}:{cls.__name__}", "launcher.backends", cls

    def load(self):
        return self._cls


def test_the_doubles_implement_the_whole_protocols():
    assert can(Cloud(None, None), Backend) and can(Cloud, Pricing) and not can(Cloud, Scheduler)
    assert can(Cluster(None, None), Backend) and can(Cluster, Pricing) and can(Cluster(None, None), Scheduler)


# ---- a job --------------------------------------------------------------------------------------

SPEC = {"name": "dl", "run": "true", "resources": {"nodes": 1, "gpus_per_node": 1, "expected_runtime": "10h"},
        "targets": ["spot", "od", "cluster"], "cost": {"deadline": "14h", "total_steps": 100},
        "recovery": {"placement_cooldown": "1h"}}


@pytest.fixture
def app(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"targets": {"spot": {"backend": "dlcloud", "spot": True},
                                               "od": {"backend": "dlcloud"},
                                               "cluster": {"backend": "dlslurm"}}}))
    Cloud.PRICES = {True: {"east": 1.0, "west": 1.5}, False: {"east": 3.0}}
    Cluster.WAIT_H = 99.0  # by default the queue is too long to matter
    _Scheduled.submitted, _Scheduled.cancelled = [], []
    a = App(config_path=cfg, home=tmp_path / "home", registry=Registry([EntryPoint(Cloud), EntryPoint(Cluster)]))
    yield a
    a.close()
    a.store.close()


def _spec(app, **cost):
    from launcher.backend.sections import parse_spec

    data = {**SPEC, "cost": {**SPEC["cost"], **cost}}
    return parse_spec(data), yaml.safe_dump(data)


def job_on(app, target, region, *, done_steps=0, state=JobState.RUNNING, **cost):
    """A job submitted at its creation to TARGET/REGION, started OVERHEAD_H later (so the
    measured restart overhead is OVERHEAD_H), with DONE_STEPS committed."""
    spec, text = _spec(app, **cost)
    store = app.store
    store.begin_job("j1", "dl", target, app.config.raw_target(target)["backend"], None, text)
    job = store.get_job("j1")
    backend = app.config.raw_target(target)["backend"]
    h = Handle(backend, target, "j1", "n1", 1, {"region": region, "spot": target == "spot"})
    store.record_attempt("j1", 1, target, h.to_json(), "n1", state=state.value)
    store.update_attempt("j1", 1, submitted=job.created, started=job.created + OVERHEAD_H * H)
    store.update_job("j1", last_step=done_steps)
    return spec


def step(app, spec, hours, state=JobState.RUNNING, extra=None):
    """One watch step at HOURS after the job's creation; an ended attempt ended then."""
    job = app.store.get_job("j1")
    now = job.created + hours * H
    end = now if state.is_terminal else None
    return live.step(app, job, spec, Status(state, end_time=end, extra=extra or {}), clock=lambda: now)


def events(app, kind):
    return [e for e in app.store.events("j1") if e["kind"] == kind]


# ---- holding, riding, moving ------------------------------------------------------------------------

def test_a_job_riding_the_cheapest_spot_is_left_alone_and_the_decision_recorded_once(app):
    spec = job_on(app, "spot", "east", done_steps=20)
    assert step(app, spec, 2.0) is None and step(app, spec, 2.1) is None
    (ev,) = events(app, "deadline")   # recorded when the placement or the reason changes, not every tick
    assert (ev["placement"], ev["held"], ev["reason"]) == ("spot:spot/east", "spot:spot/east", "riding spot")
    assert ev["done_h"] == pytest.approx(2.0) and ev["overhead_h"] == pytest.approx(OVERHEAD_H)
    assert ev["slack_h"] == pytest.approx(DEADLINE_H - 2.0 - OVERHEAD_H - 8.0)
    assert _Scheduled.submitted == [] and app.store.latest_attempt("j1").attempt == 1


def test_a_running_spot_job_moves_to_a_cheaper_zone_when_the_saving_pays_for_the_restart(app):
    spec = job_on(app, "spot", "west", done_steps=20)   # on $1.5/h, east is $1/h
    out = step(app, spec, 2.0)
    assert out.action == "deadline_move" and "spot:spot/west -> spot:spot/east" in out.reason
    (target, request, handle), = _Scheduled.submitted
    assert target == "spot" and request.job.attempt == 2 and request.job.avoid == ("dlcloud/west",)
    assert _Scheduled.cancelled == ["n1"]                           # the copy it left
    a1, a2 = app.store.attempts("j1")
    assert (a1.state, a2.state, a2.target, a2.native_id) == ("CANCELLED", "PENDING", "spot", handle.native_id)
    (mv,) = events(app, "deadline_move")
    assert (mv["frm"], mv["to"], mv["price"], mv["attempt"]) == ("spot:spot/west", "spot:spot/east", 1.0, 2)
    assert mv["overhead_h"] == pytest.approx(OVERHEAD_H) and mv["cancelled_native_id"] == "n1"
    # the next step knows where attempt 2 was put (the job's meta), so it is not moved again
    assert app.store.get_job("j1").meta["deadline"]["placements"] == {"2": "spot:spot/east"}
    assert step(app, spec, 2.1) is None and len(_Scheduled.submitted) == 1


def test_a_small_saving_does_not_pay_for_a_restart(app):
    Cloud.PRICES[True] = {"east": 1.0, "west": 1.04}
    spec = job_on(app, "spot", "west", done_steps=20)
    assert step(app, spec, 2.0) is None and _Scheduled.submitted == []


def test_a_preempted_job_with_slack_to_spare_waits_for_spot_and_submits_nothing(app):
    Cloud.PRICES[True] = {"east": 1.0}
    spec = job_on(app, "spot", "east", done_steps=20, state=JobState.PREEMPTED)
    out = step(app, spec, 2.0, JobState.PREEMPTED, {"region": "east"})
    assert out.action == "deadline_wait" and "waiting" in out.reason
    assert _Scheduled.submitted == []
    (ev,) = events(app, "deadline")
    assert ev["placement"] == "wait" and ev["held"] == "wait"


def test_a_preempted_job_behind_the_reserve_goes_to_on_demand(app):
    # 8 h of work left at 5 h: slack 14 - 5 - 0.5 - 8 = 0.5 h, under the reserve
    Cloud.PRICES[True] = {"east": 1.0}
    spec = job_on(app, "spot", "east", done_steps=20, state=JobState.PREEMPTED)
    out = step(app, spec, 5.0, JobState.PREEMPTED, {"region": "east"})
    assert out.action == "deadline_move" and "-> on_demand:od/east" in out.reason
    (target, request, _), = _Scheduled.submitted
    assert target == "od" and request.job.attempt == 2
    assert _Scheduled.cancelled == []          # a preempted attempt has no copy left to cancel
    (ev,) = events(app, "deadline")
    assert ev["placement"] == "on_demand:od/east" and "behind the reserve" in ev["reason"]


def test_the_safety_net_takes_on_demand_when_spot_could_no_longer_be_fallen_back_from(app):
    # preempted at 5.499 h with 8 h left: on-demand now finishes at 13.999 h <= 14, but
    # a spot start (east is up again) that vanished a tick later would not: the net says on-demand
    spec = job_on(app, "spot", "west", done_steps=20, state=JobState.PREEMPTED)
    out = step(app, spec, 5.499, JobState.PREEMPTED, {"region": "west"})
    assert out.action == "deadline_move" and "-> on_demand:od/east" in out.reason
    (ev,) = events(app, "deadline")
    assert ev["reason"].startswith("safety net: only a guaranteed offer") and ev["would"] == "spot:spot/east"


def test_on_demand_returns_to_spot_once_the_job_is_ahead(app):
    spec = job_on(app, "od", "east", done_steps=50)   # 5 h left at 4 h: far ahead
    out = step(app, spec, 4.0)
    assert out.action == "deadline_move" and "on_demand:od/east -> spot:spot/east" in out.reason
    (target, _, _), = _Scheduled.submitted
    assert target == "spot" and _Scheduled.cancelled == ["n1"]
    (ev,) = events(app, "deadline")
    assert ev["reason"] == "ahead of the reserve: back to spot"


def test_on_demand_stays_while_behind_and_no_decision_changes_it(app):
    spec = job_on(app, "od", "east", done_steps=20)   # 8 h left at 5.2 h
    assert step(app, spec, 5.2) is None and _Scheduled.submitted == []
    (ev,) = events(app, "deadline")
    assert ev["placement"] == ev["held"] == "on_demand:od/east"


# ---- a Slurm target as the destination -------------------------------------------------------------

def test_a_slurm_target_whose_queue_wait_fits_is_the_fallback_and_the_job_is_moved_there(app):
    # cheaper than on-demand ($2/h vs $3/h); its measured wait 0.25 h still fits:
    # 5 + 0.5 + 0.25 + 8 = 13.75 <= 14
    Cluster.WAIT_H = 0.25
    Cloud.PRICES[True] = {"east": 1.0}
    spec = job_on(app, "spot", "east", done_steps=20, state=JobState.PREEMPTED)
    out = step(app, spec, 5.0, JobState.PREEMPTED, {"region": "east"})
    assert out.action == "deadline_move" and "-> queue:cluster" in out.reason
    (target, request, handle), = _Scheduled.submitted
    assert target == "cluster" and handle.backend == "dlslurm" and request.job.attempt == 2
    (mv,) = events(app, "deadline_move")
    assert (mv["to"], mv["price"]) == ("queue:cluster", 2.0)
    a2 = app.store.latest_attempt("j1")
    assert (a2.attempt, a2.target) == (2, "cluster")
    assert app.store.get_job("j1").meta["deadline"]["placements"] == {"2": "queue:cluster"}
    # queued there: the next step sees its placement and leaves it (what is left of the start
    # counts; nothing is resubmitted)
    assert step(app, spec, 5.1, JobState.PENDING) is None and len(_Scheduled.submitted) == 1


def test_a_slurm_target_whose_queue_wait_does_not_fit_is_passed_over_for_on_demand(app):
    Cluster.WAIT_H = 0.75    # 5 + 0.5 + 0.75 + 8 = 14.25 > 14
    Cloud.PRICES[True] = {"east": 1.0}
    spec = job_on(app, "spot", "east", done_steps=20, state=JobState.PREEMPTED)
    out = step(app, spec, 5.0, JobState.PREEMPTED, {"region": "east"})
    assert "-> on_demand:od/east" in out.reason
    (target, _, _), = _Scheduled.submitted
    assert target == "od"


def test_a_slurm_job_is_moved_back_to_spot_when_ahead(app):
    Cluster.WAIT_H = 0.25
    spec = job_on(app, "cluster", None, done_steps=50)
    out = step(app, spec, 4.0)
    assert "queue:cluster -> spot:spot/east" in out.reason and _Scheduled.cancelled == ["n1"]


def test_a_queue_placement_an_earlier_version_stored_as_slurm_is_read_as_the_queue(app):
    # before issue 34 the queue kind was spelt "slurm" in the job's meta
    Cluster.WAIT_H = 0.25
    spec = job_on(app, "cluster", None, done_steps=50)
    app.store.patch_meta("j1", deadline={"placements": {"1": "slurm:cluster"}})
    out = step(app, spec, 4.0)
    assert "queue:cluster -> spot:spot/east" in out.reason and _Scheduled.cancelled == ["n1"]


# ---- what the step leaves to the ordinary recovery ---------------------------------------------------

def test_other_ends_and_jobs_without_a_deadline_are_left_to_the_ordinary_recovery(app):
    spec = job_on(app, "spot", "east", done_steps=20, state=JobState.FAILED)
    assert step(app, spec, 2.0, JobState.FAILED) is None
    assert step(app, spec, 2.0, JobState.COMPLETED) is None
    nodl = spec.model_copy(update={"cost": spec.cost.model_copy(update={"deadline": None})})
    assert step(app, nodl, 2.0) is None
    assert events(app, "deadline") == [] and _Scheduled.submitted == []


def test_the_restart_overhead_is_measured_from_the_jobs_own_attempts():
    class A:
        def __init__(self, submitted, started):
            self.submitted, self.started = submitted, started

    assert live.measured_overhead_h([]) is None
    assert live.measured_overhead_h([A(0.0, None)]) is None
    assert live.measured_overhead_h([A(1000.0, 2800.0), A(5000.0, 5000.0 + 3600.0)]) == pytest.approx(0.75)


# ---- egress and the zone cooldown (issue 32) ---------------------------------------------------------

def test_a_move_that_does_not_pay_for_moving_the_checkpoint_is_not_made_and_an_unknown_pair_is_named(
        app, monkeypatch):
    rates = {("east", "west"): (0.02, "test table"), ("west", "east"): None}   # west -> east: not in the table
    monkeypatch.setattr(Cloud, "egress_per_gb", classmethod(lambda cls, c, a, b: rates.get((a, b))), raising=False)
    monkeypatch.setattr(Cloud, "egress_highest", classmethod(lambda cls, c: (0.05, "test highest")), raising=False)
    monkeypatch.setattr(live, "_committed_gb", lambda job: 100.0)   # $5 at the highest rate
    spec = job_on(app, "spot", "west", done_steps=20)   # on $1.5/h, east is $1/h: $3 saved over 6 h
    assert step(app, spec, 2.0) is None and _Scheduled.submitted == []
    (ev,) = events(app, "deadline")
    assert ev["placement"] == "spot:spot/west" and ev["egress_unknown"] == ["dlcloud:west->east"]
    monkeypatch.setattr(live, "_committed_gb", lambda job: 10.0)    # $0.5: pays
    assert step(app, spec, 2.1).action == "deadline_move"


def _checkpoint(root, step, files, commit_it=True):
    """Write FILES ({relative path: bytes}) as ROOT's step STEP (generation 1), committed or not."""
    import os

    from launcher.checkpoint import commit, open_store, step_dir

    d = os.path.join(str(root), step_dir(step, 1))
    for rel, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
        with open(os.path.join(d, rel), "wb") as f:
            f.write(data)
    if commit_it:
        commit(open_store(str(root)), step, 1, fence=False)


def test_the_size_moved_is_the_last_committed_checkpoints_from_its_manifest(app, monkeypatch, tmp_path):
    root = tmp_path / "ckpt"
    _checkpoint(root, 10, {"model.bin": b"m" * 100_000})
    _checkpoint(root, 20, {"model.bin": b"m" * 123_456, "opt/state.bin": b"o" * 1_000})
    _checkpoint(root, 30, {"model.bin": b"x" * 500_000}, commit_it=False)   # being written: not moved
    spec = job_on(app, "spot", "west", done_steps=20)   # on $1.5/h, east is $1/h: $3 saved over 6 h
    app.store.update_job("j1", ckpt_root=str(root))
    assert live._committed_gb(app.store.get_job("j1")) == pytest.approx(124_456 / 1e9)
    # the decision prices that size: at $50,000/GB it is $6.22 to move, more than the move saves
    monkeypatch.setattr(Cloud, "egress_per_gb", classmethod(lambda cls, c, a, b: (50_000.0, "test")), raising=False)
    monkeypatch.setattr(Cloud, "egress_highest", classmethod(lambda cls, c: (50_000.0, "test")), raising=False)
    assert step(app, spec, 2.0) is None and _Scheduled.submitted == []
    (ev,) = events(app, "deadline")
    assert ev["placement"] == "spot:spot/west"
    app.store.update_job("j1", ckpt_root=None)          # no checkpoint root: nothing to move, so it moves
    assert step(app, spec, 2.1).action == "deadline_move"


def test_a_move_to_another_region_takes_the_checkpoints_size_over_the_transfer_rate(app):
    spec, _ = _spec(app)
    places = live.live_offers(app, spec, 0.0)
    moved, _ = live.egress_offers(app, places, ("dlcloud", "west"), 45.0, gbps=2.0)
    assert moved["spot:spot/east"][0].move_h == pytest.approx(45.0 * 8 / 2.0 / 3600)   # 0.05 h
    assert moved["on_demand:od/east"][0].move_h == pytest.approx(0.05)
    assert moved["spot:spot/west"][0].move_h == 0.0                  # where the checkpoint is
    assert moved["queue:cluster"][0].move_h == 0.0                   # a queue names no region
    default, _ = live.egress_offers(app, places, ("dlcloud", "west"), 45.0)
    assert default["spot:spot/east"][0].move_h == pytest.approx(45.0 * 8 / live.DEFAULT_TRANSFER_GBPS / 3600)
    assert live.egress_offers(app, places, ("dlcloud", "west"), 0.0)[0] is places   # nothing to move


def test_a_quick_transfer_leaves_a_move_that_pays(app, monkeypatch):
    monkeypatch.setattr(live, "_committed_gb", lambda job: 10.0)
    spec = job_on(app, "spot", "west", done_steps=20, transfer_gbps=10.0)   # 8 s of transfer: moves
    assert step(app, spec, 2.0).action == "deadline_move"


def test_a_slow_transfer_keeps_the_job_where_its_checkpoint_is(app, monkeypatch):
    monkeypatch.setattr(live, "_committed_gb", lambda job: 10.0)
    # 10 GB at 0.0001 Gbit/s is 222 h: no saving pays for that, and the slack could not either
    spec = job_on(app, "spot", "west", done_steps=20, transfer_gbps=0.0001)
    assert step(app, spec, 2.0) is None and _Scheduled.submitted == []
    (ev,) = events(app, "deadline")
    assert ev["placement"] == "spot:spot/west"


def test_the_cooldown_after_a_preemption_is_the_zones_not_the_regions():
    cooling = {("aws", "us-east-1", "us-east-1a", "p3", True)}
    assert live.cooled(("aws", "us-east-1", "us-east-1a", "p3", True), cooling)
    assert not live.cooled(("aws", "us-east-1", "us-east-1b", "p3", True), cooling)
    # an observation that knew only the region cools every zone of it
    region_wide = {("aws", "us-east-1", "", "p3", True)}
    assert live.cooled(("aws", "us-east-1", "us-east-1b", "p3", True), region_wide)
    assert not live.cooled(("aws", "us-east-2", "us-east-2a", "p3", True), region_wide)


def test_a_region_stays_available_while_one_of_its_zones_is_not_cooling(app, monkeypatch):
    def zoned(cls, spec, context):
        spot = bool(context.options.get("spot"))
        out = []
        for r, p in cls.PRICES[spot].items():
            for z in ("a", "b"):
                o = cls._offer(context, r, spot, p)
                out.append(dataclasses.replace(o, zone=f"{r}-{z}"))
        return out
    monkeypatch.setattr(Cloud, "offers", classmethod(zoned))
    monkeypatch.setattr(live, "_cooling", lambda store, now, s: {("dlcloud", "east", "east-a", "vm", True)})
    spec, _ = _spec(app)
    places = live.live_offers(app, spec, 0.0)
    assert places["spot:spot/east"][0].available and places["spot:spot/east"][1].zone == "east-b"
    monkeypatch.setattr(live, "_cooling", lambda store, now, s: {("dlcloud", "east", "east-a", "vm", True),
                                                                  ("dlcloud", "east", "east-b", "vm", True)})
    assert not live.live_offers(app, spec, 0.0)["spot:spot/east"][0].available



def test_the_checkpoint_moves_from_the_newest_attempt_that_started_not_the_last_submitted(app, monkeypatch):
    # attempt 1 ran in west; attempt 2 was moved to east and refused there before it ever started
    spec = job_on(app, "spot", "west", done_steps=20)
    store = app.store
    h2 = Handle("dlcloud", "spot", "j1", "n2", 2, {"region": "east", "spot": True})
    store.record_attempt("j1", 2, "spot", h2.to_json(), "n2", state=JobState.NO_CAPACITY.value)
    store.patch_meta("j1", deadline={"placements": {"2": "spot:spot/east"}})
    places = live.live_offers(app, spec, 0.0)
    job = store.get_job("j1")
    assert live._ran_in(job, store.attempts("j1"), places) == ("dlcloud", "west")
    seen = []
    real = live.egress_offers
    monkeypatch.setattr(live, "egress_offers", lambda app_, pl, src, *a: seen.append(src) or real(app_, pl, src, *a))
    step(app, spec, 2.0, JobState.NO_CAPACITY, {"region": "east"})
    assert seen == [("dlcloud", "west")]
    # once attempt 2 starts in east, that is where the checkpoint is
    store.update_attempt("j1", 2, submitted=job.created + H, started=job.created + 1.5 * H)
    assert live._ran_in(job, store.attempts("j1"), places) == ("dlcloud", "east")
    # no attempt started yet: the first start moves nothing
    store.update_attempt("j1", 1, started=None)
    store.update_attempt("j1", 2, started=None)
    assert live._ran_in(job, store.attempts("j1"), places) is None


def _zones(prices):
    """An offers() for Cloud whose spot regions have zones priced PRICES[region][zone]."""
    def zoned(cls, spec, context):
        spot = bool(context.options.get("spot"))
        if not spot:
            return [cls._offer(context, r, False, p) for r, p in cls.PRICES[False].items()]
        return [dataclasses.replace(cls._offer(context, r, True, p), zone=z)
                for r, zs in prices.items() for z, p in zs.items()]
    return classmethod(zoned)


def test_a_region_is_priced_at_its_cheapest_available_zone(app, monkeypatch):
    monkeypatch.setattr(Cloud, "offers", _zones({"east": {"east-a": 1.2, "east-b": 1.0, "east-c": 1.1}}))
    monkeypatch.setattr(live, "_cooling", lambda store, now, s: set())
    spec, _ = _spec(app)
    offer, planned = live.live_offers(app, spec, 0.0)["spot:spot/east"]
    assert (offer.price, planned.zone) == (1.0, "east-b")
    monkeypatch.setattr(live, "_cooling", lambda store, now, s: {("dlcloud", "east", "east-b", "vm", True)})
    offer, planned = live.live_offers(app, spec, 0.0)["spot:spot/east"]
    assert (offer.price, planned.zone, offer.available) == (1.1, "east-c", True)

# ---- a deadline job launched on this machine (issue 32 item 3) -----------------------------------

class Here(_Scheduled):
    """This machine: one free offer of kind "local" (as the built-in local backend's)."""

    name: ClassVar[str] = "dlhere"

    @classmethod
    def offers(cls, spec, context) -> list:
        return [cls._offer(context, None, False, 0.0, kind="local")]

    @classmethod
    def offer_key(cls, target, handle_extra, status_extra):
        return None


def test_a_job_launched_on_this_machine_is_never_moved_by_the_policy(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"targets": {"spot": {"backend": "dlcloud", "spot": True},
                                               "od": {"backend": "dlcloud"}, "cluster": {"backend": "dlslurm"},
                                               "here": {"backend": "dlhere"}}}))
    Cloud.PRICES = {True: {"east": 1.0, "west": 1.5}, False: {"east": 3.0}}
    Cluster.WAIT_H = 99.0
    _Scheduled.submitted, _Scheduled.cancelled = [], []
    a = App(config_path=cfg, home=tmp_path / "home",
            registry=Registry([EntryPoint(Cloud), EntryPoint(Cluster), EntryPoint(Here)]))
    try:
        spec = job_on(a, "here", None, done_steps=20)   # spot at $1/h is up: it would be moved there
        assert live.on_this_machine(a, spec, "here") and not live.on_this_machine(a, spec, "spot")
        assert step(a, spec, 2.0) is None and step(a, spec, 3.0, state=JobState.PREEMPTED) is None
        assert _Scheduled.submitted == [] and _Scheduled.cancelled == [] and events(a, "deadline") == []
        # the same job on a spot target is the policy's (the double is not what kept it still)
        a.store.update_attempt("j1", 1, target="spot")
        step(a, spec, 4.0)
        assert [e["held"] for e in events(a, "deadline")] == ["spot:spot/east"]
    finally:
        a.close()
        a.store.close()


# ---- a move through SkyPilot's own placement filter (issue 32: the move is held to its region) ---------

class Sky(Cloud):
    """A SkyPilot-shaped cloud: it chooses among the planner's ranked candidates
    (``ChoosesPlacement``: ``launcher.launching.submission.facts_for`` hands them over) and keeps
    off ``JobRef.avoid`` with the real SkyPilot filter (``backends/skypilot/placement.py``). Its
    spot offers name real clouds, regions and zones: ZONES, {(cloud, region): {zone: $/h}}."""

    name: ClassVar[str] = "dlsky"
    ZONES: ClassVar[dict] = {}

    @classmethod
    def offers(cls, spec, context) -> list:
        return [dataclasses.replace(cls._offer(context, r, True, p), cloud=c, zone=z, accelerator="V100")
                for (c, r), zones in cls.ZONES.items() for z, p in zones.items()]

    @classmethod
    def offer_key(cls, target, handle_extra, status_extra):
        return None

    @staticmethod
    def with_candidates(facts, candidates):
        return dataclasses.replace(facts, data={**facts.data, "candidates": list(candidates)})

    def render(self, spec, facts, job) -> Request:
        from launcher_backends.skypilot.placement import ranked_placements, without_avoided

        kept = without_avoided(ranked_placements(facts.get("candidates")), job.avoid)
        return Request(self.name, self.target.name, job, f"run {spec.name} attempt {job.attempt}",
                       meta={"avoid": list(job.avoid), "placements": [p.full_infra for p in kept]})


@pytest.fixture
def sky_app(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"targets": {"sky": {"backend": "dlsky"}, "od": {"backend": "dlcloud"}}}))
    Cloud.PRICES = {True: {}, False: {"east": 3.0}}
    _Scheduled.submitted, _Scheduled.cancelled = [], []
    a = App(config_path=cfg, home=tmp_path / "home", registry=Registry([EntryPoint(Cloud), EntryPoint(Sky)]))
    yield a
    a.close()
    a.store.close()


def _sky_job(app, region):
    data = {**SPEC, "targets": ["sky", "od"]}
    text = yaml.safe_dump(data)
    app.store.begin_job("j1", "dl", "sky", "dlsky", None, text)
    job = app.store.get_job("j1")
    h = Handle("dlsky", "sky", "j1", "n1", 1, {"region": region, "spot": True})
    app.store.record_attempt("j1", 1, "sky", h.to_json(), "n1", state="RUNNING")
    app.store.update_attempt("j1", 1, submitted=job.created, started=job.created + OVERHEAD_H * H)
    app.store.update_job("j1", last_step=20)
    from launcher.backend.sections import parse_spec
    return parse_spec(data)


def test_a_move_on_skypilot_lands_in_the_chosen_region_off_its_cooling_zone(sky_app, monkeypatch):
    assert can(Sky(None, None), ChoosesPlacement)
    Sky.ZONES = {("gcp", "us-east4"): {"us-east4-a": 1.0, "us-east4-b": 1.0},
                 ("gcp", "us-west1"): {"us-west1-a": 1.5, "us-west1-b": 1.5}}
    spec = _sky_job(sky_app, "us-west1")            # on $1.5/h, us-east4 is $1/h: moved there
    out = step(sky_app, spec, 2.0)
    assert out.action == "deadline_move" and "-> spot:sky/us-east4" in out.reason
    (target, request, _), = _Scheduled.submitted
    # the candidates SkyPilot fails over among are the chosen region's zones, none of us-west1
    assert sorted(request.meta["placements"]) == ["gcp/us-east4/us-east4-a", "gcp/us-east4/us-east4-b"]
    assert target == "sky" and request.meta["avoid"] == ["gcp/us-west1"]


def test_a_move_on_skypilot_keeps_off_the_zone_that_preempted_where_placements_name_zones(sky_app, monkeypatch):
    Sky.ZONES = {("gcp", "us-east4"): {"us-east4-a": 1.0, "us-east4-b": 1.0},
                 ("gcp", "us-west1"): {"us-west1-a": 1.5}}
    monkeypatch.setattr(live, "_cooling", lambda store, now, s: {("gcp", "us-east4", "us-east4-a", "vm", True)})
    spec = _sky_job(sky_app, "us-west1")
    assert "-> spot:sky/us-east4" in step(sky_app, spec, 2.0).reason   # us-east4 is up: us-east4-b is
    (_, request, _), = _Scheduled.submitted
    assert request.meta["placements"] == ["gcp/us-east4/us-east4-b"]
    assert request.meta["avoid"] == ["gcp/us-west1", "gcp/us-east4/us-east4-a"]


def test_a_move_on_skypilot_to_an_aws_region_avoids_the_others_and_lets_skypilot_pick_the_zone(sky_app, monkeypatch):
    # AWS catalog zones are zone IDs, which a SkyPilot placement cannot name (Offer.placement):
    # the move keeps off the other regions; a zone entry there would drop the chosen region too
    Sky.ZONES = {("aws", "us-east-1"): {"use1-az1": 1.0, "use1-az2": 1.0}, ("aws", "us-west-2"): {"usw2-az1": 1.5}}
    monkeypatch.setattr(live, "_cooling", lambda store, now, s: {("aws", "us-east-1", "use1-az1", "vm", True)})
    spec = _sky_job(sky_app, "us-west-2")
    assert "-> spot:sky/us-east-1" in step(sky_app, spec, 2.0).reason
    (_, request, _), = _Scheduled.submitted
    assert request.meta["placements"] == ["aws/us-east-1", "aws/us-east-1"]
    assert request.meta["avoid"] == ["aws/us-west-2"]


def test_skypilots_filter_drops_a_zone_where_placements_name_it_and_the_region_where_they_do_not():
    from launcher_backends.skypilot.options import Placement
    from launcher_backends.skypilot.placement import without_avoided

    def kept(infras, avoid):
        return [p.full_infra for p in without_avoided([Placement(infra=i, use_spot=True) for i in infras], avoid)]

    aws = ["aws/us-east-1", "aws/us-west-2"]
    assert kept(aws, ["aws/us-west-2/usw2-az1"]) == ["aws/us-east-1"]     # the zone may be any of the region's
    assert kept(aws, ["AWS/us-west-2"]) == ["aws/us-east-1"]
    gcp = ["gcp/us-east4/us-east4-a", "gcp/us-east4/us-east4-b", "gcp/us-west1/us-west1-a"]
    assert kept(gcp, ["gcp/us-east4/us-east4-a"]) == gcp[1:]
    assert kept(gcp, ["gcp/us-east4"]) == gcp[2:]
    assert kept(["runpod", "kubernetes/ctx"], ["kubernetes/ctx/x"]) == ["runpod", "kubernetes/ctx"]
    with pytest.raises(Exception, match="cooling down"):
        kept(aws, ["aws/us-east-1/use1-az1", "aws/us-west-2"])


def test_a_move_on_skypilot_lands_in_the_cheapest_zone_of_the_chosen_region(sky_app, monkeypatch):
    Sky.ZONES = {("gcp", "us-east4"): {"us-east4-a": 1.1, "us-east4-b": 1.0, "us-east4-c": 1.0},
                 ("gcp", "us-west1"): {"us-west1-a": 1.5}}
    spec = _sky_job(sky_app, "us-west1")
    assert "-> spot:sky/us-east4" in step(sky_app, spec, 2.0).reason
    (_, request, _), = _Scheduled.submitted
    # SkyPilot fails over only among the zones at the price the move was decided on
    assert sorted(request.meta["placements"]) == ["gcp/us-east4/us-east4-b", "gcp/us-east4/us-east4-c"]
    assert request.meta["avoid"] == ["gcp/us-west1", "gcp/us-east4/us-east4-a"]


def test_a_move_within_a_region_after_a_preemption_lands_in_its_cheapest_zone_not_cooling(sky_app, monkeypatch):
    # preempted in us-east4-b (cooling): the region stays available at its next cheapest zone, c
    Sky.ZONES = {("gcp", "us-east4"): {"us-east4-a": 1.2, "us-east4-b": 1.0, "us-east4-c": 1.1}}
    monkeypatch.setattr(live, "_cooling", lambda store, now, s: {("gcp", "us-east4", "us-east4-b", "vm", True)})
    spec = _sky_job(sky_app, "us-east4")
    sky_app.store.update_attempt("j1", 1, state="PREEMPTED")
    out = step(sky_app, spec, 2.0, JobState.PREEMPTED, {"region": "us-east4"})
    assert out.action == "deadline_move" and "-> spot:sky/us-east4" in out.reason
    (_, request, _), = _Scheduled.submitted
    assert request.meta["placements"] == ["gcp/us-east4/us-east4-c"]
    assert request.meta["avoid"] == ["gcp/us-east4/us-east4-a", "gcp/us-east4/us-east4-b"]
