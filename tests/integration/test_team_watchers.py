"""Three watchers on three hosts sharing one PostgreSQL store (issue 23, §2): one killed with
SIGKILL while it holds a claim, one frozen with SIGSTOP for longer than the claim TTL and then
continued, and the server restarted in the middle. Every (job, attempt) runs exactly once, and
the killed watcher's job is taken over by another host, adopting what it submitted (the time the
takeover took is printed, never asserted: a figure for docs/team-store.md, not a test).

Each watcher is a `launcher watch` in a UTS namespace of its own (``unshare --uts``) with its
own host name, which is what the store records of a claimant (``host:pid:random``). They share
one ``$LAUNCHER_HOME``, as login nodes share a home directory over NFS: the local target's job
folders (and their create-only start claims) live there. The jobs: tests.integration.test_exactly_once."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LAUNCHER, LauncherCLI, starts_by_job, stop_watchers, wait_all_closed
from .test_exactly_once import ATTEMPTS, launch_jobs

pytestmark = pytest.mark.postgres

TTL = 3.0
INTERVAL = 0.5


def watcher(cli: LauncherCLI, host: str, faults: str = "") -> subprocess.Popen:
    """`launcher watch` as host HOST (its own UTS namespace), with LAUNCHER_FAULTS=FAULTS."""
    log = open(cli.tmp / f"watch-{host}.log", "ab")
    env = {**cli.env, "LAUNCHER_FAULTS": faults, "LAUNCHER_FAULTS_LOG": str(cli.tmp / "faults.log")}
    argv = ["unshare", "--uts", "sh", "-c", 'hostname "$1" && shift && exec "$@"', "sh", host,
            LAUNCHER, "watch", "--exit-when-idle", "--interval", str(INTERVAL)]
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(cli.tmp),
                            start_new_session=True)


def fired(cli: LauncherCLI, pid: int, action: str) -> bool:
    log = cli.tmp / "faults.log"
    return log.exists() and any(line.split()[1:] == [str(pid), action] for line in log.read_text().splitlines())


def test_three_watchers_on_three_hosts_a_kill_a_freeze_and_a_server_restart(tmp_path, pg_server, pg_url):
    if not shutil.which("unshare") or not shutil.which("hostname"):
        from tests.fixtures.policy import service_unavailable

        service_unavailable("three hosts", "unshare and hostname (util-linux, hostname) are needed")
    cli = LauncherCLI(tmp_path)
    cli.env.update(LAUNCHER_STATE_URL=pg_url, LAUNCHER_CLAIM_TTL=str(TTL))
    db = pg_url.rsplit("/", 1)[1]
    starts = tmp_path / "starts.txt"
    starts.touch()
    t0 = time.time()
    jobs = launch_jobs(cli, 3, starts)
    phases = {"launched": time.time() - t0}
    # host-a: killed while it holds a claim (after submitting, before recording: the next holder
    # adopts what it submitted); host-b: frozen while it holds one (before its dedupe lookup)
    # Each host starts once the one before it reached its fault: with watchers racing from the
    # start, nothing makes a given host ever win a claim (CI saw host-c take every one, and
    # host-b never froze)
    a = watcher(cli, "host-a", "between_submit_and_record=sleep:30")
    procs = [a]
    try:
        poll("host-a holds a claim mid-submission", lambda: fired(cli, a.pid, "sleep:30"), timeout=120, interval=0.05)
        b = watcher(cli, "host-b", "before_lookup=pause")
        procs.append(b)
        held = pg_server.sql("SELECT job_id FROM claims WHERE owner LIKE 'host-a:%'", db=db).split()
        assert len(held) == 1, held
        recorded = int(pg_server.sql(f"SELECT count(*) FROM attempts WHERE job_id = '{held[0]}'", db=db))
        os.kill(a.pid, signal.SIGKILL)  # kill -9: its claim keep-alive dies with it
        killed_at = time.time()
        a.wait()
        phases["killed"] = time.time() - t0

        poll("host-b froze holding a claim", lambda: fired(cli, b.pid, "pause"), timeout=120, interval=0.05)
        procs.append(watcher(cli, "host-c"))
        time.sleep(TTL + 1.5)  # longer than the claim's TTL: the others take its job over
        pg_server.restart()  # in the middle: every watcher loses its connection
        os.kill(b.pid, signal.SIGCONT)
        phases["continued"] = time.time() - t0

        wait_all_closed(cli, jobs, timeout=300, interval=1)
        phases["closed"] = time.time() - t0
        for p, host in zip(procs[1:], ("b", "c")):  # each still watching, or done: none died of the restart
            assert p.poll() in (None, 0), (tmp_path / f"watch-host-{host}.log").read_text()[-3000:]
    finally:
        stop_watchers(procs)
    seen = starts_by_job(starts)
    for job in jobs:
        assert seen[job] == list(range(1, ATTEMPTS + 1)), (job, seen[job])
        st = cli.status(job)
        assert st["state"] == "COMPLETED" and [x["attempt"] for x in st["attempts"]] == list(range(1, ATTEMPTS + 1))
    # the takeover: the attempt host-a submitted (not recorded) is recorded by another host, found by its token
    events = cli.status(held[0])["events"]
    took = [e for e in events if e["kind"] == "resubmitted" and e.get("attempt") == recorded + 1]
    assert len(took) == 1 and took[0].get("found_existing"), took
    # by a live host, after host-a died; how long the
    # takeover takes is a figure, not a test (a loaded machine stretches it): printed, never asserted
    assert took[0]["ts"] >= killed_at
    takeover = took[0]["ts"] - killed_at
    print("\nphases (s from the start):", {k: round(v, 1) for k, v in phases.items()})
    print(f"takeover after kill -9: {takeover:.2f} s (claim TTL {TTL:g} s, watch interval {INTERVAL:g} s)")
