"""Issue 28, HIGH 1, at the local backend's seam: every file of a submission is named by its
own id (its supervisor's pid), so a second submission of the same attempt (a watcher's
duplicate) and its cancel never touch the real one; jobs of the previous version, whose
files are named by the attempt's number alone, are still read and cancelled by those names."""

from __future__ import annotations

import subprocess
from pathlib import Path

from launcher.backend.protocols import Handle
from launcher.backend.sections import spec_from_text
from launcher.core.status import JobState
from launcher.jobside.startclaim import holder
from launcher.launching.submission import new_job_ref
from launcher_backends.local import processes
from launcher_backends.local.backend import FILES_KEY, PER_SUBMISSION
from tests.fixtures.polling import poll


def _ended(h) -> bool:
    return not processes.alive(int(h.native_id), h.extra["start_ticks"])


def test_a_duplicate_submission_and_its_cancel_leave_the_real_attempt_alone(app, tmp_path):
    backend = app.backend("local")
    ran = tmp_path / "ran"
    spec = spec_from_text(f"name: dup\nrun: echo $LAUNCHER_SELF_ID >> {ran}; sleep 2\n")
    job = new_job_ref(app.store, "dup-1", 1)
    request = backend.render(spec, app.facts("local"), job)
    real = backend.submit(request)
    poll("the real submission claimed the start", lambda: holder(job.job_dir, 1) == real.native_id, timeout=60,
         interval=0.05)
    dup = backend.submit(request)  # the same attempt again: it stands down at its start claim
    assert dup.native_id != real.native_id and dup.extra[FILES_KEY] == PER_SUBMISSION
    poll("the duplicate stood down", lambda: _ended(dup), timeout=60, interval=0.05)
    backend.cancel(dup)
    st_real, st_dup = backend.status([real, dup])
    assert st_real.state is JobState.RUNNING, st_real
    assert st_dup.state is JobState.CANCELLED, st_dup
    assert backend.find(job).native_id == real.native_id  # the submission that claimed the start
    poll("the real attempt ended", lambda: _ended(real), timeout=60, interval=0.05)
    st_real, st_dup = backend.status([real, dup])
    assert st_real.state is JobState.COMPLETED and st_real.exit_code == 0, st_real
    assert st_dup.state is JobState.CANCELLED and st_dup.exit_code == 3, st_dup
    assert ran.read_text().split() == [real.native_id]  # the duplicate ran no user code
    names = {p.name for p in Path(job.job_dir).iterdir()}
    assert {f"attempt-1.{real.native_id}.started", f"exit-1.{real.native_id}", f"exit-1.{real.native_id}.job",
            f"attempt-1.{dup.native_id}.started", f"exit-1.{dup.native_id}", f"cancelled-1.{dup.native_id}"} <= names
    assert f"cancelled-1.{real.native_id}" not in names and "cancelled-1" not in names


def test_a_job_the_previous_version_started_is_read_found_and_cancelled_by_its_old_names(app, tmp_path):
    backend = app.backend("local")
    job = new_job_ref(app.store, "old-1", 1)
    d = Path(job.job_dir)
    d.mkdir(parents=True, exist_ok=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    token = job.dedupe_token.replace(" ", "_")
    (d / "attempt-1.started").write_text(f"{gone.pid} 12345 {token}\n")
    (d / "exit-1").write_text("0\n")
    old = Handle("local", "local", job.job_id, str(gone.pid), 1,
                 extra={"job_dir": str(d), "start_ticks": 12345, "submitted": 0.0})
    st = backend.status([old])[0]
    assert st.state is JobState.COMPLETED and st.exit_code == 0, st
    found = backend.find(job)
    assert found.native_id == str(gone.pid) and FILES_KEY not in found.extra
    (d / "exit-1").write_text("1\n")
    backend.cancel(old)
    assert (d / "cancelled-1").exists()
    assert backend.status([old])[0].state is JobState.CANCELLED
