"""What makes one launch() fast keeps its answers right: the submit command started in two
halves (LocalRunner.start, launching.submit.NewSubmission), the provenance record drafted before
the native id is known, and the per-process cache of the package list's hash (it stops
trusting itself when its input changes)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from launcher.backend import staging
from launcher.backend.protocols import Handle, StartsSubmit, can
from launcher.core.errors import CommandError, SubmitError, TransientError
from launcher.launching.submit import NewSubmission
from launcher.transport.errors import HostUnreachableError
from launcher.provenance import capture
from launcher.provenance.record import Captured, complete_launch
from launcher.core.redact import MASK
from launcher.transport.runner import LocalRunner
from launcher.spec.model import JobSpec


# ---------------------------------------------------------------- LocalRunner.start
def test_a_started_command_waits_for_the_same_result_as_run():
    r = LocalRunner(env={"X_LAUNCHFAST": "yes"})
    started = r.start(["sh", "-c", "cat; echo $X_LAUNCHFAST; echo err >&2; exit 4"], input="in\n", check=False)
    res = started.wait()
    assert (res.returncode, res.stdout, res.stderr) == (4, "in\nyes\n", "err\n")
    with pytest.raises(CommandError):
        r.start(["sh", "-c", "exit 3"]).wait()
    with pytest.raises(CommandError, match="command not found on localhost"):
        r.start(["no-such-command-launchfast"])


def test_a_started_command_runs_while_the_caller_works_and_keeps_its_timeout(tmp_path):
    mark = tmp_path / "mark"
    started = LocalRunner().start(["sh", "-c", f"echo ran > {mark}"])
    deadline = time.monotonic() + 10
    while not (mark.exists() and mark.read_text()) and time.monotonic() < deadline:  # the caller's own work
        time.sleep(0.01)  # (the shell creates the file before it writes to it: wait for its line)
    assert mark.read_text() == "ran\n" and started.wait().ok
    with pytest.raises(TransientError, match="timed out after 0.3s"):
        LocalRunner().start(["sleep", "30"], timeout=0.3).wait()


def test_a_command_sees_the_environment_as_it_is_now(monkeypatch):
    r = LocalRunner(env={"X_BASE": "base"})
    show = ["sh", "-c", 'echo "$X_LAUNCHFAST_ENV|$X_BASE|$X_CALL"']
    monkeypatch.setenv("X_LAUNCHFAST_ENV", "one")
    assert r.run(show).stdout == "one|base|\n"
    assert r.start(show).wait().stdout == "one|base|\n"  # the kept environment
    monkeypatch.setenv("X_LAUNCHFAST_ENV", "two")
    assert r.run(show).stdout == "two|base|\n"
    assert r.run(show, env={"X_CALL": "call"}).stdout == "two|base|call\n"
    monkeypatch.delenv("X_LAUNCHFAST_ENV")
    assert r.start(show).wait().stdout == "|base|\n"


# ---------------------------------------------------------------- launching.submit.NewSubmission
class TwoHalves:
    """A backend that submits in two halves, recording the order of events."""

    name = "fake"

    def __init__(self, log, fail_wait=None):
        self.log, self.fail_wait = log, fail_wait  # FAIL_WAIT: the error wait() raises

    def submit(self, request):
        return self.start_submit(request).wait()

    def start_submit(self, request):
        self.log.append("start")
        backend = self

        class Pending:
            def wait(self):
                backend.log.append("wait")
                if backend.fail_wait is not None:
                    raise backend.fail_wait
                return Handle("fake", "t", "j", "42", 1)
        return Pending()


class OneCall:
    name = "fake"

    def __init__(self, log):
        self.log = log

    def submit(self, request):
        self.log.append("submit")
        return Handle("fake", "t", "j", "7", 1)


def _submitting(app, job_id="j-1"):
    app.store.begin_job(job_id, "j", "t", "fake", None, "name: j\n")
    return job_id


def submit_recorded(store, backend, request, job_id, work):
    return NewSubmission(store, backend, request, [job_id], lambda: store.forget_job(job_id)).run(work)


def test_work_runs_between_start_and_wait(app):
    log = []
    assert can(TwoHalves(log), StartsSubmit) and not can(OneCall(log), StartsSubmit)
    handle, done = submit_recorded(app.store, TwoHalves(log), None, _submitting(app), lambda: log.append("work") or "d")
    assert (handle.native_id, done, log) == ("42", "d", ["start", "work", "wait"])
    log.clear()
    handle, done = submit_recorded(app.store, OneCall(log), None, _submitting(app, "j-2"), lambda: log.append("work") or "d")
    assert (handle.native_id, done, log) == ("7", "d", ["submit", "work"])  # after the submission, as before
    assert app.store.get_job("j-1").state == "SUBMITTING"  # recording the attempt is the caller's


@pytest.mark.parametrize("error, kept", [
    (SubmitError("sbatch rejected the script"), False),  # the scheduler said no: nothing was submitted
    (HostUnreachableError("connection refused"), False),  # the command never started
    (TransientError("sbatch timed out"), True),  # it may have got through: the outcome is unknown
])
def test_a_failed_wait_forgets_the_row_only_when_nothing_was_submitted(app, error, kept):
    log = []
    job_id = _submitting(app)
    with pytest.raises(type(error)):
        submit_recorded(app.store, TwoHalves(log, fail_wait=error), None, job_id, lambda: "d")
    rows = [j for j in app.store.list_jobs() if j.job_id == job_id]
    assert [j.state for j in rows] == (["SUBMITTING"] if kept else [])
    if kept:
        assert "sbatch timed out" in rows[0].meta["submit_unknown"]["reason"]
        assert [e["kind"] for e in app.store.events(job_id)] == ["submit_outcome_unknown"]


@pytest.mark.parametrize("answer", ["handle", "rejected", "timed out"])
def test_an_interrupt_in_the_work_waits_for_the_submission_and_keeps_a_row_that_may_have_got_through(app, answer):
    """A launcher interrupted while sbatch runs: a job that reached the scheduler, or may have,
    stays SUBMITTING (watch/status settle it by its dedupe token); one the scheduler rejected
    is removed."""
    log = []
    job_id = _submitting(app)
    error = {"handle": None, "rejected": SubmitError("no"), "timed out": TransientError("sbatch timed out")}[answer]

    def work():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        submit_recorded(app.store, TwoHalves(log, fail_wait=error), None, job_id, work)
    assert log == ["start", "wait"]
    rows = [j for j in app.store.list_jobs() if j.job_id == job_id]
    assert [j.state for j in rows] == ([] if answer == "rejected" else ["SUBMITTING"])


# ---------------------------------------------------------------- provenance drafted before the native id
def test_a_draft_is_completed_with_the_handle_redacted_like_the_rest(app, monkeypatch):
    monkeypatch.setenv("LAUNCHFAST_TOKEN", "Secret-Value-123456789")
    spec = JobSpec(name="j", run="true")
    draft = Captured({"run": "j-1", "native_id": None, "attempt": None, "name": "j"})
    done = complete_launch(app, draft, spec, "local", "j-1", Handle("fake", "t", "j-1", "4242", 2))
    assert done.doc == {"run": "j-1", "native_id": "4242", "attempt": 2, "name": "j"}
    odd = complete_launch(app, draft, spec, "local", "j-1", Handle("fake", "t", "j-1", "Secret-Value-123456789", 1))
    assert odd.doc["native_id"] == MASK
    failed = Captured(None, error="boom")
    assert complete_launch(app, failed, spec, "local", "j-1", Handle("fake", "t", "j-1", "1", 1)) is failed


# ---------------------------------------------------------------- the shared helper
def test_a_tampered_shared_helper_is_replaced(tmp_path):
    data = b"PK helper " * 20
    jobs = tmp_path / "jobs"
    staging.stage_helper_locally(str(jobs / "j1"), data)
    shared = staging.shared_helper_path(str(jobs), data)
    os.chmod(shared, 0o644)
    with open(shared, "r+b") as f:
        f.write(b"XX")
    out = staging.stage_helper_locally(str(jobs / "j9"), data)
    assert open(out, "rb").read() == data == open(shared, "rb").read()


# ---------------------------------------------------------------- per-process caches and their invalidation
def test_the_package_hash_follows_the_package_list(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setattr(capture, "_PACKAGES", {})
    installed = [("a==1",)]
    monkeypatch.setattr(capture, "_installed_packages", lambda: installed[0])
    env = capture.python_env()
    assert env["packages"] == ["a==1"] and env["packages_sha256"] == capture.sha256_text("a==1\n")
    installed[0] = ("a==1", "b==2")
    assert capture.python_env()["packages_sha256"] == env["packages_sha256"]  # no folder changed: kept
    (site / "b-2.dist-info").mkdir()
    os.utime(site, ns=(time.time_ns() + 10**9,) * 2)
    again = capture.python_env()
    assert again["packages"] == ["a==1", "b==2"] and again["packages_sha256"] == capture.sha256_text("a==1\nb==2\n")
