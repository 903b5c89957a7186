"""The SkyPilot backend's submit/status/cancel/logs/find logic over a stateful fake SkyClient.

Pure logic only: what SkyPilot itself accepts and returns is tested against the real
library in tests/integration/test_skypilot_*.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.backend.protocols import Facts, JobRef
from launcher.backend.config import Target
from launcher.core.errors import BackendUnavailable, CapabilityError, ConfigError, SubmitError, TransientError
from launcher.backend.sections import spec_from_text
from launcher.core.status import JobState
from launcher_backends.skypilot import INSTALL_HINT, SkyPilotBackend
from launcher_backends.skypilot.client import CheckResult
from tests.fixtures.skypilot_fake import FakeSkyClient
from launcher_backends.skypilot.options import SkyPilotOptions


class ResourcesUnavailableError(Exception):
    """Named like sky.exceptions.ResourcesUnavailableError (states map launch errors by class name)."""


class ApiServerConnectionError(RuntimeError):
    """Named like sky.exceptions.ApiServerConnectionError."""


SPEC = "name: train\nrun: python train.py\nresources: {gpus_per_node: 8, accelerator: H100}\n"


def make(tmp_path, spec_text=SPEC, target=None, facts=None, fake=None, job_id="train-abc123", attempt=1):
    fake = fake or FakeSkyClient()
    opts = SkyPilotOptions(**(target or {"infra": "aws", "use_spot": True}))
    backend = SkyPilotBackend(Target("aws-spot", "skypilot", opts), client=fake)
    spec = spec_from_text(spec_text)
    job = JobRef(job_id, attempt, job_dir=str(tmp_path / "jobs" / job_id))
    request = backend.render(spec, Facts("aws-spot", "skypilot", facts or {}), job)
    return backend, fake, request


def test_submit_launches_the_rendered_task_once_on_the_attempts_own_cluster(tmp_path):
    backend, fake, req = make(tmp_path)
    handle = backend.submit(req)
    assert [(la.cluster_name, la.task_yaml_text) for la in fake.launches] == [("launcher-train-abc123-1", req.text)]
    assert handle.native_id == "launcher-train-abc123-1"
    assert handle.extra["request_id"] == fake.launches[0].request_id
    assert handle.extra["task_name"] == "launcher.train-abc123.1"
    assert handle.extra["use_spot"] is True and handle.extra["managed"] is False
    assert type(handle).from_json(handle.to_json()) == handle  # the state store can keep it


def test_secret_values_go_to_skypilot_in_memory_and_never_into_the_task_or_handle(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz0123")
    backend, fake, req = make(tmp_path, SPEC + "secrets: [HF_TOKEN]\n")
    handle = backend.submit(req)
    assert fake.launches[0].secrets == {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123"}
    assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in req.text + handle.to_json()


def test_a_missing_secret_stops_the_submit_before_anything_is_launched(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    backend, fake, req = make(tmp_path, SPEC + "secrets: [HF_TOKEN]\n")
    with pytest.raises(ConfigError, match="HF_TOKEN"):
        backend.submit(req)
    assert fake.launches == []


def test_no_enabled_cloud_for_any_placement_is_a_capability_error_naming_sky_check(tmp_path):
    backend, fake, req = make(tmp_path, fake=FakeSkyClient(enabled=["Kubernetes"]))
    with pytest.raises(CapabilityError, match="sky check aws"):
        backend.submit(req)
    assert fake.launches == []


def test_one_enabled_placement_is_enough_to_launch(tmp_path):
    target = {"infra": "lambda", "fallbacks": [{"infra": "runpod", "use_spot": True}]}
    backend, fake, req = make(tmp_path, target=target, fake=FakeSkyClient(enabled=["RunPod"]))
    backend.submit(req)
    assert len(fake.launches) == 1


def test_an_unreachable_api_server_at_submit_is_transient_and_launches_nothing(tmp_path):
    fake = FakeSkyClient()
    fake.fail("launch", ApiServerConnectionError("Could not connect to SkyPilot API server"))
    backend, fake, req = make(tmp_path, fake=fake)
    with pytest.raises(TransientError):
        backend.submit(req)


def test_a_launch_skypilot_refuses_is_a_submit_error(tmp_path):
    fake = FakeSkyClient()
    fake.fail("launch", ValueError("Invalid task"))
    backend, fake, req = make(tmp_path, fake=fake)
    with pytest.raises(SubmitError, match="nothing was launched"):
        backend.submit(req)


@pytest.mark.parametrize("facts,target,catalog,expected", [
    ({"candidates": [{"infra": "aws", "use_spot": True, "hourly_usd": 31.5}]}, None, 40.0, (31.5, "planner")),
    ({}, {"infra": "aws", "use_spot": True, "gpu_hour_usd": 2.0}, 40.0, (16.0, "target")),
    ({}, None, 40.0, (40.0, "catalog")),
    ({}, None, None, (None, None)),
])
def test_hourly_price_per_attempt_prefers_planner_then_target_then_catalog(tmp_path, facts, target, catalog,
                                                                           expected):
    fake = FakeSkyClient()
    fake.check_result = CheckResult(hourly_usd=catalog)
    backend, fake, req = make(tmp_path, facts=facts, target=target, fake=fake)
    h = backend.submit(req)
    assert (h.extra["hourly_usd"], h.extra["price_source"]) == expected


def test_skypilots_warnings_about_skipped_placements_are_kept_on_the_handle(tmp_path):
    fake = FakeSkyClient()
    fake.check_result = CheckResult(warnings=("skipped placement runpod spot: no multi-node",))
    backend, fake, req = make(tmp_path, fake=fake)
    assert "skipped placement runpod spot: no multi-node" in backend.submit(req).extra["warnings"]


# ---- status

def test_status_follows_provisioning_running_and_completion(tmp_path):
    backend, fake, req = make(tmp_path, fake=FakeSkyClient(auto_provision=False))
    h = backend.submit(req)
    st = backend.status([h])[0]
    assert (st.state, st.native_state) == (JobState.PENDING, "LAUNCH:RUNNING")
    fake.provision(h.extra["request_id"])
    st = backend.status([h])[0]
    assert (st.state, st.native_state) == (JobState.RUNNING, "UP/RUNNING")
    fake.finish(h.native_id, "SUCCEEDED")
    assert backend.status([h])[0].state == JobState.COMPLETED


def test_a_finished_job_stays_finished_after_autodown_removes_its_cluster(tmp_path):
    backend, fake, req = make(tmp_path)
    h = backend.submit(req)
    fake.finish(h.native_id, "FAILED")
    assert backend.status([h])[0].state == JobState.FAILED
    fake.down(h.native_id)  # autostop tore the cluster down
    calls = len(fake.calls)
    st = backend.status([h])[0]
    assert st.state == JobState.FAILED  # not PREEMPTED: the final state was recorded
    assert len(fake.calls) == calls  # and nobody had to be asked


def test_recorded_final_states_survive_a_new_backend_instance(tmp_path):
    backend, fake, req = make(tmp_path)
    h = backend.submit(req)
    fake.finish(h.native_id, "SUCCEEDED")
    backend.status([h])
    fake.down(h.native_id)
    fresh = SkyPilotBackend(backend.target, client=fake)
    assert fresh.status([h])[0].state == JobState.COMPLETED


@pytest.mark.parametrize("native,state", [
    ("FAILED_SETUP", JobState.FAILED_SETUP), ("FAILED_DRIVER", JobState.NODE_FAIL),
    ("CANCELLED", JobState.CANCELLED), ("SETTING_UP", JobState.PENDING), ("FAILED", JobState.FAILED),
])
def test_cluster_job_states_keep_why_and_the_raw_state(tmp_path, native, state):
    backend, fake, req = make(tmp_path)
    h = backend.submit(req)
    fake.finish(h.native_id, native)
    st = backend.status([h])[0]
    assert st.state == state and st.native_state == f"UP/{native}"


def test_no_capacity_anywhere_is_no_capacity_not_a_failure(tmp_path):
    backend, fake, req = make(tmp_path, fake=FakeSkyClient(auto_provision=False))
    h = backend.submit(req)
    fake.fail_launch(h.extra["request_id"], ResourcesUnavailableError("Failed to provision all possible launchable "
                                                                      "resources.\nRelax the task's resource "
                                                                      "requirements"))
    st = backend.status([h])[0]
    assert st.state == JobState.NO_CAPACITY
    assert "Failed to provision all possible launchable resources" in st.reason
    assert st.extra["launch_error"] == "ResourcesUnavailableError"


@pytest.mark.parametrize("use_spot,state", [(True, JobState.PREEMPTED), (False, JobState.NODE_FAIL)])
def test_a_cluster_that_vanishes_mid_job_is_preempted_on_spot_and_node_fail_on_demand(tmp_path, use_spot, state):
    backend, fake, req = make(tmp_path, target={"infra": "aws", "use_spot": use_spot})
    h = backend.submit(req)
    assert backend.status([h])[0].state == JobState.RUNNING
    fake.preempt(h.native_id)
    st = backend.status([h])[0]
    assert st.state == state and st.native_state == "GONE"


def test_a_stopped_spot_cluster_is_preempted(tmp_path):
    backend, fake, req = make(tmp_path)
    h = backend.submit(req)
    fake.preempt(h.native_id, stopped=True)
    assert backend.status([h])[0].state == JobState.PREEMPTED


def test_a_cluster_back_in_init_after_launch_is_unknown_not_a_failure(tmp_path):
    backend, fake, req = make(tmp_path)
    h = backend.submit(req)
    fake.set_cluster_status(h.native_id, "INIT")
    st = backend.status([h])[0]
    assert st.state == JobState.UNKNOWN and st.state.is_active


def test_a_status_error_is_transient_and_never_turns_into_a_job_state(tmp_path):
    backend, fake, req = make(tmp_path)
    h = backend.submit(req)
    for method in ("status", "queue", "requests"):
        fake.fail(method, ApiServerConnectionError("Could not connect to SkyPilot API server"))
        with pytest.raises(TransientError, match="unknown, not failed"):
            backend.status([h])
        fake.heal()
    assert backend.status([h])[0].state == JobState.RUNNING
    assert not (tmp_path / "jobs" / "train-abc123" / "skypilot").exists()  # nothing recorded as final


def test_status_is_batched_one_cluster_query_for_many_attempts(tmp_path):
    fake = FakeSkyClient()
    handles = []
    for i in range(3):
        backend, _, req = make(tmp_path, fake=fake, job_id=f"job-{i}")
        handles.append(backend.submit(req))
    fake.calls.clear()
    states = backend.status(handles)
    assert [s.state for s in states] == [JobState.RUNNING] * 3
    assert fake.calls.count("status") == 1 and fake.calls.count("queue") == 1


# ---- managed (delegated) mode

MANAGED = SPEC + "skypilot: {managed: true, job_recovery: {strategy: EAGER_NEXT_REGION}}\n"


def test_managed_mode_hands_the_task_to_skypilot_managed_jobs(tmp_path):
    backend, fake, req = make(tmp_path, MANAGED)
    h = backend.submit(req)
    assert fake.launches[0].managed and fake.launches[0].cluster_name == "launcher.train-abc123.1"
    assert h.native_id == "launcher.train-abc123.1" and h.extra["managed"] is True
    assert backend.status([h])[0].state == JobState.RUNNING


@pytest.mark.parametrize("native,state", [
    ("RECOVERING", JobState.REQUEUED), ("FAILED_NO_RESOURCE", JobState.NO_CAPACITY),
    ("FAILED_CONTROLLER", JobState.NODE_FAIL), ("FAILED_SETUP", JobState.FAILED_SETUP),
    ("SUCCEEDED", JobState.COMPLETED), ("STARTING", JobState.PENDING),
])
def test_managed_job_states_map_keeping_recoveries(tmp_path, native, state):
    backend, fake, req = make(tmp_path, MANAGED)
    h = backend.submit(req)
    fake.set_managed(h.native_id, native, recovery_count=2)
    st = backend.status([h])[0]
    assert (st.state, st.native_state, st.restarts) == (state, native, 2)


def test_managed_prechecks_failure_carries_skypilots_reason(tmp_path):
    backend, fake, req = make(tmp_path, MANAGED)
    h = backend.submit(req)
    fake.set_managed(h.native_id, "FAILED_PRECHECKS", failure_reason="[sky.exceptions.NoCloudAccessError] Cloud "
                                                                     "access is not set up.")
    st = backend.status([h])[0]
    assert st.state == JobState.FAILED and "NoCloudAccessError" in st.reason


# ---- cancel

def test_cancel_stops_a_launch_in_flight_and_tears_the_cluster_down(tmp_path):
    backend, fake, req = make(tmp_path, fake=FakeSkyClient(auto_provision=False))
    h = backend.submit(req)
    backend.cancel(h)
    assert fake.reqs[h.extra["request_id"]].status == "CANCELLED"
    assert "down_many" in fake.calls
    assert backend.status([h])[0].state == JobState.CANCELLED


def test_cancel_is_idempotent_and_keeps_a_finished_jobs_outcome(tmp_path):
    backend, fake, req = make(tmp_path)
    h = backend.submit(req)
    fake.finish(h.native_id, "SUCCEEDED")
    assert backend.status([h])[0].state == JobState.COMPLETED
    backend.cancel(h)
    backend.cancel(h)
    assert h.native_id not in fake.clusters  # still cleaned up
    assert backend.status([h])[0].state == JobState.COMPLETED


def test_cancel_of_a_managed_job_cancels_it_by_name(tmp_path):
    backend, fake, req = make(tmp_path, MANAGED)
    h = backend.submit(req)
    backend.cancel(h)
    assert [j.status for j in fake.managed.values()] == ["CANCELLED"]


def test_cancel_that_cannot_reach_skypilot_is_transient(tmp_path):
    backend, fake, req = make(tmp_path)
    h = backend.submit(req)
    fake.fail("down_many", ApiServerConnectionError("Could not connect"))
    with pytest.raises(TransientError):
        backend.cancel(h)
    assert h.native_id in fake.clusters


# ---- find (idempotent submission)

def test_find_returns_the_attempt_an_interrupted_submit_launched(tmp_path):
    backend, fake, req = make(tmp_path)
    h = backend.submit(req)
    found = backend.find(req.job)
    assert found is not None and found.native_id == h.native_id and found.extra["found"]
    assert backend.find(JobRef("train-abc123", 2)) is None


def test_find_sees_a_managed_job_by_its_task_name(tmp_path):
    backend, fake, req = make(tmp_path, MANAGED)
    h = backend.submit(req)
    found = backend.find(req.job)
    assert found is not None and found.native_id == h.native_id and found.extra["managed"]


def test_find_that_cannot_ask_is_transient_so_nobody_submits_twice(tmp_path):
    backend, fake, req = make(tmp_path)
    fake.fail("status", ApiServerConnectionError("Could not connect"))
    with pytest.raises(TransientError, match="not submitting twice"):
        backend.find(req.job)


# ---- logs

def test_logs_wait_for_provisioning_then_stream_the_attempts_job(tmp_path):
    backend, fake, req = make(tmp_path, fake=FakeSkyClient(auto_provision=False))
    h = backend.submit(req)
    fake.logs[h.native_id] = "epoch 1\nepoch 2\n"
    polls = []

    def done():
        polls.append(1)
        if len(polls) == 2:
            fake.provision(h.extra["request_id"])
        return False

    assert "".join(backend.logs(h, follow=True, done=done, poll=0)) == "epoch 1\nepoch 2\n"
    assert len(polls) == 2


def test_logs_without_follow_return_at_once_while_provisioning(tmp_path):
    backend, fake, req = make(tmp_path, fake=FakeSkyClient(auto_provision=False))
    h = backend.submit(req)
    assert list(backend.logs(h, follow=False)) == []


# ---- availability

def test_available_reports_the_install_hint_without_importing_skypilot(monkeypatch):
    import importlib.util

    assert SkyPilotBackend.available() is None
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    problem = SkyPilotBackend.available()
    assert problem and INSTALL_HINT in problem


def test_a_backend_without_skypilot_installed_cannot_submit(tmp_path, monkeypatch):
    import importlib.util

    backend = SkyPilotBackend(Target("t", "skypilot", SkyPilotOptions(infra="aws")))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(BackendUnavailable, match="launcher\\[skypilot\\]"):
        _ = backend.client  # every SDK use goes through it


@pytest.mark.parametrize("spec_text", [SPEC, MANAGED], ids=["plain", "managed"])
def test_find_sees_a_launch_still_in_flight_before_any_cluster_or_job_exists(tmp_path, spec_text):
    backend, fake, req = make(tmp_path, spec_text, fake=FakeSkyClient(auto_provision=False))
    h = backend.submit(req)
    found = backend.find(req.job)
    assert found is not None
    assert (found.native_id, found.extra["request_id"], found.extra["managed"]) == (
        h.native_id, h.extra["request_id"], h.extra["managed"])
    assert backend.status([found])[0].state == JobState.PENDING


def test_submit_stages_every_local_file_the_task_mounts_before_launching(tmp_path):
    import yaml

    spec = SPEC.replace("{gpus_per_node", "{nodes: 2, gpus_per_node") + "checkpoint: {root: s3://ml-ckpt-bucket/x}\n"
    backend, fake, req = make(tmp_path, spec)
    backend.submit(req)
    mounts = yaml.safe_load(req.text)["file_mounts"]
    local = sorted(v for v in mounts.values() if isinstance(v, str))
    assert [Path(p).name for p in local] == ["launcher_job.pyz", "skypilot_handoff.py"]
    assert all(Path(p).is_file() for p in local)
    import zipfile

    assert "launcher/jobside/api.py" in zipfile.ZipFile(local[0]).namelist()


# ---- cancel many (a sweep's elements): a few API calls, teardowns side by side
class _Recording:
    """The ``sky`` module as SkyClient uses it for teardowns: each call returns a request id
    at once; ``get`` waits for one. Records the order."""

    class exceptions:  # the part of sky.exceptions a teardown names
        class ClusterDoesNotExist(Exception):
            pass

    def __init__(self, failing=()):
        self.log, self.failing = [], set(failing)

    def down(self, name):
        self.log.append(f"down {name}")
        return f"rid-{name}"

    def get(self, rid):
        self.log.append(f"get {rid}")
        if rid.removeprefix("rid-") in self.failing:
            raise RuntimeError("provider said no")


def test_every_teardown_is_fired_before_any_is_waited_for(monkeypatch):
    from launcher_backends.skypilot.client import SdkClient

    sky = _Recording(failing={"c2"})
    client = SdkClient()
    monkeypatch.setattr(client, "_sky", lambda: sky)
    errors = client.down_many(["c1", "c2", "c3", "c1"])
    assert sky.log == ["down c1", "down c2", "down c3", "get rid-c1", "get rid-c2", "get rid-c3"]
    assert list(errors) == ["c2"] and "provider said no" in errors["c2"]


def test_cancel_many_cancels_launches_in_one_call_and_reports_per_job(tmp_path):
    fake = FakeSkyClient(auto_provision=False)
    hs = []
    for n in (1, 2, 3):  # a sweep's elements: one cluster each, still provisioning
        backend, _, req = make(tmp_path, fake=fake, job_id=f"sw-e{n}")
        hs.append(backend.submit(req))
    fake.calls.clear()
    assert backend.cancel_many(hs) == {}
    assert fake.calls == ["cancel_requests", "down_many"]
    assert {fake.reqs[h.extra["request_id"]].status for h in hs} == {"CANCELLED"}
    assert [s.state for s in backend.status(hs)] == [JobState.CANCELLED] * 3
    fake.fail("down_many", ApiServerConnectionError("Could not connect"))
    assert set(backend.cancel_many(hs)) == {h.native_id for h in hs}
