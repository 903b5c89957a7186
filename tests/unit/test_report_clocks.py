"""An interruption's clocks (detection, cleanup, reallocation, restore, lost work) on synthetic
histories (pure): each from the records that bound it, None with a reason where none does, and
all of them adding up to the wall time with the other categories."""

from __future__ import annotations

import pytest

from launcher.report import AttemptIn, History, Save, account
from launcher.report.clocks import CLOCKS
from tests.fixtures.histories import random_history

RESTART_CLOCKS = ("detection", "cleanup", "reallocation", "restore")


def check_adds_up(acc):
    d = acc.to_dict()
    clocks, tot = d["clocks"], d["clocks_total"]
    split = sum((c[f"{k}_s"] or 0.0) for c in clocks for k in RESTART_CLOCKS) + tot["unsplit_s"]
    assert split + tot["unassigned_s"] == pytest.approx(acc.totals["restart_overhead"], abs=1e-6)
    assert sum(c["lost_work_s"] for c in clocks) == pytest.approx(acc.totals["lost_work"], abs=1e-6)
    others = sum(v for k, v in acc.totals.items() if k not in ("restart_overhead", "lost_work"))
    assert others + split + tot["unassigned_s"] + sum(c["lost_work_s"] for c in clocks) == pytest.approx(acc.wall_s)
    for c in clocks:
        assert all(c[f"{k}_s"] is None or c[f"{k}_s"] >= 0 for k in CLOCKS), c
        assert all(c[k] is None for k in c["unknown"]), c
        assert c["total_s"] == pytest.approx(sum(c[f"{k}_s"] or 0.0 for k in CLOCKS) + c["unsplit_s"])
    # the tagged segments say the same
    by_clock: dict = {}
    for s in d["segments"]:
        if "clock" in s:
            by_clock[s["clock"]] = by_clock.get(s["clock"], 0.0) + s["end"] - s["start"]
    for k in RESTART_CLOCKS:
        assert by_clock.get(k, 0.0) == pytest.approx(sum(c[f"{k}_s"] or 0.0 for c in clocks), abs=1e-6)
    return clocks


def killed_and_resubmitted():
    # killed at 20 (its last commit ended at 11); the watcher noticed at 24 and resubmitted at 26;
    # the replacement started at 30, its program at 32, and was back at step 10 at 35
    return [AttemptIn(1, "FAILED", queued=0, started=2, ended=20, program_start=3, resume_step=-1, native_id="100",
                      saves=[Save(10, 11, 10, True)], noticed=24),
            AttemptIn(2, "COMPLETED", queued=26, started=30, ended=60, program_start=32, resume_step=10,
                      native_id="200", restored_at=35)]


def test_a_killed_and_resubmitted_job_has_every_clock():
    acc = account(History("j", t0=0, now=1e9, attempts=killed_and_resubmitted()))
    (c,) = check_adds_up(acc)
    assert (c["detection_s"], c["cleanup_s"], c["reallocation_s"], c["restore_s"], c["lost_work_s"]) == (4, 2, 6, 3, 9)
    assert c["noticed_by"] == "launcher" and c["replacement"] == 2 and not c["in_place"] and c["unknown"] == {}
    # the restore is no longer useful compute: 3 -> 10 and 35 -> 60
    assert acc.totals["useful_compute"] == 7 + 25 and acc.totals["restart_overhead"] == 15


def test_a_restart_in_place_was_noticed_by_the_scheduler():
    # the node died at ~66.2 (last heartbeat 65.2); Slurm ended the run at 80 and requeued it at once
    atts = [AttemptIn(1, "NODE_FAIL", queued=0, started=5, ended=80, program_start=6, resume_step=-1, native_id="7",
                      saves=[Save(50, 51, 40, True)], heartbeat=65.2, heartbeat_interval=1.0),
            AttemptIn(2, "COMPLETED", queued=80, started=90, ended=110, program_start=92, resume_step=40, native_id="7")]
    (c,) = check_adds_up(account(History("j", t0=0, now=1e9, attempts=atts)))
    assert c["in_place"] and c["noticed_by"] == "scheduler"
    assert c["detection_s"] == pytest.approx(80 - 66.2) and c["cleanup_s"] == 0 and c["reallocation_s"] == 12
    assert c["lost_work_s"] == pytest.approx(66.2 - 51)
    # the program restored without jobside.restore: no record says when it was back at step 40
    assert c["restore_s"] is None and "step 40" in c["unknown"]["restore_s"]


def test_without_a_record_of_the_noticing_detection_and_cleanup_stay_unsplit():
    atts = killed_and_resubmitted()
    atts[0].noticed = None
    (c,) = check_adds_up(account(History("j", t0=0, now=1e9, attempts=atts)))
    assert c["detection_s"] is None and c["cleanup_s"] is None and c["unsplit_s"] == 6
    assert "noticed" in c["unknown"]["detection_s"] and c["reallocation_s"] == 6


def test_a_failure_with_no_replacement_has_no_reallocation_nor_restore():
    atts = killed_and_resubmitted()[:1]
    (c,) = check_adds_up(account(History("j", t0=0, now=1e9, attempts=atts)))
    assert c["reallocation_s"] is None and c["restore_s"] is None and c["replacement"] is None
    assert c["detection_s"] == 0 and c["noticed_after_end_s"] == 4  # the wall time ends with the run


def test_a_replacement_still_queued_is_reallocation_until_now():
    atts = killed_and_resubmitted()
    atts[1] = AttemptIn(2, "PENDING", queued=26, native_id="200")
    (c,) = check_adds_up(account(History("j", t0=0, now=50, attempts=atts)))
    assert c["reallocation_s"] == 24 and c["restore_s"] is None and "not started" in c["unknown"]["restore_s"]


def test_a_fresh_restart_restores_nothing():
    atts = killed_and_resubmitted()
    atts[1].resume_step, atts[1].restored_at = -1, None
    (c,) = check_adds_up(account(History("j", t0=0, now=1e9, attempts=atts)))
    assert c["restore_s"] == 0 and c["lost_work_s"] == 17  # nothing it committed was used


def test_a_cancelled_attempt_needs_no_detection():
    atts = [AttemptIn(1, "CANCELLED", queued=0, started=1, ended=30, program_start=2, resume_step=-1,
                      saves=[Save(10, 11, 5, True)])]
    (c,) = check_adds_up(account(History("j", t0=0, now=1e9, attempts=atts)))
    assert c["detection_s"] == 0 and c["noticed_by"].startswith("launcher")


def test_attempts_that_never_started_in_between_are_reallocation():
    atts = killed_and_resubmitted()
    atts.insert(1, AttemptIn(2, "NO_CAPACITY", queued=26, ended=28, native_id="150"))
    atts[2].attempt, atts[2].queued = 3, 28
    (c,) = check_adds_up(account(History("j", t0=0, now=1e9, attempts=atts)))
    assert c["replacement"] == 2 and c["reallocation_s"] == 6 and c["restore_s"] == 3


def test_an_attempt_without_a_scheduler_start_still_shows_its_program_start():
    atts = [AttemptIn(1, "FAILED", queued=0, started=None, ended=20, program_start=3, resume_step=-1)]
    acc = account(History("j", t0=0, now=1e9, attempts=atts))
    assert acc.attempts[0].started == 3 and acc.totals["queue_wait"] == 3


@pytest.mark.parametrize("seed", range(200))
def test_clocks_always_add_up_with_the_other_categories(seed):
    acc = account(random_history(seed, clocks=True))
    assert sum(acc.totals.values()) == pytest.approx(acc.wall_s, abs=1e-6)
    check_adds_up(acc)


def test_the_job_page_and_its_timeline_show_each_clock_or_why_not_and_the_mfu():
    from launcher.serve.pages import job_body, ts

    atts = killed_and_resubmitted()
    atts[1].restored_at = None
    atts[0].started = None  # the store has no start: the page shows the program's
    rep = account(History("j", t0=0, now=1e9, attempts=atts)).to_dict()
    rep.update(name="x", state="COMPLETED", reason="", target="local", backend="local", notes=[],
               compute={"mfu": 0.412, "effective_mfu": 0.2, "useful_share": 0.485, "peak_text": "dense BF16 peak, H100"})
    d = {"job_id": "j", "name": "x", "target": "local", "backend": "local", "state": "COMPLETED", "reason": "",
         "open": False, "last_step": 10, "ckpt_root": None, "events": [], "report": rep, "log": None,
         "attempts": [{"attempt": 1, "target": "local", "native_id": "100", "state": "FAILED", "resume_step": -1,
                       "submitted": 0.0, "started": None, "ended": 20.0, "exit_code": 9, "cost_usd": None,
                       "reason": ""}]}
    page = job_body(d)
    row = page.split('id="clocks"')[1].split('<tr data-attempt="1">')[1].split("</tr>")[0]
    assert 'data-clock="detection">4.0 s<' in row and 'data-clock="cleanup">2.0 s<' in row
    assert 'data-clock="reallocation">6.0 s<' in row and 'data-clock="restore">-<' in row
    assert 'data-clock="lost_work">9.0 s<' in row and "back at step 10" in row
    assert 'id="mfu-pct">41.2%<' in page and "dense BF16 peak, H100" in page
    assert page.count('data-clock="detection"') == 2  # the table's cell and the timeline's strip
    assert f"<td>{ts(3.0)}</td>" in page.split('id="attempts"')[1].split("</tr>")[1]  # started: the program's


def test_a_sweeps_clocks_are_its_elements_summed_and_an_unknown_clock_stays_unknown():
    from launcher.report.clocks import combine_totals

    a = account(History("a", t0=0, now=1e9, attempts=killed_and_resubmitted())).to_dict()["clocks_total"]
    atts = killed_and_resubmitted()
    atts[1].restored_at = None
    b = account(History("b", t0=0, now=1e9, attempts=atts)).to_dict()["clocks_total"]
    tot = combine_totals([a, b, None])
    assert tot["interruptions"] == 2 and tot["detection_s"] == 8 and tot["lost_work_s"] == 18
    assert tot["restore_s"] == 3  # b's restore is unknown: only a's is summed
    assert combine_totals([b])["restore_s"] is None


def test_an_interruptions_boundaries_are_clamped_into_its_window_in_order():
    from types import SimpleNamespace as NS

    from launcher.report.clocks import _bounds, _interruption

    seg = NS(start=20.0, end=40.0, clock="", category="restart_overhead")
    restore = NS(start=40.0, end=45.0, clock="restore", category="restart_overhead")
    # a skewed clock: the end was noticed "before" the failure, the replacement submitted "before" that
    failed = NS(attempt=1, failure_at=20.0, native_id="1", noticed=15.0, state="FAILED")
    nxt = NS(attempt=2, native_id="2", queued=10.0, started=30.0, program_start=38.0)
    it = _interruption(failed, [failed, nxt], [seg, restore], [0, 1])
    assert (it.detected, it.resubmitted, it.window_end) == (20.0, 20.0, 45.0)
    assert _bounds(it) == [(20.0, "detection"), (20.0, "cleanup"), (20.0, "reallocation")]
    # noticed after the replacement's restore began: cut there, never past it
    failed.noticed, nxt.queued = 50.0, 60.0
    it = _interruption(failed, [failed, nxt], [seg, restore], [0, 1])
    assert (it.detected, it.resubmitted) == (40.0, 40.0)
    # no record of the noticing: detection and cleanup stay one unsplit clock
    failed.noticed = None
    it = _interruption(failed, [failed, nxt], [seg, restore], [0, 1])
    assert it.detected is None and _bounds(it)[0] == (20.0, "unsplit")
