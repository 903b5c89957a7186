"""recovery.hang: the spec fields, the pure decision (launcher.recovery.hangs), the policy's
HANG class and its budget, and the job side's stack dump on SIGUSR2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest

from launcher.backend.sections import spec_from_text
from launcher.core.errors import SpecError
from launcher.core.status import JobState
from launcher.recovery import hangs
from launcher.recovery.decide import hung
from launcher.recovery.policy import Budgets, Event, FailureClass, GiveUp, PastFailure, Retry, decide

BASE = "name: t\nrun: python3 train.py\ncheckpoint: {root: /ck}\n"


# ---- the spec fields
def test_hang_is_off_by_default_and_reads_a_duration_or_auto():
    r = spec_from_text(BASE).recovery
    assert r.hang is None and r.hang_restarts == 2
    assert spec_from_text(BASE + "recovery: {hang: 10m, hang_restarts: 4}\n").recovery.hang == 600
    assert spec_from_text(BASE + "recovery: {hang: 10m, hang_restarts: 4}\n").recovery.hang_restarts == 4
    assert spec_from_text(BASE + "recovery: {hang: Auto}\n").recovery.hang == "auto"


@pytest.mark.parametrize("value", ["0s", "600", "soon", "-5m"])
def test_a_bad_hang_names_its_field(value):
    with pytest.raises(SpecError) as e:
        spec_from_text(BASE + f"recovery: {{hang: {value}}}\n")
    assert "recovery.hang" in str(e.value)


# ---- the pure decision
def _line(step, at, gen=3):
    return json.dumps({"step": step, "metrics": {"loss": 1.0}, "generation": gen, "at": at}) + "\n"


def test_report_times_reads_each_reports_step_and_time_and_skips_junk():
    data = (_line(1, "2026-01-01T00:00:00Z") + "not json\n" + _line(2, "2026-01-01T00:00:10+00:00")
            + json.dumps({"step": True, "at": "2026-01-01T00:00:20Z"}) + "\n").encode()
    got = hangs.report_times(data)
    assert [s for s, _ in got] == [1, 2] and got[1][1] - got[0][1] == 10.0


def test_a_fixed_limit_is_armed_by_the_first_report_and_auto_by_the_second():
    assert hangs.limit_s(None, [0.0, 5.0]) is None
    assert hangs.limit_s(600, []) is None
    assert hangs.limit_s(600, [0.0]) == 600.0
    assert hangs.limit_s("auto", [0.0]) is None
    # twice the longest of the recent gaps, plus 60 s
    assert hangs.limit_s("auto", [0.0, 5.0, 25.0, 30.0]) == 2 * 20.0 + 60.0
    old_gap = [0.0, 1000.0] + [1000.0 + i for i in range(1, hangs.GAPS + 1)]
    assert hangs.limit_s("auto", old_gap) == 2 * 1.0 + 60.0  # only the last GAPS gaps count


def test_judge_finds_a_hang_once_the_last_report_is_as_old_as_the_limit():
    reports = [(10, 100.0), (20, 110.0)]
    assert hangs.judge(30, 4, reports, 139.0) is None
    h = hangs.judge(30, 4, reports, 140.0)
    assert h == hangs.Hang(generation=4, step=20, last_at=110.0, age_s=30.0, limit_s=30.0)
    assert hangs.judge("auto", 4, reports, 110.0 + 79.0) is None and hangs.judge("auto", 4, reports, 190.0)
    assert hangs.judge(30, 4, [], 1e9) is None  # a run that never reported is never called hung


def _gen(g, attempt, resume, in_job=None, job="j"):
    h = {"generation": g, "job_id": job, "attempt": attempt, "resume_step": resume}
    return {**h, "in_job": in_job} if in_job else h


def test_the_run_watched_is_the_attempts_newest_start_or_in_job_rerun():
    hist = [_gen(1, 1, -1), _gen(2, 2, 4), _gen(3, 2, 4, {"restart": 1, "exit": 137, "previous_generation": 2}),
            _gen(4, 1, 9, job="other")]
    assert hangs.current_generation("j", 1, hist) == 1
    assert hangs.current_generation("j", 2, hist) == 3
    assert hangs.current_generation("j", 3, hist) is None  # not started yet


def test_stack_files_name_their_host_and_pid():
    assert hangs.stack_files(["node-1.4242.txt", "a.b.c.17.txt", "x.txt", "n.12.log", "g3/h.5.txt"]) == [
        ("a.b.c", 17), ("h", 5), ("node-1", 4242)]


def test_the_attempts_meta_counts_its_hangs_and_says_whether_its_end_is_the_hangs():
    h = hangs.Hang(generation=3, step=20, last_at=1.0, age_s=61.04, limit_s=60.0)
    m = hangs.meta_after({"in_job": {"restarts": 1}}, h, in_job=False, stacks="/jobs/x/stacks", how="faulthandler",
                         now=5.0)
    assert m["in_job"] == {"restarts": 1} and m["hang"]["count"] == 1 and m["hang"]["killed"] is True
    assert hangs.already_acted(m, 3) and not hangs.already_acted(m, 4) and not hangs.already_acted({}, 3)
    m2 = hangs.meta_after(m, hangs.Hang(4, 30, 1.0, 70.0, 60.0), in_job=True, stacks="", how="none", now=6.0)
    assert m2["hang"]["count"] == 2 and m2["hang"]["killed"] is False
    assert hung(SimpleNamespace(meta=m)) and not hung(SimpleNamespace(meta=m2)) and not hung(SimpleNamespace(meta={}))
    assert "stacks in /jobs/x/stacks" in hangs.summary(m) and "no step for 61.0s after step 20" in hangs.summary(m)
    assert "no stacks collected" in hangs.summary(m2) and hangs.summary({}) == ""
    d = hangs.event_detail(2, h, in_job=False, stacks="/s", how="py-spy", pids=[7])
    assert d["age_s"] == 61.0 and d["recovery"].startswith("resubmission") and d["pids"] == [7]


def test_a_running_job_with_hang_is_decided_at_every_pass():
    from dataclasses import replace as dc_replace

    from launcher.core.status import Status
    from launcher.recovery import changes
    from launcher.recovery.state import RecoveryState

    running = Status(JobState.RUNNING)
    with_hang = spec_from_text(BASE + "recovery: {hang: 5m}\n")
    assert changes.every_pass(RecoveryState(), with_hang, running)
    assert not changes.every_pass(RecoveryState(), with_hang, dc_replace(running, state=JobState.PENDING))
    assert not changes.every_pass(RecoveryState(), spec_from_text(BASE), running)


# ---- the policy: a hung attempt's end is a HANG, with its own budget
def test_a_hung_attempt_is_retried_on_the_hang_budget_and_given_up_past_it():
    ev = Event(attempt=1, state=JobState.FAILED, resume_step=None, committed_step=10, exit_code=137, hung=True)
    d = decide([], ev, Budgets(app_error=0, hang_restarts=2))
    assert isinstance(d, Retry) and d.failure is FailureClass.HANG and "hang_restarts" in d.reason
    past = [PastFailure(1, FailureClass.HANG, None, 5), PastFailure(2, FailureClass.HANG, 5, 8)]
    ev3 = Event(attempt=3, state=JobState.FAILED, resume_step=8, committed_step=10, exit_code=137, hung=True)
    d = decide(past, ev3, Budgets(hang_restarts=2))
    assert isinstance(d, GiveUp) and "recovery.hang_restarts allows 2" in d.reason
    # without the mark the same end is an application error, on its own budget
    assert decide([], Event(attempt=1, state=JobState.FAILED, resume_step=None, committed_step=10, exit_code=137),
                  Budgets(app_error=0)).__class__ is GiveUp
    # exit 93 still closes it, and a cancel is still a cancel
    assert decide([], Event(1, JobState.FAILED, None, 10, exit_code=93, hung=True), Budgets()).__class__.__name__ == "Stop"
    assert decide([], Event(1, JobState.CANCELLED, None, 10, hung=True), Budgets()).__class__.__name__ == "Done"


# ---- the job side: faulthandler on SIGUSR2 into the root's stack file
PROGRAM = textwrap.dedent("""
    import sys, time
    from launcher.jobside import report
    report(1, loss=1.0)
    def deep_sleep_in_user_code():
        print("ready", flush=True)
        time.sleep(60)
    deep_sleep_in_user_code()
""")


def test_the_job_side_dumps_every_threads_stack_on_sigusr2(tmp_path):
    root = tmp_path / "ck"
    env = {**os.environ, "LAUNCHER_CKPT_ROOT": str(root), "LAUNCHER_ATTEMPT": "2", "LAUNCHER_BACKEND": "local",
           "LAUNCHER_HEARTBEAT_SECONDS": "0"}
    p = subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        files = list((root / ".launcher/stacks/g2").iterdir())
        assert [hangs.stack_files([f.name]) for f in files] == [[(os.uname().nodename, p.pid)]]
        os.kill(p.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "deep_sleep_in_user_code" not in files[0].read_text():
            time.sleep(0.05)
        assert "deep_sleep_in_user_code" in files[0].read_text()
        assert p.poll() is None  # the dump did not end it
    finally:
        p.kill()
        p.wait()


# ---- Slurm: a step in the job's own allocation per node
def test_slurm_reaches_a_runs_processes_through_an_overlapping_step_per_node():
    from launcher_backends.slurm import reach

    assert reach.by_host([("n1", 5), ("n2", 7), ("n1", 6)]) == {"n1": [5, 6], "n2": [7]}
    assert reach.job_of("123") == "123" and reach.job_of("123_4") is None
    argv = reach.signal_argv("123", "n1", [5, 6], signal.SIGUSR2)
    assert argv[:7] == ["srun", "--jobid=123", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=n1", "--quiet"]
    assert argv[-5:] == ["sh", "123", str(int(signal.SIGUSR2)), "5", "6"]
    # the script signals only the pids whose environment names the job, and prints them
    script = argv[argv.index("-c") + 1]
    me = subprocess.run(["/bin/sh", "-c", script, "sh", "no-such-job", "0", str(os.getpid())], capture_output=True,
                        text=True)
    assert me.returncode == 0 and me.stdout == ""
    theirs = subprocess.Popen(["sleep", "60"], env={**os.environ, "SLURM_JOB_ID": "4242"})
    try:
        hit = subprocess.run(["/bin/sh", "-c", script, "sh", "4242", str(int(signal.SIGTERM)), str(theirs.pid),
                              str(os.getpid())], capture_output=True, text=True)
        assert hit.stdout.split() == [str(theirs.pid)] and theirs.wait(10) == -signal.SIGTERM
    finally:
        theirs.kill()
        theirs.wait()
    assert reach.signalled("n1", "5\n6\n") == [("n1", 5), ("n1", 6)]
    out = "@@launcher-pid 5\nThread 5 (idle)\n  f (x.py:1)\n@@launcher-pid 6\n"
    assert reach.dumps("n1", out) == {("n1", 5): "Thread 5 (idle)\n  f (x.py:1)\n"}


def test_the_stack_dump_stays_off_the_preemption_signal(tmp_path):
    """With recovery.signal: USR2 the notice owns SIGUSR2: no stack file, so the launcher never sends it."""
    env = {**os.environ, "LAUNCHER_CKPT_ROOT": str(tmp_path / "ck"), "LAUNCHER_ATTEMPT": "1",
           "LAUNCHER_BACKEND": "local", "LAUNCHER_HEARTBEAT_SECONDS": "0", "LAUNCHER_PREEMPT_SIGNAL": "USR2"}
    code = "from launcher.jobside import report; report(1, loss=1.0)"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    assert (tmp_path / "ck/.launcher/metrics/g1.jsonl").exists()
    assert not (tmp_path / "ck/.launcher/stacks").exists()


# ---- a hang with nothing to kill: cancelled through the backend, recovered as a HANG
class _Reaches:
    """A backend that reaches the run's processes (ReachesRun); KILLS: what signal_run reports killed."""

    def __init__(self, kills=True, cancel_error=None):
        self.kills, self.cancel_error, self.calls = kills, cancel_error, []

    def signal_run(self, handle, procs, signum):
        self.calls.append(("signal", list(procs), int(signum)))
        return list(procs) if self.kills and signum == signal.SIGKILL else []

    def dump_stacks(self, handle, procs):
        return {}

    def cancel(self, handle):
        from launcher.core.errors import LauncherError

        self.calls.append(("cancel", handle.native_id))
        if self.cancel_error:
            raise LauncherError(self.cancel_error)


class _Unreachable:
    """A backend that is no ReachesRun (SkyPilot's kind): it can only cancel."""

    def __init__(self):
        self.calls = []

    def cancel(self, handle):
        self.calls.append(("cancel", handle.native_id))


HUNG = hangs.Hang(generation=1, step=20, last_at=1.0, age_s=700.0, limit_s=600.0)


def _hung_job(app, monkeypatch, backend, root, extra=""):
    """A RUNNING job (attempt 1, native id 4242) on the local target with recovery.hang, and BACKEND as its backend."""
    from launcher.backend.protocols import Handle

    text = f"name: j\nrun: python3 train.py\ncheckpoint: {{root: {root}}}\nrecovery: {{hang: 10m{extra}}}\n"
    app.store.begin_job("j", "j", "local", "local", None, text, ckpt_root=root)
    h = Handle("local", "local", "j", "4242", 1, {})
    app.store.record_attempt("j", 1, "local", h.to_json(), "4242", state="RUNNING")
    app.store.mirror_state("j", h.to_json(), "RUNNING", "")
    monkeypatch.setattr(app, "backend", lambda target: backend)
    return spec_from_text(text), h


def _cancel_shows(app, h, state="CANCELLED", reason="cancelled by user"):
    """The scheduler's status after the cancel, as a watch pass records it (launcher.launching.tracking)."""
    app.store.bulk.record_statuses([("j", 1, {"state": state, "reason": reason}, h.to_json(), state, reason)])


def _decision(app, spec):
    from launcher.core.status import Status
    from launcher.recovery.decide import Facts, on_ended
    from launcher.recovery.progress import Progress

    job = app.store.get_job("j")
    return on_ended(job, app.store.attempts("j"), Facts(spec, Progress(committed_step=10)),
                    Status(JobState(app.store.attempts("j")[-1].state)), 1e10)


@pytest.mark.parametrize("root,extra,why", [
    ("s3://bucket/ck", "", "is not a POSIX path"),
    ("/ck", ", signal: USR2", "recovery.signal is USR2"),
    ("/ck", "", "never loaded the job-side helper"),
])
def test_a_hang_with_no_known_process_is_cancelled_through_the_backend_not_recorded_killed(app, monkeypatch, root,
                                                                                           extra, why):
    """An s3:// root, recovery.signal: USR2, or a program that never loaded the job side: no process
    registered a stack file, so nothing can be dumped or killed. The attempt is cancelled through its
    backend (never recorded killed), the job stays open when the cancel shows, and its end is a HANG
    retried on recovery.hang_restarts, with why no stack was taken."""
    from launcher.recovery import hang
    from launcher.recovery.decide import Resubmit

    fake = _Reaches()
    spec, h = _hung_job(app, monkeypatch, fake, root, extra)
    out = hang.act(app, app.store.get_job("j"), spec, HUNG, files=[], clock=lambda: 5.0)
    assert fake.calls == [("cancel", "4242")]  # nothing to signal: straight to the cancel
    meta = app.store.attempts("j")[0].meta["hang"]
    assert meta["killed"] is False and meta["cancelled"] is True and meta["stacks"] == ""
    assert why in meta["no_stacks"] and why in meta["not_killed"]
    kinds = [e["kind"] for e in app.store.events("j")]
    assert kinds.count("hang_detected") == 1 and kinds.count("hang_cancelled") == 1
    detected = next(e for e in app.store.events("j") if e["kind"] == "hang_detected")
    assert detected["recovery"].startswith("cancel through its backend") and why in detected["no_stacks"]
    assert "cancel through its backend" in out.reason
    assert hangs.already_acted(app.store.attempts("j")[0].meta, 1)  # one cancel per hung run
    # the cancel shows as CANCELLED: not the job's end (no user cancelled it) but a HANG to recover
    _cancel_shows(app, h)
    assert app.store.get_job("j").state == "RUNNING" and app.store.attempts("j")[0].state == "CANCELLED"
    d = _decision(app, spec)
    assert isinstance(d, Resubmit) and d.decision.failure is FailureClass.HANG and "hang_restarts" in d.decision.reason
    assert "cancelled by the launcher" in d.decision.reason
    assert "cancelled through its backend" in hangs.summary(app.store.attempts("j")[0].meta)


def test_a_hang_whose_processes_cannot_be_killed_is_cancelled_too(app, monkeypatch):
    from launcher.recovery import hang

    fake = _Reaches(kills=False)
    spec, h = _hung_job(app, monkeypatch, fake, "/ck", ", in_job: {kind: allocation}")
    hang.act(app, app.store.get_job("j"), spec, HUNG, files=[("n1", 77)], clock=lambda: 5.0)
    assert [c[0] for c in fake.calls] == ["signal", "signal", "cancel"]  # USR2 for a dump, KILL, then the cancel
    meta = app.store.attempts("j")[0].meta["hang"]
    assert meta["killed"] is False and meta["cancelled"] is True and "n1:77" in meta["not_killed"]
    assert "no faulthandler dump" in meta["no_stacks"]
    assert [e["kind"] for e in app.store.events("j")].count("hang_detected") == 1
    _cancel_shows(app, h)
    assert _decision(app, spec).decision.failure is FailureClass.HANG  # resubmitted: the allocation is gone


def test_a_hang_on_a_backend_that_cannot_reach_the_run_is_cancelled(app, monkeypatch):
    from launcher.recovery import hang

    fake = _Unreachable()
    spec, h = _hung_job(app, monkeypatch, fake, "/ck")
    hang.act(app, app.store.get_job("j"), spec, HUNG, files=[("n1", 77)], clock=lambda: 5.0)
    assert fake.calls == [("cancel", "4242")]
    meta = app.store.attempts("j")[0].meta["hang"]
    assert meta["cancelled"] is True and "cannot reach the run's processes" in meta["no_stacks"]


def test_a_hang_that_was_killed_is_not_cancelled(app, monkeypatch):
    from launcher.recovery import hang

    fake = _Reaches()
    spec, h = _hung_job(app, monkeypatch, fake, "/ck")
    hang.act(app, app.store.get_job("j"), spec, HUNG, files=[("n1", 77)], clock=lambda: 5.0)
    assert ("cancel", "4242") not in fake.calls
    meta = app.store.attempts("j")[0].meta["hang"]
    assert meta["killed"] is True and meta["cancelled"] is False and "hang_cancel" not in app.store.get_job("j").meta
    _cancel_shows(app, h)  # a cancel that is no hang's (not the launcher's) still closes the job
    assert app.store.get_job("j").state == "CANCELLED"


def test_a_cancel_that_fails_leaves_the_hang_not_ended_and_is_tried_again(app, monkeypatch):
    from launcher.recovery import hang

    fake = _Reaches(cancel_error="sky: API server unreachable")
    spec, h = _hung_job(app, monkeypatch, fake, "s3://bucket/ck")
    out = hang.act(app, app.store.get_job("j"), spec, HUNG, files=[], clock=lambda: 5.0)
    assert "its cancel failed (sky: API server unreachable)" in out.reason
    meta = app.store.attempts("j")[0].meta
    assert meta["hang"]["ended"] == "" and not meta["hang"]["cancelled"] and not meta["hang"]["killed"]
    assert not hangs.already_acted(meta, 1) and "hang_cancel" not in app.store.get_job("j").meta
    assert "not ended yet" in hangs.summary(meta)
    fake.cancel_error = None  # the next pass: the same hang, cancelled this time, counted once
    hang.act(app, app.store.get_job("j"), spec, HUNG, files=[], clock=lambda: 6.0)
    meta = app.store.attempts("j")[0].meta["hang"]
    assert meta["cancelled"] is True and meta["count"] == 1
    kinds = [e["kind"] for e in app.store.events("j")]
    assert (kinds.count("hang_detected"), kinds.count("hang_cancel_failed"), kinds.count("hang_cancelled")) == (1, 1, 1)


def test_the_store_keeps_a_job_open_only_for_the_cancel_of_the_hung_submission_it_names():
    from launcher.state.rows import HANG_CANCEL_KEY, mirrored_state

    mark = json.dumps({HANG_CANCEL_KEY: {"attempt": 1, "handle": "H1"}})
    row = {"state": "RUNNING", "handle": "H1", "meta": mark}
    assert mirrored_state(row, "H1", "CANCELLED") is None
    assert mirrored_state(row, "H1", "COMPLETED") == "COMPLETED"  # it ended on its own first
    assert mirrored_state({**row, "handle": "H2"}, "H2", "CANCELLED") == "CANCELLED"  # a later submission
    assert mirrored_state({**row, "meta": "{}"}, "H1", "CANCELLED") == "CANCELLED"


def test_a_hang_cancelled_by_the_launcher_is_a_hang_and_any_other_cancel_a_cancel():
    from launcher.recovery.policy import Done, classify

    assert classify(JobState.CANCELLED, hang_cancelled=True) is FailureClass.HANG
    assert classify(JobState.FAILED, hang_cancelled=True) is FailureClass.HANG
    assert classify(JobState.COMPLETED, hang_cancelled=True) is None
    assert classify(JobState.CANCELLED, True) is None
    ev = Event(attempt=1, state=JobState.CANCELLED, resume_step=None, committed_step=10, hang_cancelled=True)
    assert isinstance(decide([], ev, Budgets(hang_restarts=1)), Retry)
    past = [PastFailure(1, FailureClass.HANG, None, 5)]
    ev2 = Event(attempt=2, state=JobState.CANCELLED, resume_step=5, committed_step=10, hang_cancelled=True)
    assert isinstance(decide(past, ev2, Budgets(hang_restarts=1)), GiveUp)
    assert isinstance(decide([], Event(1, JobState.CANCELLED, None, 10), Budgets()), Done)
