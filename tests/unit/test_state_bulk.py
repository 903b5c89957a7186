"""StateStore's bulk writes for a sweep (begin_sweep, record_submitted, forget_sweep) leave the
same jobs (as readers see them), attempts and events as the one-job-at-a-time writes they
replace, with the sweep's spec stored once."""

from __future__ import annotations


import pytest

from launcher.backend.protocols import Handle
from launcher.state.connection import ConstraintError
from launcher.state.store import StateStore
from launcher.state.store import is_open
from launcher.sweep.arrays import element_handle, record_array, submitted_entries
from launcher_backends.slurm import SlurmBackend
from tests.fixtures.stores import other_connection

both_engines = pytest.mark.usefixtures("state_engine")  # tests.fixtures.stores

SPEC = "name: sw\nrun: 'true'\n"
ARRAY = Handle(backend="slurm", target="t", job_id="sw-1", native_id="77", attempt=1, extra={})


def _rows(n):
    return [{"job_id": f"sw-1-e{i}", "index": i, "ckpt_root": f"/ck/{i}",
             "meta": {"seed": i, "sweep": {"id": "sw-1", "index": i, "size": n, "params": {"x": i}}}}
            for i in range(n)]


def _begin(store, rows):
    shared = {"sweep": {"id": "sw-1", "size": len(rows)}}
    store.sweeps.begin("sw-1", "sw", "t", "slurm", None, SPEC, shared,
                      [(r["job_id"], r["ckpt_root"], r["meta"]) for r in rows])


def _one_by_one(store, rows):
    for r in rows:
        store.begin_job(r["job_id"], "sw", "t", "slurm", None, SPEC, ckpt_root=r["ckpt_root"], meta=r["meta"])
    for r in rows:
        h = element_handle(ARRAY, r["job_id"], r["index"], SlurmBackend)
        store.patch_meta(r["job_id"], sweep={**r["meta"]["sweep"], "array": ARRAY.native_id})
        store.record_attempt(r["job_id"], 1, "t", h.to_json(), h.native_id, state="PENDING")
        store.record_event(r["job_id"], "submitted", target="t", native_id=h.native_id, attempt=1, sweep="sw-1")


def _bulk(store, rows):
    _begin(store, rows)
    with store.batch():
        store.sweeps.share("sw-1", array=ARRAY.native_id)
        store.bulk.record_submitted("t", submitted_entries(ARRAY, rows, SlurmBackend), detail={"sweep": "sw-1"})


def _dump(store):
    """The jobs as every reader sees them (JobRow, times left out), the attempts and the events."""
    db = other_connection(store)
    timeless = {"attempts": "job_id,attempt,target,native_id,handle,state,reason,resume_step,meta",
                "events": "job_id,kind,detail"}
    order = {"attempts": "attempt", "events": "id"}  # the order they were written in
    jobs = sorted((j.job_id, j.name, j.target, j.backend, j.spec_path, j.spec_yaml, j.state, j.reason, j.handle,
                   j.ckpt_root, j.meta, j.sweep_id) for j in store.list_jobs())
    return {"jobs": jobs,
            **{t: [tuple(r) for r in db.execute(f"SELECT {cols} FROM {t} ORDER BY job_id, {order[t]}").fetchall()]
               for t, cols in timeless.items()}}


def test_bulk_writes_equal_the_one_by_one_writes(tmp_path, state_engine):
    a, b = StateStore(tmp_path / "a"), StateStore(tmp_path / "b", url=state_engine.new_url())
    try:
        _one_by_one(a, _rows(5))
        _bulk(b, _rows(5))
        assert _dump(a) == _dump(b)
        assert b.get_job("sw-1-e3").meta["sweep"]["array"] == "77"
        assert [e["kind"] for e in b.events("sw-1-e3")] == ["submitted"]
        assert [j.job_id for j in b.sweeps.jobs("sw-1")] == [f"sw-1-e{i}" for i in range(5)]
    finally:
        a.close()
        b.close()


@both_engines
def test_begin_sweep_is_all_or_nothing_and_forget_sweep_removes_it(tmp_path):
    store = StateStore(tmp_path / "h")
    try:
        rows = _rows(3)
        store.begin_job("sw-1-e2", "sw", "t", "slurm", None, SPEC)  # a clash makes the whole batch fail
        with pytest.raises(ConstraintError):
            _begin(store, rows)
        assert [j.job_id for j in store.list_jobs()] == ["sw-1-e2"]
        assert store.db.execute("SELECT count(*) FROM sweeps").fetchone()[0] == 0
        store.forget_job("sw-1-e2")
        _bulk(store, rows)
        assert len(store.list_jobs()) == 3
        store.sweeps.forget("sw-1")
        assert _dump(store) == {"jobs": [], "attempts": [], "events": []}
        assert store.db.execute("SELECT count(*) FROM sweeps").fetchone()[0] == 0
    finally:
        store.close()


def _statuses(store):
    """Five elements: one running, one completed, one closed before, one with a stale handle, one untouched."""
    _bulk(store, _rows(5))
    store.close_job("sw-1-e2", "CANCELLED", "cancelled by user", event="cancelled")
    h = {r["job_id"]: store.get_job(r["job_id"]).handle for r in _rows(5)}
    fields = {"state": "RUNNING", "reason": "", "native_state": "RUNNING", "exit_code": None, "started": 5.0}
    done = {**fields, "state": "COMPLETED", "native_state": "COMPLETED", "exit_code": 0, "ended": 9.0}
    return [("sw-1-e0", 1, fields, h["sw-1-e0"], "RUNNING", ""),
            ("sw-1-e1", 1, done, h["sw-1-e1"], "COMPLETED", ""),
            ("sw-1-e2", 1, fields, h["sw-1-e2"], "RUNNING", ""),
            ("sw-1-e3", 1, fields, "{\"stale\": 1}", "RUNNING", "")]


def test_record_statuses_equals_update_attempt_and_mirror_state(tmp_path, state_engine):
    a, b = StateStore(tmp_path / "a"), StateStore(tmp_path / "b", url=state_engine.new_url())
    try:
        for job_id, attempt, fields, handle, state, reason in _statuses(a):
            a.update_attempt(job_id, attempt, **fields)
            a.mirror_state(job_id, handle, state, reason)
        b.bulk.record_statuses(_statuses(b))
        assert _dump(a) == _dump(b)
        assert [b.get_job(f"sw-1-e{i}").state for i in range(5)] == \
            ["RUNNING", "COMPLETED", "CANCELLED", "PENDING", "PENDING"]
    finally:
        a.close()
        b.close()


@both_engines
def test_attempts_of_reads_many_jobs_at_once(tmp_path):
    store = StateStore(tmp_path / "h")
    try:
        _bulk(store, _rows(3))
        got = store.bulk.attempts_of(["sw-1-e0", "sw-1-e2", "nope"])
        assert got == {"sw-1-e0": store.attempts("sw-1-e0"), "sw-1-e2": store.attempts("sw-1-e2"), "nope": []}
    finally:
        store.close()


@both_engines
def test_record_statuses_writes_nothing_when_nothing_changed(tmp_path):
    store = StateStore(tmp_path / "h")
    try:
        entries = _statuses(store)
        store.bulk.record_statuses(entries)
        before, changes = _dump(store), store.db.total_changes
        store.bulk.record_statuses(entries)  # the next poll: the same states
        assert store.db.total_changes == changes and _dump(store) == before
        moved = [(*entries[0][:2], {**entries[0][2], "state": "COMPLETED", "ended": 9.0}, entries[0][3], "COMPLETED", "")]
        store.bulk.record_statuses(moved)
        assert store.get_job("sw-1-e0").state == "COMPLETED" and store.attempts("sw-1-e0")[0].ended == 9.0
    finally:
        store.close()


@both_engines
def test_a_status_read_before_an_attempt_ended_never_rewinds_it(tmp_path):
    """Watcher A reads attempt 1 RUNNING, watcher B reads it PREEMPTED and records that; A's
    write, committed after B's, leaves the attempt PREEMPTED (seen once in CI with three
    watchers: attempt 3 stayed RUNNING after attempt 4 had completed)."""
    store = StateStore(tmp_path / "h")
    try:
        e = _statuses(store)[0]
        running = (*e[:2], {**e[2], "state": "RUNNING"}, e[3], "RUNNING", "")
        ended = (*e[:2], {**e[2], "state": "PREEMPTED", "ended": 9.0}, e[3], "PREEMPTED", "preempted")
        store.bulk.record_statuses([ended])
        store.bulk.record_statuses([running])  # the stale read, written last
        a = store.attempts(e[0])[0]
        assert a.state == "PREEMPTED" and a.ended == 9.0
        # an ended attempt's state may still be corrected to another ended one
        store.bulk.record_statuses([(*e[:2], {**e[2], "state": "NODE_FAIL"}, e[3], "NODE_FAIL", "")])
        assert store.attempts(e[0])[0].state == "NODE_FAIL"
    finally:
        store.close()


@both_engines
def test_a_closed_element_is_reopened_by_the_recorded_submission(tmp_path):
    store = StateStore(tmp_path / "h")
    try:
        rows = _rows(3)
        _begin(store, rows)
        store.close_job("sw-1-e1", "FAILED", "limbo: not found")  # a watcher gave up on it meanwhile
        record_array(store, "sw-1", "t", ARRAY, rows, SlurmBackend)
        assert [j.state for j in store.sweeps.jobs("sw-1")] == ["PENDING"] * 3
        assert all(is_open(j) for j in store.sweeps.jobs("sw-1"))
    finally:
        store.close()


class _DashNamed:
    """A backend whose elements are not named <array prefix><index>."""

    @classmethod
    def array_of(cls, native_id):
        return native_id

    @classmethod
    def element_native_id(cls, array_id, index):
        return f"{array_id}-{index}" if index != "" else f"{array_id}:"


def test_elements_not_named_prefix_plus_index_keep_the_backends_names():
    rows = _rows(2)
    assert [native for _, _, native in submitted_entries(ARRAY, rows, _DashNamed)] == ["77-0", "77-1"]


class _CancelRecorder(SlurmBackend):
    """SlurmBackend's element naming; cancel only recorded (no cluster: the store's part is tested)."""

    def __init__(self):  # noqa: D107 - no runner, no target
        self.cancelled = []

    def cancel(self, handle):
        self.cancelled.append(handle.native_id)


@both_engines
def test_an_element_cancelled_while_its_array_was_submitted_stays_cancelled_and_its_task_is_cancelled(
        tmp_path, state_engine):
    # `cancel` closed element 1 while the sweep's launch was between sbatch and the record (it
    # waited for the launch, then overtook it): the record must not reopen it, and its task goes
    store = StateStore(tmp_path / "s", url=state_engine.new_url())
    try:
        rows = _rows(3)
        _begin(store, rows)
        store.close_job("sw-1-e1", "CANCELLED", "cancelled by user")
        backend = _CancelRecorder()
        assert record_array(store, "sw-1", "t", ARRAY, rows, backend) == ["sw-1-e1"]
        assert backend.cancelled == ["77_1"]
        e1 = store.get_job("sw-1-e1")
        assert e1.state == "CANCELLED" and not is_open(e1)
        [a] = store.attempts("sw-1-e1")
        assert a.native_id == "77_1" and a.state == "CANCELLED" and "while it was being launched" in a.reason
        assert [e["kind"] for e in store.events("sw-1-e1")][-2:] == ["submitted", "cancelled_in_flight"]
        for j in ("sw-1-e0", "sw-1-e2"):  # the others are submitted as usual
            assert store.get_job(j).state == "PENDING" and is_open(store.get_job(j))
        # as the one-job write does: record_submission says False and leaves the job CANCELLED
        store.begin_job("solo", "solo", "t", "slurm", None, SPEC)
        store.close_job("solo", "CANCELLED", "cancelled by user")
        assert store.record_submission("solo", 1, "t", "{}", "9") is False
        assert store.get_job("solo").state == "CANCELLED"
    finally:
        store.close()
