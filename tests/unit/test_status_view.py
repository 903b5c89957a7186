"""status_view's pure part: the lines and JSON `launcher status` prints."""

import json
from types import SimpleNamespace

from launcher.api.results import exit_status
from launcher.state.rows import resume_words
from launcher.state.store import AttemptRow, JobRow
from launcher.core.status import JobState, Status
from launcher.api.status_view import (JobDetail, Whose, ago, job_json, job_lines, jobs_json, jobs_lines,
                                      reconcile_lines)


def job(**kw):
    d = dict(job_id="j-1", name="j", target="local", backend="local", spec_path=None, spec_yaml="", created=1.0,
             updated=2.0, state="RUNNING", reason="", handle="{}", ckpt_root="/ck", last_step=40, meta={})
    d.update(kw)
    return JobRow(**d)


def attempt(n, **kw):
    d = dict(job_id="j-1", attempt=n, target="local", native_id=str(100 + n), handle="{}", submitted=1.0,
             state="RUNNING", reason="", native_state="", exit_code=None, started=None, ended=None, resume_step=None,
             cost_usd=None, meta={})
    d.update(kw)
    return AttemptRow(**d)


def test_one_job_shows_each_attempt_its_resumed_step_and_the_decisions():
    d = JobDetail(job(), [attempt(1, state="PREEMPTED", resume_step=-1, cost_usd=1.5), attempt(2, resume_step=30)],
                  [{"ts": 1, "kind": "submitted"}, {"ts": 2, "kind": "resubmitted", "reason": "preempted"}])
    lines = job_lines(d)
    assert lines[0] == "job j-1 (j) on local [local]: RUNNING"
    assert lines[1] == "checkpoints: /ck  last committed step: 40"
    assert lines[3].split()[:7] == ["1", "local", "101", "PREEMPTED", "fresh", "start", "1.50"]
    assert lines[4].split()[:7] == ["2", "local", "102", "RUNNING", "from", "step", "30"] and lines[4].split()[7] == "-"
    assert lines[5] == '  event resubmitted: {"reason": "preempted"}' and len(lines) == 6
    doc = json.loads(job_json(d))
    assert doc["open"] is True and [a["resume_step"] for a in doc["attempts"]] == [-1, 30]


def test_the_job_list_and_its_json():
    assert jobs_lines([]) == ["no jobs"]
    rows = [job(state="COMPLETED", handle=None)]
    assert jobs_lines(rows)[0].split() == ["job", "owner", "target", "state", "reason"]
    assert jobs_lines(rows)[1].split() == ["j-1", "-", "local", "COMPLETED"]
    assert jobs_lines(rows, Whose("alice"))[1].split() == ["j-1", "alice", "local", "COMPLETED"]
    assert json.loads(jobs_json(rows, Whose("alice"))) == [
        {"job_id": "j-1", "name": "j", "target": "local", "state": "COMPLETED", "reason": "", "open": False,
         "created": 1.0, "owner": "alice", "last_step": 40, "updated": 2.0, "refreshed": True}]


def test_a_row_shown_as_stored_says_whose_it_is_and_how_old_it_is():
    mine, theirs = job(job_id="a-1", owner="alice", reason="ok"), job(job_id="b-1", owner="bob", updated=100.0,
                                                                    last_step=None, reason="running")
    whose = Whose(None, frozenset({"b-1"}))
    lines = jobs_lines([mine, theirs], whose, now=100.0 + 2 * 3600)
    assert lines[1].split() == ["a-1", "alice", "local", "RUNNING", "ok"]
    assert lines[2].split() == ["b-1", "bob", "local", "RUNNING", "[as", "stored,", "2.0", "h", "old]", "running"]
    doc = json.loads(jobs_json([mine, theirs], whose))
    assert [(d["owner"], d["refreshed"]) for d in doc] == [("alice", True), ("bob", False)]

    d = JobDetail(theirs, [], [], owner="bob", refreshed=False)
    lines = job_lines(d, now=100.0 + 300)
    assert lines[1] == ("owner bob; as stored, not refreshed here (bob's job: only its owner or the watchers' role "
                        "refresh it); its row last changed 5 min ago")
    assert lines[2] == "checkpoints: /ck  last committed step: - (as stored)"
    assert json.loads(job_json(d))["refreshed"] is False
    closed = JobDetail(job(state="COMPLETED", owner="bob"), [], [], owner="bob", refreshed=False)
    assert job_lines(closed)[1] == "owner bob"  # an ended job's row is final: nothing stale to say


def test_each_event_names_who_wrote_it():
    d = JobDetail(job(), [], [{"ts": 1, "kind": "cancelled", "by": "watcher", "actor": "watcher"},
                              {"ts": 2, "kind": "done", "reason": "x"}])
    assert job_lines(d)[-2:] == ['  event cancelled by watcher: {"by": "watcher"}', '  event done: {"reason": "x"}']


def test_ages_in_words():
    assert [ago(s) for s in (-1, 45, 600, 7200, 3 * 86400)] == ["0 s", "45 s", "10 min", "2.0 h", "3.0 d"]


def test_reconcile_outcomes_and_resumed_steps_in_words():
    o = [SimpleNamespace(job_id="a", action="adopted", reason="r"), SimpleNamespace(job_id="b", action="running",
                                                                                      reason=""),
         SimpleNamespace(job_id="c", action="control_plane", reason="down")]
    assert reconcile_lines(o) == ["a: adopted the submission found by its dedupe token (r)",
                                  "warning: c is still SUBMITTING: down"]
    assert (resume_words(None), resume_words(-1), resume_words(7)) == ("-", "fresh start", "from step 7")
    assert resume_words(7, "durable") == "from step 7 (durable)" and resume_words(-1, "peer") == "fresh start"


def test_follow_exit_status():
    assert exit_status(None) == 1
    assert exit_status(Status(JobState.COMPLETED)) == 0
    assert exit_status(Status(JobState.FAILED, exit_code=3)) == 3
    assert exit_status(Status(JobState.FAILED, exit_code=300)) == 1
    assert exit_status(Status(JobState.CANCELLED)) == 1


def test_live_means_queued_or_running_now_from_the_one_state_definition():
    from launcher.core.status import TERMINAL, attempt_live

    assert all(attempt_live(s) for s in ("SUBMITTING", "PENDING", "RUNNING", "REQUEUED", "SUSPENDED"))
    assert not any(attempt_live(s.value) for s in TERMINAL)
    assert not attempt_live("UNKNOWN") and not attempt_live("ATTEMPT_FAILED") and not attempt_live("GAVE_UP")


def test_status_json_gives_the_tier_each_attempt_resumed_from():
    d = JobDetail(job(), [attempt(1, resume_step=-1), attempt(2, resume_step=30, meta={"resume_tier": "peer"})], [])
    doc = json.loads(job_json(d))
    assert [(a["resume_step"], a["resume_tier"]) for a in doc["attempts"]] == [(-1, None), (30, "peer")]
    # the text shows the tier too, beside the step resumed from
    assert "from step 30 (peer)" in job_lines(d)[-1] and "fresh start" in job_lines(d)[-2]
    assert job_lines(d)[-1].index("from step 30 (peer)") == job_lines(d)[-3].index("resumed")  # in its column
