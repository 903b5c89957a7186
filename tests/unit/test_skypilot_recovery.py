"""The launcher's own recovery loop driving SkyPilot, over the stateful fake of the
SkyPilot client (pure logic: no cloud). Time is moved by hand."""

from __future__ import annotations

import pytest
import yaml

from launcher.api.context import App
from launcher.checkpoint import open_store, start_generation
from launcher.launching.launch import launch
from launcher.recovery import watch
from launcher.backend.sections import spec_from_text
from launcher_backends.skypilot.backend import SkyPilotBackend
from tests.fixtures.skypilot_fake import FakeSkyClient


class ResourcesUnavailableError(Exception):
    """Named like SkyPilot's: the backend maps it to NO_CAPACITY."""


class Clock:
    def __init__(self):
        self.t = 1_000_000.0

    def __call__(self):
        return self.t


@pytest.fixture
def rig(launcher_env, tmp_path):
    launcher_env["config"].write_text(yaml.safe_dump({"targets": {"sky": {
        "backend": "skypilot", "infra": "aws/us-east-1", "use_spot": True,
        "fallbacks": [{"infra": "aws/us-west-2", "use_spot": True}, {"infra": "aws/eu-west-1", "use_spot": True}]}}}))
    clock = Clock()
    fake = FakeSkyClient(clock=clock, auto_provision=False)
    app = App()
    app._backends["sky"] = SkyPilotBackend(app.target("sky"), app, client=fake)
    root = tmp_path / "ckpt"
    text = (f"name: spotty\nrun: python3 train.py\ncheckpoint: {{root: {root}}}\n"
            "recovery: {preemption: 2, no_capacity: 2, placement_cooldown: 30m}\n")
    spec = spec_from_text(text)
    yield app, fake, clock, spec, text, root
    app.close()


def first_region(task_text: str) -> str:
    task = yaml.safe_load(task_text)
    res = task["resources"]
    placements = res.get("ordered") or res.get("any_of") or [res]
    return placements[0]["infra"]


def job_starts(fake, root, commit_step=None, region="us-east-1"):
    """What the job does on the VM: provisioned, resolves its resume point (as the job side
    does: with its job id and attempt), commits."""
    req = fake.launches[-1].request_id
    fake.provision(req, cloud="AWS", region=region)
    env = yaml.safe_load(fake.launches[-1].task_yaml_text)["envs"]
    gens, found, _ = start_generation(open_store(str(root)), job_id=env["LAUNCHER_JOB_ID"],
                                      hint=int(env["LAUNCHER_ATTEMPT"]))
    if commit_step is not None:
        from launcher.checkpoint import commit

        d = root / f"step-{commit_step:09d}.g{gens.generation}"
        d.mkdir(parents=True)
        (d / "w.bin").write_bytes(b"x" * 10)
        commit(open_store(str(root)), commit_step, gens.generation)
    return found.step if found else None


def test_preemption_moves_to_the_next_region_and_blocks_the_preempted_one(rig):
    app, fake, clock, spec, text, root = rig
    j = launch(app, spec, text, None, "sky")
    assert first_region(fake.launches[0].task_yaml_text) == "aws/us-east-1"
    assert job_starts(fake, root, commit_step=10) is None
    assert [o.action for o in watch.cycle(app, clock)] == ["running"]

    fake.preempt(fake.launches[0].cluster_name)
    clock.t += 60
    (o,) = watch.cycle(app, clock)
    assert o.action == "resubmitted", o
    assert first_region(fake.launches[1].task_yaml_text) == "aws/us-west-2"
    assert "us-east-1" not in fake.launches[1].task_yaml_text  # blocked for the cool-down
    assert job_starts(fake, root, commit_step=20, region="us-west-2") == 10  # resumed from the latest commit

    fake.preempt(fake.launches[1].cluster_name)
    clock.t += 60
    (o,) = watch.cycle(app, clock)
    assert o.action == "resubmitted"
    text3 = fake.launches[2].task_yaml_text
    assert first_region(text3) == "aws/eu-west-1" and "us-east-1" not in text3 and "us-west-2" not in text3
    assert job_starts(fake, root, region="eu-west-1") == 20

    # a third preemption exceeds recovery.preemption = 2: the loop stops with the reason
    fake.preempt(fake.launches[2].cluster_name)
    clock.t += 60
    (o,) = watch.cycle(app, clock)
    assert o.action == "gave_up" and "PREEMPTED budget exhausted" in o.reason
    assert len(fake.launches) == 3
    st = {a.attempt: a for a in app.store.attempts(j.job_id)}
    assert [st[n].state for n in (1, 2, 3)] == ["PREEMPTED", "PREEMPTED", "PREEMPTED"]
    assert (st[1].resume_step, st[2].resume_step, st[3].resume_step) == (-1, 10, 20)  # -1: fresh start


def test_cooled_down_region_is_used_again_after_the_cool_down(rig):
    app, fake, clock, spec, text, root = rig
    launch(app, spec, text, None, "sky")
    job_starts(fake, root, commit_step=5)
    watch.cycle(app, clock)
    fake.preempt(fake.launches[0].cluster_name)
    clock.t += 31 * 60  # longer than placement_cooldown: us-east-1 is allowed again, but it was the
    watch.cycle(app, clock)  # region that just preempted us, so it is blocked afresh
    assert "us-east-1" not in fake.launches[1].task_yaml_text
    job_starts(fake, root, commit_step=6, region="us-west-2")
    watch.cycle(app, clock)
    fake.preempt(fake.launches[1].cluster_name)
    clock.t += 31 * 60  # us-east-1's cool-down is over now; us-west-2 just preempted
    watch.cycle(app, clock)
    assert first_region(fake.launches[2].task_yaml_text) == "aws/us-east-1"
    assert "us-west-2" not in fake.launches[2].task_yaml_text


def test_no_capacity_anywhere_waits_retries_within_budget_then_gives_up(rig):
    app, fake, clock, spec, text, root = rig
    launch(app, spec, text, None, "sky")
    actions, failed = [], set()
    for _ in range(12):
        rid = fake.launches[-1].request_id
        if rid not in failed:  # every launch comes back with no capacity
            fake.fail_launch(rid, ResourcesUnavailableError("no capacity in any region"))
            failed.add(rid)
        outs = watch.cycle(app, clock)
        actions += [o.action for o in outs]
        if "gave_up" in actions:
            break
        clock.t += 3600
    assert "waiting" in actions and actions.count("resubmitted") == 2
    assert actions[-1] == "gave_up"
    gave = [e for e in app.store.events(app.store.list_jobs()[0].job_id) if e["kind"] == "gave_up"][0]
    assert "NO_CAPACITY budget exhausted" in gave["reason"]


def test_a_status_error_is_never_a_recovery(rig):
    app, fake, clock, spec, text, root = rig
    launch(app, spec, text, None, "sky")
    job_starts(fake, root)
    fake.fail("status")
    fake.fail("queue")
    for _ in range(3):
        (o,) = watch.cycle(app, clock)
        assert o.action == "control_plane"
        clock.t += 60
    fake.heal()
    (o,) = watch.cycle(app, clock)
    assert o.action == "running" and len(fake.launches) == 1


def test_a_launch_that_died_before_recording_is_adopted_by_its_cluster_name(rig):
    app, fake, clock, spec, text, root = rig

    def killed(*a, **k):
        raise KeyboardInterrupt("launch killed after SkyPilot accepted it")

    app.store.record_submission = killed
    with pytest.raises(KeyboardInterrupt):
        launch(app, spec, text, None, "sky")
    del app.store.record_submission
    (job,) = app.store.list_jobs()
    assert job.state == "SUBMITTING" and not job.handle
    (o,) = watch.reconcile(app, clock)
    assert o.action == "adopted" and fake.launches[0].cluster_name in o.reason
    assert len(fake.launches) == 1
    (a,) = app.store.attempts(job.job_id)
    assert a.native_id == fake.launches[0].cluster_name
