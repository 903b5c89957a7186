"""What a launch makes of an sbatch outcome that is not a plain answer, on the real test cluster
(issue 28): a wrapper sbatch first on PATH (tests/integration/sbatch_wrappers.py) runs the real
one, so Slurm accepts the job, and then is killed by a signal, prints a banner, an empty line or
the id twice, or hangs past the time-out, or its answer is lost to a controller that then stops
answering; the launch is interrupted; the state store is locked between the accept and the
record. None of these is Slurm's refusal: the job is never called rejected, and it ends up
tracked with the id Slurm gave it, found by its dedupe token."""

from __future__ import annotations

import os
import signal
import sys
import textwrap

import pytest
import yaml

from tests.fixtures.polling import poll

from .fault_harness import ctld_pid, parse_squeue, store_rows, unadopted_rows
from .launcher_cli import job_id_of
from .sbatch_wrappers import install, misbehaved, real_sbatch

pytestmark = pytest.mark.slurm


def slurm_ids(cluster, job: str, attempt: int = 1) -> list:
    """The ids of the Slurm jobs carrying JOB's dedupe token for ATTEMPT."""
    p = cluster.run("squeue", "-h", "-t", "all", "-o", "%i|%k", check=False)
    return [i.strip() for i, _, k in (ln.partition("|") for ln in p.stdout.splitlines())
            if k.strip() == f"launcher:{job}:{attempt}"]


def spec_of(cli, name: str):
    return cli.spec(name, {"run": "sleep 60", "resources": {"time_limit": "5m"}})


def assert_tracked(cli, cluster, job: str) -> str:
    """JOB's attempt 1 is recorded with the id of the one Slurm job carrying its token; that id."""
    ids = slurm_ids(cluster, job)
    assert len(ids) == 1, (job, ids)
    st = cli.status(job)
    assert [str(a["native_id"]) for a in st["attempts"]] == ids, st
    assert "unknown" not in (st.get("reason") or ""), st
    return ids[0]


@pytest.mark.parametrize("kind, sig", [("signal", "SEGV"), ("signal", "KILL"), ("banner", ""), ("empty", ""),
                                       ("twice", "")])
def test_an_sbatch_outcome_that_is_not_a_refusal_is_found_by_its_token(cli, clean_queue, kind, sig):
    cli.env = install(cli.tmp, kind, cli.env, "once", sig=sig or "SEGV")
    p = cli.run("launch", spec_of(cli, f"so{kind}{sig.lower()}"), "--target", "testcl", check=False)
    text = p.stdout + p.stderr
    assert misbehaved(cli.tmp)
    assert "rejected" not in text and "Traceback" not in text, text
    assert p.returncode == 0, text  # Slurm answered the lookup: found by its dedupe token at once
    job = job_id_of(p)
    native = assert_tracked(cli, clean_queue, job)
    assert f"(slurm id {native})" in text, text


def test_an_sbatch_that_hangs_past_the_time_out_is_found_by_its_token(cli, clean_queue):
    config = yaml.safe_load(cli.config.read_text())
    config["targets"]["testcl"]["command_timeout"] = 5
    cli.config.write_text(yaml.safe_dump(config))
    cli.env = install(cli.tmp, "slow", cli.env, "once", sleep_s=120)
    p = cli.run("launch", spec_of(cli, "soslow"), "--target", "testcl", check=False)
    text = p.stdout + p.stderr
    assert misbehaved(cli.tmp) and "rejected" not in text and p.returncode == 0, text
    assert f"(slurm id {assert_tracked(cli, clean_queue, job_id_of(p))})" in text


def test_an_interrupted_launch_stays_submitting_and_status_adopts_it(cli, clean_queue):
    p = cli.run("launch", spec_of(cli, "sointr"), "--target", "testcl", check=False,
                env={"LAUNCHER_FAULTS": "during_submit=interrupt"})
    text = p.stdout + p.stderr
    assert p.returncode != 0 and "rejected" not in text, text
    rows = cli.run("status", "--json").stdout
    job = next(r["job_id"] for r in yaml.safe_load(rows) if r["name"] == "sointr")
    assert_tracked(cli, clean_queue, job)  # `status` reconciled it: adopted by its dedupe token
    st = cli.status(job)
    assert any(e["kind"] == "adopted" for e in st["events"]), st


LOCKER = textwrap.dedent("""
    import sqlite3, sys, time
    db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
    db.execute("BEGIN IMMEDIATE")  # every other writer waits: the store is gone for them
    open(sys.argv[2], "w").close()
    time.sleep(float(sys.argv[3]))
    db.execute("ROLLBACK")
""")


def test_a_store_that_fails_between_the_accept_and_the_record_says_what_was_submitted(cli, clean_queue):
    """A wrapper sbatch that, once Slurm accepted the job, has the state store's write lock taken
    (for 10 s) before it prints the id: the launch's record fails after its 1 s busy time-out."""
    locker = cli.tmp / "locker.py"
    locker.write_text(LOCKER)
    locked = cli.tmp / "locked"
    real = real_sbatch(cli.env)
    cli.env = install(cli.tmp, "banner", cli.env, "every")  # its script is replaced below
    wrapper = cli.tmp / "bin" / "sbatch"
    wrapper.write_text(f"""#!/bin/sh
out=$({real} "$@"); rc=$?
{sys.executable} {locker} {cli.home / 'state.db'} {locked} 10 </dev/null >/dev/null 2>&1 &
while [ ! -e {locked} ]; do sleep 0.05; done
printf '%s\\n' "$out"
exit $rc
""")
    p = cli.run("launch", spec_of(cli, "sogone"), "--target", "testcl", check=False,
                env={"LAUNCHER_STATE_BUSY_TIMEOUT": "1"})
    text = p.stdout + p.stderr
    assert p.returncode != 0, text
    ids = _all_ids(clean_queue, "sogone")
    assert len(ids) == 1, (ids, text)
    assert f"(slurm id {ids[0]}), but the state store could not record it" in text, text
    assert "settles it by its dedupe token" in text and "nothing was written" not in text, text
    assert "Traceback" not in text, text

    def adopted():
        try:
            rows = yaml.safe_load(cli.run("status", "--json").stdout)  # reconciles once the lock is gone
        except AssertionError:
            return None
        row = next((r for r in rows if r["name"] == "sogone"), None)
        return row if row and row["state"] != "SUBMITTING" else None

    row = poll("the launch's row adopted by status once the store answers", adopted, timeout=120, interval=1)
    assert assert_tracked(cli, clean_queue, row["job_id"]) == ids[0]


def _all_ids(cluster, name: str) -> list:
    p = cluster.run("squeue", "-h", "-t", "all", "-o", "%i|%k", check=False)
    return [i.strip() for i, _, k in (ln.partition("|") for ln in p.stdout.splitlines())
            if k.strip().startswith(f"launcher:{name}-")]


def test_an_answer_lost_to_a_slow_controller_is_adopted_exactly_once_once_the_controller_answers(cli, clean_queue):
    """The fault schedules' seed 28029, schedule 61, on purpose: Slurm takes the job, sbatch's
    answer is lost (the ``lost`` wrapper: only "Socket timed out on send/recv", exit 1) and the
    controller then stops answering (SIGSTOP), so the launch's token lookup times out as well:
    the row stays SUBMITTING while a Slurm job holds its token (``unadopted_rows``), `watch`
    waits while its lookups fail, and once slurmctld answers one `watch --once` adopts that job,
    and only it, with the id Slurm gave it; the program runs once."""
    pid = ctld_pid(clean_queue)
    assert pid, "no slurmctld pid for this cluster"
    starts = clean_queue.shared_dir / f"lost-starts-{cli.tmp.name}"
    starts.write_text("")
    cli.env = install(cli.tmp, "lost", cli.env, "once")
    wrapper = cli.tmp / "bin" / "sbatch"
    # once the real sbatch returned (Slurm took the job), the controller stops answering
    wrapper.write_text(wrapper.read_text().replace(">/dev/null 2>&1\n", f">/dev/null 2>&1\nkill -STOP {pid}\n", 1))
    spec = cli.spec("solost", {"run": f"echo $SLURM_JOB_ID >> {starts}; sleep 20", "resources": {"time_limit": "5m"}})
    try:
        p = cli.run("launch", spec, "--target", "testcl", check=False, timeout=180)
        text = p.stdout + p.stderr
        assert misbehaved(cli.tmp), text
        assert "rejected" not in text and "Traceback" not in text, text
        rows = store_rows(cli.home)
        assert [(r["state"], r["attempt"]) for r in rows] == [("SUBMITTING", 1)], (rows, text)
        job = rows[0]["job_id"]
        w = cli.run("watch", "--once", check=False, timeout=180)  # its lookup fails too: it waits
        assert "adopted" not in w.stdout + w.stderr, w.stdout + w.stderr
        assert [r["state"] for r in store_rows(cli.home)] == ["SUBMITTING"]
    finally:
        os.kill(pid, signal.SIGCONT)  # stopped by the wrapper (or not yet: harmless)
    ids = poll("Slurm to answer with the job that holds the token", lambda: slurm_ids(clean_queue, job),
               timeout=60, interval=1)
    assert len(ids) == 1, ids
    # what the fault harness' heal waits for: the token is held, the store has not adopted it
    held = parse_squeue(clean_queue.run("squeue", "-h", "-t", "all", "-o", "%i|%k|%T").stdout, "solost")
    assert [(x["job_id"], x["held_by"]) for x in unadopted_rows(store_rows(cli.home), held)] == [(job, ids)]
    w = cli.run("watch", "--once", timeout=180)
    assert f"{job}: adopted" in w.stdout + w.stderr, w.stdout + w.stderr
    cli.run("watch", "--once", timeout=180)  # nothing more to adopt, nothing submitted
    held = parse_squeue(clean_queue.run("squeue", "-h", "-t", "all", "-o", "%i|%k|%T").stdout, "solost")
    assert unadopted_rows(store_rows(cli.home), held) == []
    assert [x[0] for x in held] == ids  # one Slurm job for the job, no second submission
    assert assert_tracked(cli, clean_queue, job) == ids[0]
    st = cli.status(job)
    assert [e["kind"] for e in st["events"]].count("adopted") == 1, st["events"]
    assert poll("the job to start", lambda: starts.read_text().split(), timeout=120, interval=1) == ids


def test_a_cancel_before_a_stalled_controller_takes_the_request_in_still_cancels_its_job(cli, clean_queue):
    """The fault schedules' seed 29303, schedule 28, on purpose: sbatch's answer is lost to a
    stalled controller and the launch's lookup finds nothing (the ``late`` wrapper: the request
    reaches Slurm 10 s later), so the launch exits 4 with the row SUBMITTING; a `cancel` then
    finds no job by the token either, and closes the row. When Slurm then takes the request in,
    `watch` finds that job by the token, cancels it and records it as attempt 1: no program
    runs behind a CANCELLED row with nothing in the store to say so."""
    cli.env = install(cli.tmp, "late", cli.env, "once", sleep_s=10)
    p = cli.run("launch", spec_of(cli, "solate"), "--target", "testcl", check=False, timeout=180)
    text = p.stdout + p.stderr
    assert misbehaved(cli.tmp) and p.returncode == 4, text
    assert "rejected" not in text and "Traceback" not in text, text
    (row,) = store_rows(cli.home)
    job = row["job_id"]
    assert row["state"] == "SUBMITTING" and slurm_ids(clean_queue, job) == [], (row, text)
    c = cli.run("cancel", job, check=False, timeout=120)
    said = c.stdout + c.stderr
    assert c.returncode == 0, said
    assert "not known yet" in said and "never got through" not in said, said
    assert cli.status(job)["state"] == "CANCELLED"
    ids, st = _late_job_cancelled_by_watch(cli, clean_queue, job, 1)
    assert [(a["attempt"], str(a["native_id"]), a["state"]) for a in st["attempts"]] == [(1, ids[0], "CANCELLED")]
    assert any(e["kind"] == "cancelled_in_flight" for e in st["events"]), st["events"]
    states = poll("Slurm to end it", lambda: [ln.split("|")[1] for ln in clean_queue.run(
        "squeue", "-h", "-t", "all", "-j", ids[0], "-o", "%i|%T", check=False).stdout.split()
        if ln.split("|")[1] in ("CANCELLED", "COMPLETED", "FAILED")], timeout=60, interval=1)
    assert states == ["CANCELLED"], states


def test_a_cancel_before_a_stalled_controller_takes_a_resubmission_in_still_cancels_it(cli, clean_queue):
    """The same with a watcher's resubmission: attempt 1 fails, `watch` resubmits attempt 2 and
    sbatch's answer is lost (``late``: Slurm takes it 15 s later), so the watcher records the
    unknown outcome with the attempt; a `cancel` finds no job by attempt 2's token yet and closes
    the job; when Slurm takes the request in, `watch` cancels that job and records it."""
    spec = cli.spec("solater", {"run": "exit 1", "resources": {"time_limit": "5m"}})
    job = job_id_of(cli.run("launch", spec, "--target", "testcl", timeout=180))
    poll("attempt 1 to fail", lambda: [ln for ln in clean_queue.run(
        "squeue", "-h", "-t", "all", "-o", "%k|%T", check=False).stdout.split()
        if ln == f"launcher:{job}:1|FAILED"], timeout=120, interval=1)
    cli.env = install(cli.tmp, "late", cli.env, "once", sleep_s=15)

    def resubmitted():
        w = cli.run("watch", "--once", check=False, timeout=180)
        return misbehaved(cli.tmp) and w

    w = poll("watch to resubmit attempt 2", resubmitted, timeout=120, interval=1)
    assert "Traceback" not in w.stdout + w.stderr, w.stdout + w.stderr
    assert slurm_ids(clean_queue, job, 2) == []
    c = cli.run("cancel", job, check=False, timeout=120)
    said = c.stdout + c.stderr
    assert c.returncode == 0 and "attempt 2" in said and "not known yet" in said, said
    ids, st = _late_job_cancelled_by_watch(cli, clean_queue, job, 2)
    assert [(a["attempt"], str(a["native_id"]), a["state"]) for a in st["attempts"]][-1] == (2, ids[0], "CANCELLED")


def _late_job_cancelled_by_watch(cli, cluster, job: str, attempt: int) -> tuple:
    """Once Slurm took the late request for ATTEMPT of cancelled JOB in: `watch --once` until it
    cancels that job; (the one Slurm id holding the attempt's token, JOB's status, CANCELLED)."""
    ids = poll("Slurm to take the late request in", lambda: slurm_ids(cluster, job, attempt), timeout=90, interval=1)
    assert len(ids) == 1, ids

    def settled():
        w = cli.run("watch", "--once", timeout=180)
        return f"{job}: cancelled" in w.stdout + w.stderr

    poll("watch to cancel the job the late request made", settled, timeout=120, interval=1)
    st = cli.status(job)
    assert st["state"] == "CANCELLED", st
    return ids, st


def test_a_resubmission_a_stalled_controller_takes_in_late_is_adopted_not_submitted_twice(cli, clean_queue):
    """Without a cancel: the watcher whose resubmission of attempt 2 lost its answer does not
    submit attempt 2 again while the scheduler may still show it (the quiet time); when Slurm
    takes the late request in, the next pass adopts that job: one Slurm job for attempt 2."""
    first = clean_queue.shared_dir / f"late-first-{cli.tmp.name}"  # attempt 1 fails, the next one runs
    spec = cli.spec("solatest", {"run": f"if [ -e {first} ]; then sleep 30; else touch {first}; exit 1; fi",
                                 "resources": {"time_limit": "5m"}})
    job = job_id_of(cli.run("launch", spec, "--target", "testcl", timeout=180))
    poll("attempt 1 to fail", lambda: [ln for ln in clean_queue.run(
        "squeue", "-h", "-t", "all", "-o", "%k|%T", check=False).stdout.split()
        if ln == f"launcher:{job}:1|FAILED"], timeout=120, interval=1)
    cli.env = install(cli.tmp, "late", cli.env, "once", sleep_s=15)
    poll("watch to resubmit attempt 2", lambda: cli.run("watch", "--once", check=False, timeout=180)
         and misbehaved(cli.tmp), timeout=120, interval=1)
    w = cli.run("watch", "--once", timeout=180)  # right after: not submitted again
    assert f"{job}: waiting" in w.stdout + w.stderr and "not submitting it again" in w.stdout + w.stderr, w.stdout
    ids = poll("Slurm to take the late request in", lambda: slurm_ids(clean_queue, job, 2), timeout=90, interval=1)

    def adopted():
        cli.run("watch", "--once", timeout=180)
        return [str(a["native_id"]) for a in cli.status(job)["attempts"] if a["attempt"] == 2]

    assert poll("watch to adopt the late job", adopted, timeout=120, interval=1) == ids
    assert slurm_ids(clean_queue, job, 2) == ids  # one Slurm job for attempt 2
    cli.run("cancel", job, timeout=120)
