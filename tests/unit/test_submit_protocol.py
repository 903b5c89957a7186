"""The submission protocol (launcher.launching.submit): an outcome the launcher does not
know stays unknown until the scheduler settles it, records are a compare-and-swap on (job,
attempt, claim owner), a holder whose claim lapsed never submits and settles what it
submitted anyway, cancel wins over an in-flight launch, and an attempt's start is claimed
once on the job side."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest

from launcher.backend.protocols import Handle, JobRef
from launcher.core.errors import SubmitError, SubmitOutcomeUnknown
from launcher.jobside.startclaim import EXIT_DUPLICATE, claim_start, holder
from launcher.launching.submit import (claim_start_for, claimed_start, fenced_submit, launch_alive,
                                       proves_not_submitted, record_or_cancel, settle_unrecorded)
from launcher.recovery.policy import reconcile_submitting
from launcher.state.store import AttemptTaken, ClaimLost, StateStore
from launcher.transport.errors import ConnectionLostError, HostUnreachableError
from launcher_backends.slurm.submitting import may_have_been_accepted, submitted


@pytest.fixture
def store(tmp_path):
    s = StateStore(tmp_path / "home")
    yield s
    s.close()


def _job(store, job_id="j-1", state_submitting=True):
    store.begin_job(job_id, "j", "t", "local", None, "name: j\n")
    return job_id


class Backend:
    """Records what the protocol asked of the scheduler (pure logic under test; the real
    backends' part is covered by the integration tiers)."""

    name = "fake"

    def __init__(self):
        self.cancelled, self.submitted = [], []

    def cancel(self, handle):
        self.cancelled.append(handle.native_id)


def H(native, attempt=2, job_id="j-1"):
    return Handle("fake", "t", job_id, native, attempt)


# ---------------------------------------------------------------- what proves "not submitted"
def test_only_a_rejection_or_a_command_that_never_started_proves_nothing_was_submitted():
    assert proves_not_submitted(SubmitError("sbatch rejected the script"))
    assert proves_not_submitted(HostUnreachableError("connection refused"))
    assert not proves_not_submitted(ConnectionLostError("connection lost"))
    assert not proves_not_submitted(SubmitOutcomeUnknown("socket timed out"))
    assert not proves_not_submitted(KeyboardInterrupt())
    assert not proves_not_submitted(RuntimeError("a bug after sbatch answered"))


def test_sbatch_errors_that_may_have_reached_the_controller_are_unknown_not_rejected():
    assert may_have_been_accepted("sbatch: error: Batch job submission failed: Socket timed out on send/recv "
                                  "operation")
    assert not may_have_been_accepted("sbatch: error: Batch job submission failed: Invalid partition name "
                                      "specified")
    # sbatch says this of a receive that timed out too: the controller may have the job
    assert may_have_been_accepted("sbatch: error: Unable to contact slurm controller (connect failure)")
    job = JobRef("j-1", 1, job_dir="/x")
    request = SimpleNamespace(job=job, meta={"job_dir": "/x"})
    timed_out = SimpleNamespace(returncode=1, stdout="", stderr="sbatch: error: Batch job submission failed: "
                                                                "Socket timed out on send/recv operation\n")
    finds = []

    class Slurm:
        name = "slurm"
        target = SimpleNamespace(name="cl")

        def __init__(self, found):
            self.found = found

        def find(self, j):
            finds.append(j.job_id)
            return self.found

    with pytest.raises(SubmitOutcomeUnknown, match="Do not launch it again"):
        submitted(Slurm(None), request, "/x/a.sbatch", lambda: timed_out)
    got = submitted(Slurm(Handle("slurm", "cl", "j-1", "77", 1)), request, "/x/a.sbatch", lambda: timed_out)
    assert got.native_id == "77" and finds == ["j-1", "j-1"]
    rejected = SimpleNamespace(returncode=1, stdout="", stderr="sbatch: error: Invalid partition name specified\n")
    with pytest.raises(SubmitError, match="rejected"):
        submitted(Slurm(None), request, "/x/a.sbatch", lambda: rejected)
    assert len(finds) == 2  # a rejection is not looked up


# ---------------------------------------------------------------- reconciling a SUBMITTING row
def test_nothing_ran_is_concluded_only_from_a_lookup_that_worked_and_left_no_trace():
    assert reconcile_submitting(True, 5.0).action == "adopt"
    r = reconcile_submitting(False, 5000.0, looked=False, lookup_error="slurmctld: Socket timed out")
    assert r.action == "wait" and "Socket timed out" in r.reason
    assert reconcile_submitting(False, 5000.0, trace="id 4242").action == "adopt_trace"
    r = reconcile_submitting(False, 5000.0, trace="started")
    assert r.action == "started" and "nothing ran" not in r.reason
    assert reconcile_submitting(False, 5.0).action == "wait"  # the launch may still run
    assert reconcile_submitting(False, 5.0, launch_over=True, quiet_s=10.0).action == "wait"
    r = reconcile_submitting(False, 75.0, launch_over=True, quiet_s=61.0)
    assert r.action == "fail" and "nothing ran" in r.reason
    assert reconcile_submitting(False, 601.0).action == "fail"


def test_a_launch_on_this_host_is_alive_while_its_process_is(tmp_path):
    import socket
    import subprocess

    assert launch_alive({"launch_by": f"{socket.gethostname()}:{os.getpid()}"}) is True
    p = subprocess.Popen(["true"])
    p.wait()
    assert launch_alive({"launch_by": f"{socket.gethostname()}:{p.pid}"}) is False
    assert launch_alive({"launch_by": f"another-host:{os.getpid()}"}) is None
    assert launch_alive({}) is None


# ---------------------------------------------------------------- the record is a compare-and-swap
def test_an_attempt_recorded_with_one_id_is_never_recorded_over_with_another(store):
    job_id = _job(store)
    store.record_submission(job_id, 1, "t", H("10", 1).to_json(), "10")
    store.record_submission(job_id, 1, "t", H("10", 1).to_json(), "10", state="RUNNING")  # the same: idempotent
    with pytest.raises(AttemptTaken, match="already recorded as id 10") as e:
        store.record_submission(job_id, 1, "t", H("11", 1).to_json(), "11")
    assert isinstance(e.value, ClaimLost) and e.value.recorded_native == "10"
    assert [a.native_id for a in store.attempts(job_id)] == ["10"]


def test_cancel_wins_over_a_launch_that_records_after_it(store):
    job_id = _job(store)
    store.close_job(job_id, "CANCELLED", "cancelled by the user while it was being launched")
    backend = Backend()
    h = H("55", 1)
    rec = lambda: store.record_submission(job_id, 1, "t", h.to_json(), "55")  # noqa: E731
    assert record_or_cancel(store, backend, job_id, h, rec) is False
    assert backend.cancelled == ["55"]
    job = store.get_job(job_id)
    assert job.state == "CANCELLED"
    assert [(a.native_id, a.state) for a in store.attempts(job_id)] == [("55", "CANCELLED")]
    assert "cancelled_in_flight" in [e["kind"] for e in store.events(job_id)]


# ---------------------------------------------------------------- the fence
def test_a_holder_whose_claim_lapsed_does_not_submit(store, monkeypatch):
    monkeypatch.setenv("LAUNCHER_CLAIM_TTL", "30")
    job_id = _job(store)
    submits = []
    c = store.claim(job_id, ttl=30)
    got = fenced_submit(store, Backend(), job_id, c.owner, lambda: None, lambda: submits.append(1) or H("1"))
    assert got[1] is False and submits == [1]
    # paused past its claim: another watcher took it over meanwhile
    store.claim(job_id, ttl=30, owner="other:1:x", now=time.time() + 31)
    with pytest.raises(ClaimLost, match="not submitting"):
        fenced_submit(store, Backend(), job_id, c.owner, lambda: None, lambda: submits.append(2) or H("2"))
    assert submits == [1]
    # an earlier submission found by its dedupe token is adopted, never submitted again
    c2 = store.claim(job_id, ttl=30, owner="other:1:x")
    found = fenced_submit(store, Backend(), job_id, c2.owner, lambda: H("9"), lambda: submits.append(3) or H("3"))
    assert found[0].native_id == "9" and found[1] is True and submits == [1]


@pytest.mark.parametrize("recorded, expect, cancelled", [
    ("mine", "adopted", []),       # the new holder found it by its token and recorded it
    (None, "recorded", []),        # nobody recorded the attempt: it is the attempt
    ("other", "cancelled", ["5"]),  # the new holder submitted its own: ours is a second copy
])
def test_a_submission_made_under_a_lapsed_claim_is_adopted_recorded_or_cancelled(store, recorded, expect,
                                                                                 cancelled):
    job_id = _job(store)
    store.record_submission(job_id, 1, "t", H("4", 1).to_json(), "4")
    if recorded:
        native = "5" if recorded == "mine" else "6"
        store.record_submission(job_id, 2, "t", H(native).to_json(), native)
    backend = Backend()
    assert settle_unrecorded(store, backend, job_id, 2, H("5"), wait_s=0) == expect
    assert backend.cancelled == cancelled
    natives = {a.attempt: a.native_id for a in store.attempts(job_id)}
    assert natives[2] == {"mine": "5", None: "5", "other": "6"}[recorded]


def test_settling_waits_for_the_claim_and_cancels_a_copy_when_it_never_comes(store):
    job_id = _job(store)
    store.record_submission(job_id, 2, "t", H("6").to_json(), "6")
    store.claim(job_id, ttl=300, owner="other:1:x")  # the new holder is busy on it
    backend = Backend()
    assert settle_unrecorded(store, backend, job_id, 2, H("5"), wait_s=0.3, sleep=lambda s: time.sleep(0.05)) == \
        "cancelled"
    assert backend.cancelled == ["5"]


# ---------------------------------------------------------------- the job side's start claim
def test_an_attempts_start_is_claimed_once(tmp_path):
    d = str(tmp_path / "jobs" / "j-1")
    assert claim_start(d, 2, "101") == (True, "101")
    assert claim_start(d, 2, "101") == (True, "101")  # a requeue of the same job goes on
    assert claim_start(d, 2, "102") == (False, "101")  # a duplicate submission stands down
    assert claim_start(d, 3, "102") == (True, "102")
    assert holder(d, 2) == "101" and holder(d, 4) is None
    with pytest.raises(ValueError, match="--self is empty"):
        claim_start(d, 5, "")


def test_the_start_claim_command_stands_a_duplicate_down_before_user_code(tmp_path):
    import subprocess
    import sys

    d = str(tmp_path / "jd")
    script = ("python3 -m launcher.jobside start-claim --job-dir %s --attempt 1 --self \"$1\" || exit $?; "
              "echo ran >> %s/ran" % (d, tmp_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHER_")}
    env["PATH"] = os.path.dirname(sys.executable) + ":" + env["PATH"]
    first = subprocess.run(["bash", "-c", script, "_", "7001"], capture_output=True, text=True, env=env)
    dup = subprocess.run(["bash", "-c", script, "_", "7002"], capture_output=True, text=True, env=env)
    again = subprocess.run(["bash", "-c", script, "_", "7001"], capture_output=True, text=True, env=env)
    assert (first.returncode, dup.returncode, again.returncode) == (0, EXIT_DUPLICATE, 0), dup.stderr
    assert "already started as job 7001" in dup.stderr and "stands down" in dup.stderr
    assert (tmp_path / "ran").read_text() == "ran\nran\n"


def test_the_launcher_reads_a_start_claim_from_the_job_folder_and_the_sweeps_element_folder(store):
    from launcher.state.rows import JobRow  # noqa: F401 - the row shape the reader takes

    row = SimpleNamespace(job_id="sw-1-e3", meta={"sweep": {"id": "sw-1", "index": 3}})
    assert claimed_start(store, row, 1) is None
    claim_start(str(store.home / "jobs" / "sw-1" / "element-3"), 1, "900_3")
    assert claimed_start(store, row, 1) == "900_3"
    plain = SimpleNamespace(job_id="j-9", meta={})
    claim_start(str(store.job_dir("j-9")), 2, "4321")
    assert claimed_start(store, plain, 2) == "4321" and claimed_start(store, plain, 1) is None


def _element(store, job_id="sw-1-e3", sweep_id="sw-1", index=3):
    store.begin_job(job_id, "sw", "t", "slurm", None, "name: sw\n",
                    meta={"sweep": {"id": sweep_id, "index": index, "size": 4}})
    return job_id


def _array_task(native, attempt, job_dir, job_id="sw-1-e3"):
    """A Slurm-like handle of an element submitted as an array task (``sweep_array``), from the
    submission whose job folder is JOB_DIR."""
    return Handle("fake", "t", job_id, native, attempt,
                  extra={"job_dir": str(job_dir), "sweep_array": native.split("_")[0]})


def test_an_element_submitted_again_alone_claims_its_start_in_its_own_element_folder(store):
    # attempt 2 of an element is submitted alone as an array of one: its job side claims in
    # <element job folder>/element-<i> (templates/sbatch.sh.j2), which the launcher must read
    job_id = _element(store)
    row = store.get_job(job_id)
    own = store.home / "jobs" / job_id
    claim_start(str(own / "element-3"), 2, "77_3")
    assert claimed_start(store, row, 2) == "77_3"
    assert claimed_start(store, row, 2, handle=_array_task("78_3", 2, own)) == "77_3"
    claim_start(str(store.home / "jobs" / "sw-1" / "element-3"), 1, "70_3")  # attempt 1, in the sweep's array
    assert claimed_start(store, row, 1, handle=_array_task("70_3", 1, store.home / "jobs" / "sw-1")) == "70_3"
    assert claimed_start(store, row, 1, handle=_array_task("70_3", 1, own)) is None  # not where that one claims


def test_a_copy_of_an_element_is_cancelled_only_after_its_element_folder_holds_the_recorded_claim(store):
    job_id = _element(store)
    own = store.home / "jobs" / job_id
    own.mkdir(parents=True)
    recorded, copy = _array_task("78_3", 2, own), _array_task("79_3", 2, own)
    store.record_submission(job_id, 2, "t", recorded.to_json(), "78_3")
    backend = Backend()
    assert settle_unrecorded(store, backend, job_id, 2, copy, wait_s=0) == "cancelled"
    assert backend.cancelled == ["79_3"]
    # the element folder the copy's job side would claim in did not exist: it was made and claimed
    assert holder(str(own / "element-3"), 2) == "78_3"
    assert claim_start(str(own / "element-3"), 2, "79_3") == (False, "78_3")
    assert holder(str(own), 2) is None  # and nothing written where no submission of it claims


def test_an_element_copy_that_started_first_in_its_element_folder_takes_over(store):
    job_id = _element(store)
    own = store.home / "jobs" / job_id
    recorded, copy = _array_task("78_3", 2, own), _array_task("79_3", 2, own)
    store.record_submission(job_id, 2, "t", recorded.to_json(), "78_3")
    claim_start(str(own / "element-3"), 2, "79_3")  # the copy started before the recorded one
    backend = Backend()
    assert settle_unrecorded(store, backend, job_id, 2, copy, wait_s=0) == "took over"
    assert backend.cancelled == ["78_3"]
    assert {a.attempt: a.native_id for a in store.attempts(job_id)} == {2: "79_3"}
    assert claimed_start(store, store.get_job(job_id), 2) == "79_3"


def test_over_ssh_an_elements_start_is_read_and_claimed_in_its_element_folder(store):
    job_id = _element(store)
    remote = RemoteBackend()
    remote.claims[(f"{job_id}/element-3", 2)] = "79_3"
    row = store.get_job(job_id)
    assert claimed_start(store, row, 2, remote) == "79_3"
    recorded = _array_task("78_3", 2, "/remote/jobs/" + job_id)
    assert claim_start_for(store, row, 2, "78_3", remote, recorded) == "79_3"
    assert (job_id, 2) not in remote.claims  # only the folder that submission claims in


# ---------------------------------------------------------------- a copy that started first
def _claimed_by(store, job_id, attempt, native):
    claim_start(str(store.job_dir(job_id)), attempt, native)


def test_a_copy_that_holds_the_attempts_start_is_the_attempt_and_the_recorded_one_is_cancelled(store):
    job_id = _job(store)
    store.record_submission(job_id, 1, "t", H("4", 1).to_json(), "4")
    store.record_submission(job_id, 2, "t", H("6").to_json(), "6")
    _claimed_by(store, job_id, 2, "5")  # our copy started before the recorded one could
    backend = Backend()
    assert settle_unrecorded(store, backend, job_id, 2, H("5"), wait_s=0) == "took over"
    assert backend.cancelled == ["6"]  # it would stand down at its start; cancelled, it frees its place now
    attempt = {a.attempt: a for a in store.attempts(job_id)}[2]
    assert (attempt.native_id, attempt.state) == ("5", "RUNNING")
    assert "id 6, recorded first, stands down" in attempt.reason
    assert Handle.from_json(store.get_job(job_id).handle).native_id == "5"
    kinds = [(e["kind"], e.get("native_id"), e.get("replaces")) for e in store.events(job_id)]
    assert ("adopted", "5", "6") in kinds and ("duplicate_cancelled", "6", None) in kinds


def test_a_copy_is_cancelled_only_after_the_start_is_claimed_for_the_recorded_one(store):
    job_id = _job(store)
    store.record_submission(job_id, 2, "t", H("6").to_json(), "6")
    store.job_dir(job_id).mkdir(parents=True, exist_ok=True)
    backend = Backend()
    assert settle_unrecorded(store, backend, job_id, 2, H("5"), wait_s=0) == "cancelled"
    assert backend.cancelled == ["5"]
    # the copy, had it been about to start, now stands down at its start claim
    assert holder(str(store.job_dir(job_id)), 2) == "6"
    assert claim_start(str(store.job_dir(job_id)), 2, "5") == (False, "6")


def test_a_copy_of_an_attempt_a_newer_one_followed_is_cancelled_even_when_it_started(store):
    job_id = _job(store)
    store.record_submission(job_id, 2, "t", H("6").to_json(), "6")
    store.record_submission(job_id, 3, "t", H("7", 3).to_json(), "7")
    _claimed_by(store, job_id, 2, "5")
    backend = Backend()
    assert settle_unrecorded(store, backend, job_id, 2, H("5"), wait_s=0) == "cancelled"
    assert backend.cancelled == ["5"]
    assert {a.attempt: a.native_id for a in store.attempts(job_id)} == {2: "6", 3: "7"}


def test_without_the_claim_a_copy_that_started_first_is_left_running_for_the_watcher(store):
    job_id = _job(store)
    store.record_submission(job_id, 2, "t", H("6").to_json(), "6")
    _claimed_by(store, job_id, 2, "5")
    store.claim(job_id, ttl=300, owner="other:1:x")  # the new holder is busy on it
    backend = Backend()
    assert settle_unrecorded(store, backend, job_id, 2, H("5"), wait_s=0.2,
                             sleep=lambda s: time.sleep(0.05)) == "started first"
    assert backend.cancelled == []
    assert {a.attempt: a.native_id for a in store.attempts(job_id)} == {2: "6"}


class RemoteBackend(Backend):
    """A target whose job folders are on its login node (``RemoteStarts``): start claims live
    in CLAIMS, {(folder, attempt): id}, as create-only files there would."""

    def __init__(self, elsewhere=True, down=False):
        super().__init__()
        self.claims, self.elsewhere, self.down = {}, elsewhere, down

    def starts_elsewhere(self):
        return self.elsewhere

    def start_holder(self, folder, attempt):
        if self.down:
            raise HostUnreachableError("login: no route to host")
        return self.claims.get((folder, attempt))

    def claim_start(self, folder, attempt, native_id):
        if self.down:
            raise HostUnreachableError("login: no route to host")
        return self.claims.setdefault((folder, attempt), native_id)


def test_where_the_job_folders_are_elsewhere_the_start_is_read_and_claimed_through_the_backend(store):
    job_id = _job(store)
    store.record_submission(job_id, 2, "t", H("6").to_json(), "6")
    remote = RemoteBackend()
    remote.claims[(job_id, 2)] = "5"  # our copy started first, on the login node
    assert claimed_start(store, store.get_job(job_id), 2) is None  # nothing in this machine's folders
    assert claimed_start(store, store.get_job(job_id), 2, remote) == "5"
    assert settle_unrecorded(store, remote, job_id, 2, H("5"), wait_s=0) == "took over"
    assert remote.cancelled == ["6"] and {a.attempt: a.native_id for a in store.attempts(job_id)} == {2: "5"}
    other = _job(store, "j-2")
    store.record_submission(other, 2, "t", H("8", job_id=other).to_json(), "8")
    assert settle_unrecorded(store, remote, other, 2, H("7", job_id=other), wait_s=0) == "cancelled"
    assert remote.claims[(other, 2)] == "8"  # claimed for the recorded one before its copy was cancelled


def test_a_backend_whose_folders_are_here_or_that_does_not_answer_gives_no_remote_trace(store):
    job_id = _job(store)
    row = store.get_job(job_id)
    here = RemoteBackend(elsewhere=False)
    here.claims[(job_id, 1)] = "5"
    assert claimed_start(store, row, 1, here) is None  # its folders are this machine's: read here
    claim_start(str(store.job_dir(job_id)), 1, "4")
    assert claimed_start(store, row, 1, here) == "4"
    assert claimed_start(store, row, 1, RemoteBackend(down=True)) is None
    assert claim_start_for(store, row, 1, "9", RemoteBackend(down=True)) is None


def test_replacing_an_attempt_is_a_compare_and_swap_on_the_recorded_id_and_the_claim(store):
    job_id = _job(store)
    store.record_submission(job_id, 2, "t", H("6").to_json(), "6")
    with pytest.raises(AttemptTaken, match="recorded as id 6, not 9"):
        store.replace_attempt(job_id, 2, "9", "t", H("5").to_json(), "5", "r")
    c = store.claim(job_id, ttl=30)
    with pytest.raises(ClaimLost):
        store.replace_attempt(job_id, 2, "6", "t", H("5").to_json(), "5", "r", owner="someone:1:else")
    store.replace_attempt(job_id, 2, "6", "t", H("5").to_json(), "5", "r", owner=c.owner)
    assert {a.attempt: a.native_id for a in store.attempts(job_id)} == {2: "5"}
