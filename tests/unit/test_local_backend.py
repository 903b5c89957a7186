"""The local backend runs real processes on this machine."""

import os

import pytest

from launcher.launching.launch import launch
from launcher.backend.sections import spec_from_text
from launcher.core.status import JobState
from launcher.launching.tracking import wait_for
from tests.fixtures.polling import poll


def _launch(app, text):
    spec = spec_from_text(text)
    return launch(app, spec, text, None, "local")


def test_job_sees_the_env_contract_and_completes(app):
    j = _launch(app, "name: envy\nrun: 'env | grep -E \"^(LAUNCHER_|MASTER_)\" | sort'\nenv: {X: 'a b'}\n")
    st = wait_for(app, j.job_id, poll=0.1, timeout=120)
    assert st.state is JobState.COMPLETED and st.exit_code == 0
    out = "".join(app.backend("local").logs(j.handle))
    for line in (f"LAUNCHER_JOB_ID={j.job_id}", "LAUNCHER_ATTEMPT=1", "LAUNCHER_NUM_NODES=1",
                 "LAUNCHER_NODE_RANK=0", "MASTER_ADDR=127.0.0.1", "LAUNCHER_RESUME_FROM="):
        assert line in out.splitlines(), (line, out)


def test_a_second_job_on_a_shared_root_is_attempt_1_of_generation_2(app, tmp_path):
    """LAUNCHER_ATTEMPT is the launcher's attempt; the checkpoint generation is LAUNCHER_GENERATION
    (issue 33: the attempt was rewritten to the generation, so job B's first attempt read 2)."""
    root = tmp_path / "shared-root"
    outs = []
    for name in ("a", "b"):
        j = _launch(app, f"name: {name}\ncheckpoint: {{root: '{root}'}}\n"
                         "run: 'echo attempt=$LAUNCHER_ATTEMPT generation=$LAUNCHER_GENERATION'\n")
        st = wait_for(app, j.job_id, poll=0.1, timeout=120)
        assert st.state is JobState.COMPLETED, st
        outs.append("".join(app.backend("local").logs(j.handle)))
    assert "attempt=1 generation=1" in outs[0].splitlines(), outs[0]
    assert "attempt=1 generation=2" in outs[1].splitlines(), outs[1]
    assert "launcher: attempt 1 (checkpoint generation 2) resuming from <fresh start>" in outs[1], outs[1]


def test_failed_job_keeps_its_exit_code(app):
    j = _launch(app, "name: f\nrun: exit 5\n")
    st = wait_for(app, j.job_id, poll=0.1, timeout=120)
    assert st.state is JobState.FAILED and st.exit_code == 5 and "exit 5" in st.reason


def test_cancel_ends_the_whole_process_group_and_is_idempotent(app, tmp_path):
    marker = tmp_path / "child.pid"
    j = _launch(app, f"name: c\nrun: 'sleep 300 & echo $! > {marker}; wait'\n")
    # the shell creates the file before echo writes into it: wait for the whole line
    poll("the child's pid in its file", lambda: marker.exists() and marker.read_text().endswith("\n"), timeout=10,
         interval=0.05)
    child = int(marker.read_text())
    backend = app.backend("local")
    backend.cancel(j.handle)
    backend.cancel(j.handle)
    st = backend.status([j.handle])[0]
    assert st.state is JobState.CANCELLED
    poll(f"child {child} gone or a zombie", lambda: _gone(child), timeout=5, interval=0.05)


def _gone(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    except FileNotFoundError:
        return True


def test_setup_failure_is_reported(app):
    j = _launch(app, "name: s\nsetup: 'exit 4'\nrun: echo never\n")
    st = wait_for(app, j.job_id, poll=0.1, timeout=120)
    assert st.state is JobState.FAILED and st.exit_code == 97
    assert "never" not in "".join(app.backend("local").logs(j.handle))


def test_missing_secret_fails_before_anything_runs(app, monkeypatch):
    monkeypatch.delenv("SOME_TOKEN", raising=False)
    from launcher.core.errors import SubmitError

    with pytest.raises(SubmitError, match="SOME_TOKEN"):
        _launch(app, "name: s\nrun: 'true'\nsecrets: [SOME_TOKEN]\n")
    assert app.store.list_jobs() == []


def test_secret_reaches_the_job_but_not_the_script_or_state(app, monkeypatch, launcher_env):
    import hashlib

    monkeypatch.setenv("SOME_TOKEN", "s3cr3t-value-123")
    digest = hashlib.sha256(b"s3cr3t-value-123").hexdigest()
    j = _launch(app, "name: s\nrun: 'test \"$(printf %s \"$SOME_TOKEN\" | sha256sum | cut -d\" \" -f1)\" = "
                     f"{digest} && echo got-it'\nsecrets: [SOME_TOKEN]\n")
    st = wait_for(app, j.job_id, poll=0.1, timeout=120)
    assert st.state is JobState.COMPLETED
    assert "got-it" in "".join(app.backend("local").logs(j.handle))
    for p in launcher_env["home"].rglob("*"):
        if p.is_file():
            assert b"s3cr3t-value-123" not in p.read_bytes(), p


def test_notice_checkpoint_then_watch_resumes_to_the_uninterrupted_result(app, tmp_path):
    """The local target keeps the same contract: a preemption notice makes the example
    trainer commit and exit 75; `launcher watch` restarts it from that commit, and the
    final result equals an uninterrupted run's."""
    import json
    import signal as sig
    import subprocess
    import sys
    from pathlib import Path

    from launcher.recovery import watch

    train = Path(__file__).resolve().parents[2] / "examples" / "train.py"
    subprocess.run([sys.executable, str(train), "--steps", "40", "--result", str(tmp_path / "ref.json")],
                   check=True, capture_output=True)
    text = (f"name: notice\nrun: |\n  echo started\n  python3 {train} --steps 40 --every 5 --sleep 0.2 "
            f"--result {tmp_path / 'out.json'}\ncheckpoint: {{root: {tmp_path / 'ck'}}}\n")
    j = _launch(app, text)
    log = Path(j.handle.extra["job_dir"]) / "output.log"
    poll("step 12 in the job's log", lambda: log.exists() and "step 12 " in log.read_text(), timeout=120,
         interval=0.05, detail=lambda: f"job row {app.store.get_job(j.job_id)}; log:\n"
                                       + (log.read_text() if log.exists() else "(none)"))
    script = Path(j.handle.extra["job_dir"]) / "attempt-1.sh"
    pids = subprocess.run(["pgrep", "-f", f"bash {script}"], capture_output=True, text=True).stdout.split()
    for p in pids:
        os.kill(int(p), sig.SIGUSR1)
    st = wait_for(app, j.job_id, poll=0.1, timeout=120)
    assert st.state is JobState.PREEMPTED and st.exit_code == 75
    poll("watch: done", lambda: any(o.action == "done" for o in watch.cycle(app)), timeout=120, interval=0.1)
    attempts = app.store.attempts(j.job_id)
    assert [a.state for a in attempts] == ["PREEMPTED", "COMPLETED"]
    assert attempts[1].resume_step >= 10
    assert json.loads((tmp_path / "out.json").read_text()) == json.loads((tmp_path / "ref.json").read_text())


def test_a_run_that_exits_at_once_on_the_notice_keeps_its_own_exit_status(app, tmp_path):
    """The notice interrupts the script's wait (128+signal); a run that saved and exited 75
    before the script looked again is PREEMPTED with its own exit status, not 138. Repeated:
    the window is a race."""
    import json
    import signal as sig
    import subprocess
    from pathlib import Path

    prog = ("import signal, sys, time; signal.signal(signal.SIGUSR1, lambda *a: sys.exit(75)); "
            "open(sys.argv[1], 'w').close(); time.sleep(60)")
    for i in range(3):
        ready = tmp_path / f"ready-{i}"
        j = _launch(app, f"name: quick{i}\nrun: {json.dumps(['python3', '-c', prog, str(ready)])}\n")
        poll("the program's handler", ready.exists, timeout=120, interval=0.05)
        script = Path(j.handle.extra["job_dir"]) / "attempt-1.sh"
        for p in subprocess.run(["pgrep", "-f", f"bash {script}"], capture_output=True, text=True).stdout.split():
            os.kill(int(p), sig.SIGUSR1)
        st = wait_for(app, j.job_id, poll=0.1, timeout=120)
        assert st.state is JobState.PREEMPTED and st.exit_code == 75, (st.state, st.exit_code)
