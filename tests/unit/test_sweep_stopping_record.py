"""Early-stopping judgements recorded in the state store: each made once, by any number of
watchers at once, and what `launcher status SWEEP` builds from them."""

from __future__ import annotations

import threading

import pytest

from launcher.backend.protocols import Handle
from launcher.state.store import StateStore
from launcher.core.status import STOPPED
from launcher.sweep.control import element_facts
from launcher.state.sweeps import ELEMENTS_SQL
from launcher.sweep.judgements import judgements_of, record, stop_of
from launcher.sweep.elements import element_rows, sweep_rows
from launcher.spec.sweep import EarlyStop
from launcher.backend.sections import spec_from_text

CFG = EarlyStop(metric="loss", mode="min", keep=0.5, rungs=[10, 20])
LOSS = [0.4, 0.1, 0.3, 0.2]  # at rung 10: 1 and 3 go on; at rung 20 (same values): 3 is stopped


def spec_text(root) -> str:
    return (f"name: sw\nrun: python3 train.py\ncheckpoint: {{root: {root}}}\n"
            "sweep: {grid: {x: [0, 1, 2, 3]}, early_stop: {metric: loss, mode: min, keep: 0.5, rungs: [10, 20]}}\n")


def make_sweep(store: StateStore, tmp_path, sweep_id="sw-1") -> list:
    text = spec_text(tmp_path / "ck")
    for r in element_rows(sweep_id, spec_from_text(text), 7, str(tmp_path)):
        store.begin_job(r["job_id"], "sw", "t", "fake", None, text, ckpt_root=r["ckpt_root"], meta=r["meta"])
        h = Handle("fake", "t", r["job_id"], f"100_{r['index']}")
        store.record_attempt(r["job_id"], 1, "t", h.to_json(), h.native_id, state="RUNNING")
    return sweep_rows(store, sweep_id)


def reports_at(step: int) -> dict:
    return {i: {s: {"loss": v} for s in range(5, step + 1, 5)} for i, v in enumerate(LOSS)}


@pytest.fixture
def store(tmp_path):
    s = StateStore(tmp_path / "home")
    yield s
    s.close()


def test_judgements_are_stored_in_each_elements_meta_with_an_event_and_never_made_twice(store, tmp_path):
    make_sweep(store, tmp_path)
    first = record(store, "sw-1", CFG, reports_at(10))
    assert sorted((j.index, j.stop) for j in first) == [(0, True), (1, False), (2, True), (3, False)]
    assert record(store, "sw-1", CFG, reports_at(10)) == []  # the same reports again: nothing new
    rows = {r.meta["sweep"]["index"]: r for r in sweep_rows(store, "sw-1")}
    assert stop_of(rows[0].meta).rung == 10 and stop_of(rows[1].meta) is None
    assert [e["rung"] for e in store.events("sw-1-e2") if e["kind"] == "early_stop"] == [10]
    later = record(store, "sw-1", CFG, reports_at(20))
    assert [(j.index, j.rung, j.stop) for j in later] == [(1, 20, False), (3, 20, True)]
    rows = {r.meta["sweep"]["index"]: r for r in sweep_rows(store, "sw-1")}
    assert [j.rung for j in judgements_of(rows[3].meta)] == [10, 20]
    assert "rung 20: loss 0.2 ranks 2 of 2" in stop_of(rows[3].meta).reason


def test_an_element_that_ended_is_ranked_but_never_stopped(store, tmp_path):
    make_sweep(store, tmp_path)
    store.close_job("sw-1-e0", "COMPLETED", "done")
    js = {j.index: j for j in record(store, "sw-1", CFG, reports_at(10))}
    assert js[0].rank == 4 and not js[0].stop and "it had ended already" in js[0].reason
    assert js[2].stop


def test_judgements_of_another_sweep_are_not_mixed_in(store, tmp_path):
    make_sweep(store, tmp_path, "sw-1")
    make_sweep(store, tmp_path, "sw-10")
    record(store, "sw-1", CFG, reports_at(10))
    assert all(not judgements_of(r.meta) for r in sweep_rows(store, "sw-10"))
    assert len(record(store, "sw-10", CFG, reports_at(10))) == 4


def test_a_sweeps_elements_are_found_through_the_sweep_id_index_not_a_scan(store, tmp_path):
    make_sweep(store, tmp_path)
    plan = " ".join(r[-1] for r in store.db.execute("EXPLAIN QUERY PLAN " + ELEMENTS_SQL, ("sw-1",)).fetchall())
    assert "USING INDEX jobs_sweep" in plan and "SCAN" not in plan


def test_a_row_of_another_sweep_whose_id_only_looks_like_an_element_is_not_judged(store, tmp_path):
    """(A job-id LIKE pattern is case-insensitive and its '_' matches any character: sw_1's
    pattern matches SWx1's rows, which only each row's meta told apart.)"""
    make_sweep(store, tmp_path, "SWx1")
    make_sweep(store, tmp_path, "sw_1")
    assert len(record(store, "sw_1", CFG, reports_at(10))) == 4
    assert all(not judgements_of(r.meta) for r in sweep_rows(store, "SWx1"))


def test_three_watchers_at_once_record_each_judgement_once(store, tmp_path):
    make_sweep(store, tmp_path)
    barrier = threading.Barrier(3)
    made: list = []

    def watcher():
        s = StateStore(tmp_path / "home")  # each watcher its own connection, as separate processes have
        try:
            barrier.wait()
            for step in (10, 10, 20, 20):
                made.extend(record(s, "sw-1", CFG, reports_at(step)))
        finally:
            s.close()

    threads = [threading.Thread(target=watcher) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted((j.index, j.rung) for j in made) == [(0, 10), (1, 10), (1, 20), (2, 10), (3, 10), (3, 20)]
    events = [(e["index"], e["rung"]) for i in range(4) for e in store.events(f"sw-1-e{i}")
              if e["kind"] == "early_stop"]
    assert sorted(events) == sorted((j.index, j.rung) for j in made)


def test_status_facts_show_the_latest_step_and_metrics_and_the_stop_of_a_stopped_element(store, tmp_path):
    make_sweep(store, tmp_path)
    record(store, "sw-1", CFG, reports_at(10))
    store.update_job("sw-1-e1", last_step=15)
    store.close_job("sw-1-e2", STOPPED, "rung 10: ...")
    store.close_job("sw-1-e0", "COMPLETED", "done")  # finished before its stop was carried out
    rows = sweep_rows(store, "sw-1")
    reports = {1: {5: {"loss": 0.5, "acc": 0.1}, 10: {"loss": 0.1}}, 3: {10: {"loss": 0.2}}}
    f = element_facts(rows, reports)
    # each element's one step is its row's last committed step (launcher.state.rows.job_step); the step
    # it reported its metrics at is shown beside them (metric_step), never as its step
    assert f["steps"] == {0: None, 1: 15, 2: None, 3: None}
    assert f["metric_steps"] == {0: None, 1: 10, 2: None, 3: 10}
    assert f["metrics"][1] == {"loss": 0.1, "acc": 0.1} and f["metrics"][0] == {}
    assert sorted(f["stopped"]) == [2]  # element 0 is shown COMPLETED, as it ended
    assert f["stopped"][2].rung == 10 and f["states"][2] == STOPPED
