"""Issue 29 on the real test cluster: an attempt submitted twice (a watcher frozen past its
claim, stopped before it could settle its copy), where the copy the store does not record
claimed the attempt's start and runs user code while the recorded one stood down (exit 3).
`launcher watch` must adopt the copy that holds the start, never submit attempt 2 beside it,
whichever of the two jobs squeue lists first (tests/unit/test_started_first.py is the same
race on the local target), on a login node of this machine and on one reached over SSH, whose
job folders (and so start claims) are read there.

The race is put in place directly: a second sbatch of attempt 1's own rendered script while
the first runs, then the store rewritten to record the second, as the race leaves it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.backend.protocols import Handle
from launcher.core.status import FINAL_STATES
from launcher.jobside.startclaim import holder
from launcher.launching.submission import job_ref, job_spec
from tests.fixtures.polling import poll

pytestmark = pytest.mark.slurm


def _use_cli_env(cli, monkeypatch) -> None:
    """This process sees the store, config and cluster the CLI does (for an App of its own)."""
    for name in ("LAUNCHER_HOME", "LAUNCHER_CONFIG", "HOME", "SLURM_CONF"):
        if name in cli.env:
            monkeypatch.setenv(name, cli.env[name])
        else:
            monkeypatch.delenv(name, raising=False)


def _recorded_once_stood_down(app, backend, job: str, attempt: int, dup) -> None:
    """Once DUP, the second submission of ATTEMPT, has stood down: the race's outcome, the store
    recording DUP for that attempt."""
    poll("the second submission to stand down",
         lambda: backend.status([dup])[0].state.value in FINAL_STATES, timeout=120, interval=0.5)
    app.store.update_attempt(job, attempt, native_id=dup.native_id, handle=dup.to_json())
    app.store.update_job(job, handle=dup.to_json())


def _raced(cli, cluster, monkeypatch, target: str, folders: Path):
    """(job id, the Slurm job holding attempt 1's start, the one that stood down, the go file,
    the file each start that ran user code appends its id to), with the store recording the
    one that stood down. FOLDERS: where the target's job folders are, as this machine sees them."""
    from launcher.api.context import App

    shared, tag = cluster.shared_dir, f"{os.getpid()}-{id(cli)}"
    ran, go = shared / f"sf-ran-{tag}", shared / f"sf-go-{tag}"
    spec = cli.spec("raced", {"run": f"echo $LAUNCHER_SELF_ID >> {ran}; while [ ! -e {go} ]; do sleep 0.2; done",
                              "recovery": {"app_error": 2}, "resources": {"time_limit": "5m"}})
    job = cli.launch(spec, target)
    _use_cli_env(cli, monkeypatch)
    app = App()
    try:
        row = app.store.get_job(job)
        real, ref = Handle.from_json(row.handle), job_ref(app, row, 1)
        poll("attempt 1 to claim its start", lambda: holder(str(folders / job), 1) == real.native_id,
             timeout=120, interval=0.3)
        backend = app.backend(row.target)
        dup = backend.submit(backend.render(job_spec(row), app.facts(row.target), ref))
        assert dup.native_id != real.native_id
        _recorded_once_stood_down(app, backend, job, 1, dup)
    finally:
        app.close()
    return job, real, dup, go, ran


def _adopted_and_run_once(cli, cluster, job, real, dup, go, ran, attempt: int = 1):
    """`watch` adopts REAL, the copy holding ATTEMPT's start, in place of DUP (which stood down),
    and the job completes with no attempt after it; user code ran once, as REAL."""
    try:
        cli.run("watch", "--once")
        st = cli.status(job)
        assert [(a["attempt"], a["native_id"]) for a in st["attempts"]][attempt - 1:] == [(attempt, real.native_id)], \
            st["attempts"]
        adopted = [e for e in st["events"] if e["kind"] == "adopted"]
        assert adopted and adopted[-1]["native_id"] == real.native_id, st["events"]
        assert adopted[-1]["replaces"] == dup.native_id and "stood down" in adopted[-1]["reason"], adopted
    finally:
        go.touch()

    def closed():
        cli.run("watch", "--once")
        return cli.status(job)["state"] in FINAL_STATES

    poll("the adopted attempt to finish", closed, timeout=180, interval=1)
    st = cli.status(job)
    assert st["state"] == "COMPLETED" and len(st["attempts"]) == attempt, st
    assert [a["native_id"] for a in st["attempts"]][attempt - 1:] == [real.native_id]
    comments = cluster.run("squeue", "-h", "-t", "all", "-o", "%k").stdout.split()
    assert comments.count(f"launcher:{job}:{attempt + 1}") == 0, comments  # no next attempt beside the running one
    assert ran.read_text().split() == [real.native_id]  # user code ran once (after any failure), as the adopted id


def test_watch_adopts_the_slurm_job_that_holds_the_start_and_submits_no_second_attempt(cli, clean_queue,
                                                                                        monkeypatch):
    raced = _raced(cli, clean_queue, monkeypatch, "testcl", cli.home / "jobs")
    _adopted_and_run_once(cli, clean_queue, *raced)


@pytest.mark.sshd
def test_over_ssh_the_start_claim_is_read_and_claimed_on_the_login_node(cli, clean_queue, monkeypatch):
    """The job folders are the login node's (``remote_dir``): `watch` reads the start claim
    there, and a claim for another id finds the holder instead of taking it."""
    from launcher.api.context import App

    job, real, dup, go, ran = _raced(cli, clean_queue, monkeypatch, "remote", cli.remote_dir)
    app = App()
    try:
        backend = app.backend("remote")
        assert backend.starts_elsewhere() and not (cli.home / "jobs" / job / "attempt-1.start").exists()
        assert backend.start_holder(job, 1) == real.native_id
        assert backend.claim_start(job, 1, dup.native_id) == real.native_id  # held: never taken over
        assert backend.claim_start(job, 9, "4242") == "4242" and backend.start_holder(job, 9) == "4242"
        assert backend.claim_start(job, 9, "4343") == "4242"
        assert backend.claim_start("no-such-job", 1, "4242") is None  # no folder there: nothing claimed
        # an element's folder in an existing job folder is made (an element submitted alone as
        # an array of one claims there); in a job folder that does not exist, nothing is
        assert backend.claim_start(f"{job}/element-0", 9, "4242") == "4242"
        assert backend.start_holder(f"{job}/element-0", 9) == "4242"
        assert backend.claim_start(f"{job}/element-0", 9, "4343") == "4242"
        assert backend.claim_start("no-such-job/element-0", 1, "4242") is None
        assert backend.start_holder("no-such-job/element-0", 1) is None
    finally:
        app.close()
    _adopted_and_run_once(cli, clean_queue, job, real, dup, go, ran)


def test_an_element_submitted_again_alone_adopts_the_copy_that_holds_its_start(cli, clean_queue, monkeypatch):
    """The same race on attempt 2 of a sweep's element, submitted alone as an array of one: its
    start is claimed in ``<element job folder>/element-<i>`` (not its job folder, nor the
    sweep's), where `watch` must read it."""
    from launcher.api.context import App
    from launcher.sweep.arrays import resubmit_element

    cluster, tag = clean_queue, f"{os.getpid()}-{id(cli)}"
    shared = cluster.shared_dir
    failed, ran, go = shared / f"sfe-failed-{tag}", shared / f"sfe-ran-{tag}", shared / f"sfe-go-{tag}"
    spec = cli.spec("raced-el", {
        "run": f"if [ ! -e {failed} ]; then touch {failed}; exit 1; fi; echo $LAUNCHER_SELF_ID >> {ran}; "
               f"while [ ! -e {go} ]; do sleep 0.2; done",
        "recovery": {"app_error": 2}, "resources": {"time_limit": "5m"}, "sweep": {"grid": {"x": [0]}}})
    sweep_id = cli.run("launch", spec, "--target", "testcl").stdout.split(":")[0].strip()
    job = f"{sweep_id}-e0"
    folder = cli.home / "jobs" / job / "element-0"

    def resubmitted():
        cli.run("watch", "--once")
        return len(cli.status(job)["attempts"]) == 2

    poll("element 0 to fail once and be submitted again alone", resubmitted, timeout=180, interval=1,
         detail=lambda: cli.run("status", job).stdout)
    _use_cli_env(cli, monkeypatch)
    app = App()
    try:
        row = app.store.get_job(job)
        real = Handle.from_json(row.handle)
        assert real.attempt == 2 and real.extra.get("sweep_array"), real
        poll("attempt 2 to claim its start in its element folder", lambda: holder(str(folder), 2) == real.native_id,
             timeout=120, interval=0.3)
        _, submit = resubmit_element(app, row, row.target, 2)  # the frozen watcher's copy
        dup = submit()
        assert dup.native_id != real.native_id
        _recorded_once_stood_down(app, app.backend(row.target), job, 2, dup)
    finally:
        app.close()
    _adopted_and_run_once(cli, clean_queue, job, real, dup, go, ran, attempt=2)
