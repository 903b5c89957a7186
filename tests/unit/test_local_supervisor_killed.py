"""A local job whose supervisor is killed (kill -9 of that one process) keeps running: its
program's process group lives on. ``status``, ``find``, ``watch`` and ``cancel`` must still see
it and act on it, through the group and the marker its processes carry, not only through the
supervisor; once it ends they say how, when that can be known, and say that it cannot when not."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from launcher.backend.protocols import Handle
from launcher.backend.sections import spec_from_text
from launcher.core.errors import LauncherError, SubmitError
from launcher.core.status import JobState
from launcher.launching.launch import launch
from launcher.launching.submission import job_ref, new_job_ref
from launcher.launching.tracking import refresh, wait_for
from launcher.recovery import watch
from launcher.recovery.cancel import cancel_job
from launcher_backends.local import processes
from tests.fixtures.polling import poll


def _launch(app, tmp_path: Path, code: int = 0):
    """A job that says it is ready, then runs until the test creates ``go`` and exits CODE."""
    ready, go = tmp_path / "ready", tmp_path / "go"
    run = f"touch {ready}; while [ ! -e {go} ]; do sleep 0.05; done; exit {code}"
    text = f"name: orphan\nrun: {run!r}\n"
    j = launch(app, spec_from_text(text), text, None, "local")
    poll("the job's program is running", ready.exists, timeout=30, interval=0.05)
    return j, go


def _kill_supervisor(handle: Handle) -> int:
    """kill -9 the supervisor alone (not its group), and reap it: this process started it."""
    pid = int(handle.native_id)
    os.kill(pid, signal.SIGKILL)
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    assert not Path(f"/proc/{pid}").exists()
    return pid


def _members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group PGID."""
    out = []
    for e in os.scandir("/proc"):
        if e.name.isdigit():
            try:
                f = open(f"/proc/{e.name}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if f[0] != "Z" and int(f[2]) == pgid:
                out.append(int(e.name))
    return out


def _state(app, job_id: str):
    return refresh(app, [app.store.get_job(job_id)])[job_id]


@pytest.fixture
def cleanup():
    """Process groups a test leaves behind are killed (a failed assertion must not leave a sleeper)."""
    groups: list[int] = []
    yield groups
    for g in groups:
        try:
            os.killpg(g, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_job_whose_supervisor_was_killed_is_running_found_watched_and_cancelled(app, tmp_path, cleanup):
    j, _ = _launch(app, tmp_path)
    pgid = _kill_supervisor(j.handle)
    cleanup.append(pgid)
    assert _members(pgid), "the job's program outlives its supervisor"

    st = _state(app, j.job_id)
    assert st.state is JobState.RUNNING, st
    assert f"supervisor (pid {pgid})" in st.reason

    # the dedupe lookup still finds the attempt, and it is the same process group
    found = app.backend("local").find(job_ref(app, app.store.get_job(j.job_id), 1))
    assert found is not None and found.native_id == str(pgid)
    assert app.backend("local").status([found])[0].state is JobState.RUNNING

    # watch sees it running: no second copy is started
    outcomes = watch.cycle(app)
    assert [o.action for o in outcomes if o.job_id == j.job_id] == ["running"]
    assert [a.attempt for a in app.store.attempts(j.job_id)] == [1]

    # cancel stops the whole group and says it did
    report = cancel_job(app, j.job_id)
    assert report.ok and report.cancelled == [f"attempt 1 (local id {pgid})"] and not report.note
    assert not report.still_active
    assert _members(pgid) == []
    assert app.store.get_job(j.job_id).state == "CANCELLED"
    assert app.backend("local").status([j.handle])[0].state is JobState.CANCELLED


@pytest.mark.parametrize("code,state", [(0, JobState.COMPLETED), (3, JobState.FAILED)])
def test_the_job_records_how_it_ended_when_its_supervisor_cannot(app, tmp_path, cleanup, code, state):
    j, go = _launch(app, tmp_path, code)
    pgid = _kill_supervisor(j.handle)
    cleanup.append(pgid)
    assert _state(app, j.job_id).state is JobState.RUNNING
    go.touch()
    st = wait_for(app, j.job_id, poll=0.05, timeout=30)
    assert st.state is state and st.exit_code == code, st
    assert f"supervisor (pid {pgid}) was killed" in st.reason
    assert [a.attempt for a in app.store.attempts(j.job_id)] == [1]


def test_a_job_that_ended_with_no_one_to_record_it_is_failed_unknown_never_completed(app, tmp_path, cleanup):
    j, _ = _launch(app, tmp_path)
    pgid = _kill_supervisor(j.handle)
    cleanup.append(pgid)
    os.killpg(pgid, signal.SIGKILL)  # the rest of the group too: nothing records an exit status
    poll("the group is gone", lambda: _members(pgid) == [], timeout=10, interval=0.05)
    st = app.backend("local").status([j.handle])[0]
    assert st.state is JobState.FAILED and st.exit_code is None, st
    assert f"supervisor (pid {pgid}) was killed" in st.reason and "unknown" in st.reason


def test_a_job_that_answers_the_cancels_sigterm_with_a_save_and_exit_75_is_cancelled_not_preempted(app, tmp_path):
    """The cancel's SIGTERM ends the supervisor at once; the job's own record (exit 75, written
    after the cancel) does not turn the cancelled attempt into a preempted one, not even after
    a second cancel (the first cancel's time is kept)."""
    ready = tmp_path / "ready"
    run = f'trap "sleep 0.2; exit 75" TERM; touch {ready}; while :; do sleep 0.05; done'  # a save takes a while
    text = f"name: saver\nrun: {run!r}\n"
    j = launch(app, spec_from_text(text), text, None, "local")
    poll("the trap is set", ready.exists, timeout=30, interval=0.05)
    backend = app.backend("local")
    backend.cancel(j.handle)
    backend.cancel(j.handle)
    st = backend.status([j.handle])[0]
    assert st.state is JobState.CANCELLED and st.exit_code == 75, st


def test_an_exit_recorded_before_the_cancel_is_the_jobs_own_end_and_one_after_it_is_cancelled():
    from launcher_backends.local.backend import _ended

    assert _ended(0, 10.0, None).state is JobState.COMPLETED
    assert _ended(0, 10.0, 11.0).state is JobState.COMPLETED  # it had finished when the cancel came
    assert _ended(75, 10.0, 11.0).state is JobState.PREEMPTED
    assert _ended(0, 12.0, 11.0).state is JobState.CANCELLED  # its answer to the cancel's SIGTERM
    assert _ended(75, 12.0, 11.0).state is JobState.CANCELLED
    assert _ended(3, 10.0, 11.0).state is JobState.CANCELLED  # as before: a failure with a cancel mark
    st = _ended(3, 10.0, None, "recorded by the job itself")
    assert st.state is JobState.FAILED and st.exit_code == 3 and st.reason.endswith("; recorded by the job itself")


def test_a_supervisor_that_ended_before_it_started_the_job_leaves_it_clearly_not_started(app, tmp_path,
                                                                                        monkeypatch):
    from launcher_backends.local import backend as local_backend

    backend = app.backend("local")
    spec = spec_from_text(f"name: never\nrun: touch {tmp_path / 'ran'}\n")
    job = new_job_ref(app.store, "never-1", 1)
    request = backend.render(spec, app.facts("local"), job)
    Path(job.job_dir).mkdir(parents=True, exist_ok=True)
    # the supervisor cannot write its marker (named by its own pid): its folder does not exist
    monkeypatch.setattr(local_backend, "_marker_prefix", lambda job_dir, attempt: str(tmp_path / "nowhere" / "m"))
    h = backend.submit(request)
    poll("the supervisor ended", lambda: not processes.alive(int(h.native_id), h.extra["start_ticks"]),
         timeout=10, interval=0.05)
    st = backend.status([h])[0]
    assert st.state is JobState.FAILED and "never started" in st.reason, st
    assert backend.find(job) is None  # nothing carries its token: a retry may start it
    assert not (tmp_path / "ran").exists()


def test_a_group_is_the_jobs_only_while_a_member_carries_its_token(tmp_path):
    """A process group whose leader is gone counts as the job's while any member carries the
    job's token in its environment and started no earlier than the job's leader; another
    group with the same number (a reused pid) does not."""
    import subprocess

    token = "launcher:orphan-x:1"
    env = {**os.environ, processes.TOKEN_VAR: token}
    leader = subprocess.Popen(["bash", "-c", "sleep 300 & echo $! ; wait"], env=env, start_new_session=True,
                              stdout=subprocess.PIPE, text=True)
    try:
        child = int(leader.stdout.readline())
        ticks = processes.proc_start_ticks(leader.pid)
        leader.kill()
        leader.wait()
        assert _members(leader.pid) == [child]
        assert processes.orphaned_groups({leader.pid: (ticks, token)}) == {leader.pid}
        assert processes.orphaned_groups({leader.pid: (ticks, "launcher:other:1")}) == set()
        later = processes.proc_start_ticks(child) + 1  # a leader that started after every member
        assert processes.orphaned_groups({leader.pid: (later, token)}) == set()
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
    poll("the group is gone", lambda: _members(leader.pid) == [], timeout=10, interval=0.05)
    assert processes.orphaned_groups({leader.pid: (ticks, token)}) == set()


def test_without_proc_the_local_backend_says_it_runs_on_linux_only(app, tmp_path, monkeypatch):
    backend = app.backend("local")
    job = new_job_ref(app.store, "noproc-1", 1)
    request = backend.render(spec_from_text("name: n\nrun: 'true'\n"), app.facts("local"), job)
    monkeypatch.setattr(processes, "PROC", str(tmp_path / "no-proc"))
    with pytest.raises(SubmitError, match="Linux only.*/proc"):
        backend.submit(request)
    h = Handle("local", "local", "noproc-1", "12345", 1, {"job_dir": job.job_dir})
    for call in (lambda: backend.status([h]), lambda: backend.cancel(h), lambda: backend.find(job)):
        with pytest.raises(LauncherError, match="Linux only.*/proc"):
            call()
    assert not (Path(job.job_dir) / "attempt-1.sh").exists()  # nothing was started
