"""What early stopping keeps between watch passes in one process (``launcher.sweep.stopping``):
a sweep's parsed ``early_stop`` section and the reports of elements that had ended. Two stores
in one process (two homes, or one test after another) holding a sweep of the same id never see
each other's, and an element reopened for a new attempt is read again."""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import pytest

import launcher.jobside as jobside
from launcher.backend.protocols import Handle
from launcher.state.store import StateStore
from launcher.sweep import stopping
from launcher.sweep.judgements import judgements_of
from launcher.sweep.elements import element_rows, sweep_rows
from launcher.backend.sections import spec_from_text

ES_LOSS = "early_stop: {metric: loss, mode: min, keep: 0.5, rungs: [10, 20]}"
ES_ACC = "early_stop: {metric: acc, mode: max, keep: 0.5, rungs: [5]}"


def make(home, root, early_stop: str, states=("RUNNING",) * 4) -> StateStore:
    """A store at HOME holding sweep sw-1 (4 elements, checkpoints under ROOT) in STATES."""
    text = (f"name: sw\nrun: python3 train.py\ncheckpoint: {{root: {root}}}\n"
            f"sweep: {{grid: {{x: [0, 1, 2, 3]}}, {early_stop}}}\n")
    store = StateStore(home)
    for r, state in zip(element_rows("sw-1", spec_from_text(text), 7, str(root)), states):
        store.begin_job(r["job_id"], "sw", "t", "fake", None, text, ckpt_root=r["ckpt_root"], meta=r["meta"])
        h = Handle("fake", "t", r["job_id"], f"100_{r['index']}")
        store.record_attempt(r["job_id"], 1, "t", h.to_json(), h.native_id, state=state)
    return store


def report(monkeypatch, root, index: int, attempt: int, steps, loss: float) -> None:
    """What element INDEX's program does: jobside.report(step, loss=LOSS) at each of STEPS."""
    monkeypatch.setenv("LAUNCHER_CKPT_ROOT", str(root / f"element-{index:04d}"))
    monkeypatch.setenv("LAUNCHER_ATTEMPT", str(attempt))
    for s in steps:
        jobside.report(s, loss=loss)


@pytest.fixture
def stores(tmp_path):
    made: list = []
    yield lambda name, *a, **k: made.append(make(tmp_path / name, tmp_path / f"{name}-ck", *a, **k)) or made[-1]
    for s in made:
        s.close()


def test_two_stores_with_a_sweep_of_the_same_id_each_get_their_own_early_stop_section(stores):
    a, b = stores("a", ES_LOSS), stores("b", ES_ACC)
    assert stopping.early_stop_of(sweep_rows(a, "sw-1")[0]).metric == "loss"
    assert stopping.early_stop_of(sweep_rows(b, "sw-1")[0]).metric == "acc"  # was: a's, cached by sweep id
    assert stopping.early_stop_of(sweep_rows(a, "sw-1")[1]).rungs == [10, 20]


def test_the_reports_of_an_ended_element_are_kept_per_store(stores, tmp_path, monkeypatch):
    done = ("COMPLETED", "RUNNING", "RUNNING", "RUNNING")
    a, b = stores("a", ES_LOSS, done), stores("b", ES_LOSS, done)
    for i, loss in enumerate([0.05, 0.1, 0.3, 0.2]):  # in a, the ended element 0 is the best
        report(monkeypatch, tmp_path / "a-ck", i, 1, [10], loss)
    for i, loss in enumerate([0.9, 0.1, 0.3, 0.2]):  # in b, the worst
        report(monkeypatch, tmp_path / "b-ck", i, 1, [10], loss)
    stopping.judge_sweep(SimpleNamespace(store=a), "sw-1")  # keeps a's element 0 (ended) reports
    stopping.judge_sweep(SimpleNamespace(store=b), "sw-1")
    rank = {s: judgements_of(sweep_rows(s, "sw-1")[0].meta)[0].rank for s in (a, b)}
    assert rank == {a: 1, b: 4}  # was: b ranked a's element 0 (rank 1)


def test_an_ended_element_reopened_for_a_new_attempt_has_its_reports_read_again(stores, tmp_path, monkeypatch):
    s = stores("a", ES_LOSS, ("FAILED", "RUNNING", "RUNNING", "RUNNING"))
    for i, loss in enumerate([0.05, 0.1, 0.3, 0.2]):
        report(monkeypatch, tmp_path / "a-ck", i, 1, [10], loss)
    stopping.judge_sweep(SimpleNamespace(store=s), "sw-1")  # rung 10; element 0 had ended: kept
    h = Handle("fake", "t", "sw-1-e0", "101_0")
    s.record_attempt("sw-1-e0", 2, "t", h.to_json(), h.native_id, state="RUNNING")  # resubmitted: open again
    report(monkeypatch, tmp_path / "a-ck", 0, 2, [20], 0.05)
    report(monkeypatch, tmp_path / "a-ck", 1, 1, [20], 0.1)
    stopping.judge_sweep(SimpleNamespace(store=s), "sw-1")
    assert [j.rung for j in judgements_of(sweep_rows(s, "sw-1")[0].meta)] == [10, 20]  # was: [10]


def test_a_closed_stores_kept_reports_go_with_it(tmp_path):
    store = make(tmp_path / "h", tmp_path / "ck", ES_LOSS)
    stopping.settled_of(store)[("sw-1-e0", "x")] = {}
    before = len(stopping._settled)
    gone = weakref.ref(store)
    store.close()
    del store
    gc.collect()  # (the store and its sweeps/bulk parts refer to each other: a cycle the collector frees)
    assert gone() is None
    assert len(stopping._settled) <= before - 1


def test_the_parsed_sections_kept_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(stopping, "_configs", {})
    row = SimpleNamespace(spec_path=None, job_id="sw-1-e0", spec_yaml="")
    for n in range(stopping.CONFIGS_KEPT + 5):
        row.spec_yaml = f"name: sw{n}\nrun: x\nsweep: {{grid: {{x: [0, 1]}}}}\n"
        assert stopping.early_stop_of(row) is None
    assert len(stopping._configs) <= stopping.CONFIGS_KEPT
