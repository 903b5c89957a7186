"""The per-job recovery claim: one owner at a time, taken in the transaction that reads
the job, taken over once expired; nothing is recorded under a claim that was lost."""

from __future__ import annotations

import threading

import pytest

from launcher.state.store import ClaimLost, StateStore, claim_available, is_open

# the store's semantics, on SQLite and on PostgreSQL (tests.fixtures.stores)
pytestmark = pytest.mark.usefixtures("state_engine")


def store_with_job(tmp_path, job_id="j"):
    s = StateStore(tmp_path)
    s.begin_job(job_id, "n", "local", "local", None, "name: n\n")
    s.record_attempt(job_id, 1, "local", "{}", "1")
    return s


def test_claim_available_is_a_pure_rule():
    assert claim_available(None, None, "me", 10.0)
    assert claim_available("me", 99.0, "me", 10.0)  # our own claim: renewed
    assert not claim_available("other", 11.0, "me", 10.0)
    assert claim_available("other", 10.0, "me", 10.0)  # expired exactly now: taken over


def test_only_one_owner_holds_a_job_until_it_releases_or_the_claim_expires(tmp_path):
    a = store_with_job(tmp_path)
    b = StateStore(tmp_path)
    assert a.owner != b.owner
    ca = a.claim("j", ttl=60, now=1000.0)
    assert ca is not None and ca.job.job_id == "j" and [x.attempt for x in ca.attempts] == [1]
    assert b.claim("j", ttl=60, now=1001.0) is None
    assert b.claim("j", ttl=60, now=1061.0) is not None  # expired: taken over
    with pytest.raises(ClaimLost):
        a.record_attempt("j", 2, "local", "{}", "2", owner=ca.owner)
    assert [x.attempt for x in a.attempts("j")] == [1]  # nothing recorded under a lost claim
    b.release("j")
    assert a.claim("j", ttl=60, now=1062.0) is not None


def test_release_by_a_former_holder_does_not_free_the_new_holders_claim(tmp_path):
    a = store_with_job(tmp_path)
    b = StateStore(tmp_path)
    a.claim("j", ttl=1, now=1000.0)
    cb = b.claim("j", ttl=60, now=1002.0)
    a.release("j")
    assert StateStore(tmp_path).claim("j", ttl=60, now=1003.0) is None
    b.record_attempt("j", 2, "local", "{}", "2", owner=cb.owner)
    assert [x.attempt for x in b.attempts("j")] == [1, 2]


def test_the_claim_reads_what_another_watcher_wrote_before_it(tmp_path):
    a = store_with_job(tmp_path)
    b = StateStore(tmp_path)
    ca = a.claim("j", ttl=60)
    a.record_attempt("j", 2, "local", "{}", "2", owner=ca.owner)
    a.release("j")
    cb = b.claim("j", ttl=60)
    assert [x.attempt for x in cb.attempts] == [1, 2]


def test_many_threads_with_their_own_stores_claim_a_job_exactly_once(tmp_path):
    store_with_job(tmp_path)
    won = []
    barrier = threading.Barrier(8)

    def contend():
        s = StateStore(tmp_path)
        barrier.wait()
        c = s.claim("j", ttl=60)
        if c is not None:
            won.append(c.owner)
        s.close()

    threads = [threading.Thread(target=contend) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1


def test_a_closed_job_is_not_open_and_only_final_states_close_it(tmp_path):
    s = store_with_job(tmp_path)
    assert is_open(s.get_job("j"))
    with pytest.raises(ValueError):
        s.close_job("j", "PREEMPTED", "x")
    s.close_job("j", "GAVE_UP", "gave up: budget", event="gave_up", detail={"reason": "budget"})
    j = s.get_job("j")
    assert not is_open(j) and j.state == "GAVE_UP" and s.events("j")[-1]["reason"] == "budget"
    assert s.open_jobs() == []


def test_old_failed_rows_are_closed_by_definition(tmp_path):
    s = store_with_job(tmp_path)
    s.update_job("j", state="FAILED", reason="exit code 1")  # as an older version left it
    assert not is_open(s.get_job("j")) and s.list_jobs(active_only=True) == []


def test_a_failed_attempt_leaves_the_job_open_until_recovery_decides(tmp_path):
    s = store_with_job(tmp_path)
    s.mirror_state("j", "{}", "FAILED", "exit code 1")
    j = s.get_job("j")
    assert j.state == "ATTEMPT_FAILED" and is_open(j)
    s.close_job("j", "SUPERSEDED", "a newer run took the root over")
    s.mirror_state("j", "{}", "RUNNING", "")  # a late status never reopens a closed job
    assert s.get_job("j").state == "SUPERSEDED"


def test_a_status_of_an_attempt_that_is_no_longer_current_changes_nothing(tmp_path):
    s = store_with_job(tmp_path)
    s.record_attempt("j", 2, "local", '{"a": 2}', "2")
    s.mirror_state("j", "{}", "PREEMPTED", "old attempt")
    assert s.get_job("j").state == "PENDING"


def test_a_restart_in_place_is_recorded_once_by_concurrent_watchers(tmp_path):
    a = store_with_job(tmp_path)
    b = StateStore(tmp_path)
    assert a.add_restart("j", 2, "local", "{}", "1", "RUNNING", "")
    assert not b.add_restart("j", 2, "local", "{}", "1", "RUNNING", "")
    assert [x.attempt for x in a.attempts("j")] == [1, 2]


def test_a_completed_attempt_closes_the_job_once_with_a_done_event(tmp_path):
    a = store_with_job(tmp_path)
    b = StateStore(tmp_path)
    assert a.mirror_state("j", "{}", "COMPLETED", "")
    assert not b.mirror_state("j", "{}", "COMPLETED", "")  # a second watcher's status changes nothing
    assert [e["kind"] for e in a.events("j")] == ["done"] and a.get_job("j").state == "COMPLETED"


def test_a_burst_race_is_decided_before_a_finished_copy_closes_the_job(tmp_path):
    s = store_with_job(tmp_path)
    s.update_job("j", meta={"burst": {"phase": "racing"}})
    assert not s.mirror_state("j", "{}", "COMPLETED", "")
    assert is_open(s.get_job("j"))


def test_patching_one_meta_key_keeps_what_another_watcher_wrote(tmp_path):
    a = store_with_job(tmp_path)
    b = StateStore(tmp_path)
    stale = a.get_job("j")  # read before b wrote
    b.update_job("j", meta={**b.get_job("j").meta, "burst": {"phase": "racing"}})
    a.patch_meta(stale.job_id, control_plane_errors=1)
    assert a.get_job("j").meta == {"burst": {"phase": "racing"}, "control_plane_errors": 1}
    a.patch_meta("j", control_plane_errors=None)
    assert a.get_job("j").meta == {"burst": {"phase": "racing"}}


CONTENDER = """
import sys, time
from launcher.state.store import StateStore
home, start = sys.argv[1], float(sys.argv[2])
s = StateStore(home)
time.sleep(max(0.0, start - time.time()))
c = s.claim("j", ttl=60)
print("won" if c is not None else "lost")
"""


def test_processes_with_their_own_stores_claim_a_job_exactly_once(tmp_path):
    import subprocess
    import sys
    import time

    store_with_job(tmp_path).close()
    start = time.time() + 3.0  # every process connected and waiting by then: they claim at once
    procs = [subprocess.Popen([sys.executable, "-c", CONTENDER, str(tmp_path), str(start)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert sorted(out.strip() for out, _ in outs) == ["lost", "lost", "lost", "won"]
