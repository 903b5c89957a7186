"""A sweep on a backend without arrays (local, SkyPilot): each element is its own job, and the
launcher keeps max_parallel (launcher.sweep.one_by_one, launcher.sweep.separate)."""

from __future__ import annotations

import json

import pytest
import yaml

from launcher.backend.protocols import Facts, Handle, JobRef
from launcher.backend.config import Target
from launcher.core.errors import SubmitError
from launcher.backend.sections import spec_from_text
from launcher.state.store import CLAIM_TAKEN, is_open
from launcher.core.status import QUEUED, is_final
from launcher.spec.sweep_elements import element_env, elements
from launcher.sweep.elements import sweep_rows
from launcher.sweep.separate import element_spec, occupies_slot, to_start

# the tests with a store: on SQLite and on PostgreSQL (tests.fixtures.stores)
both_engines = pytest.mark.usefixtures("state_engine")

SPEC = """name: sw
run: sleep 60
checkpoint: {root: /ck/sw}
sweep: {grid: {lr: [0.1, 0.2], opt: [adam, "$(touch /tmp/x) 'q'"]}, max_parallel: 2}
"""


# ---- pure: an element's spec, the slots
def test_an_elements_spec_exports_what_the_slurm_table_gives_it():
    spec = spec_from_text(SPEC, "s.yaml")
    els = elements(spec.sweep)
    for e in els:
        s = element_spec(spec, "sw-1", e, len(els), 7)
        want = element_env("sw-1", e, len(els), 7, "/ck/sw")
        assert s.checkpoint.root == want.pop("LAUNCHER_CKPT_ROOT") == f"/ck/sw/element-{e.index:04d}"
        assert {k: s.env[k] for k in want} == want and s.sweep is None
        assert json.loads(s.env["LAUNCHER_PARAMS"]) == e.params
    assert spec.sweep is not None and spec.checkpoint.root == "/ck/sw"  # the sweep's spec is unchanged


@pytest.mark.parametrize("rows, limit, want", [
    ([(0, "RUNNING", True), (1, QUEUED, True), (2, QUEUED, True)], 2, [1]),
    ([(0, "RUNNING", True), (1, "PENDING", True), (2, QUEUED, True)], 2, []),
    ([(0, "COMPLETED", False), (1, "FAILED", False), (2, QUEUED, True), (3, QUEUED, True)], 2, [2, 3]),
    ([(0, "SUBMITTING", True), (1, "PREEMPTED", True), (2, QUEUED, True)], 3, [2]),  # both still hold slots
    ([(3, QUEUED, True), (1, QUEUED, True), (2, "CANCELLED", False)], None, [1, 3]),
    ([(0, QUEUED, False)], 2, []),  # a closed row is never started
])
def test_queued_elements_start_lowest_first_while_slots_are_free(rows, limit, want):
    assert to_start(rows, limit) == want


def test_queued_is_an_open_state_that_holds_no_slot():
    assert not is_final(QUEUED) and not occupies_slot(QUEUED, True) and occupies_slot("SUBMITTING", True)


def test_skypilot_renders_an_element_as_a_task_of_its_own():
    from launcher_backends.skypilot import SkyPilotBackend
    from launcher_backends.skypilot.options import SkyPilotOptions

    spec = spec_from_text(SPEC, "s.yaml")
    e = elements(spec.sweep)[3]
    b = SkyPilotBackend(Target("t", "skypilot", SkyPilotOptions(infra="aws")))
    req = b.render(element_spec(spec, "sw-1", e, 4, 7), Facts("t", "skypilot"), JobRef("sw-1-e3", 1, "/j"))
    envs = yaml.safe_load(req.text)["envs"]
    assert envs["LAUNCHER_PARAM_OPT"] == "$(touch /tmp/x) 'q'" and envs["LAUNCHER_SWEEP_INDEX"] == "3"
    assert envs["LAUNCHER_PARAM_LR"] == "0.2" and envs["LAUNCHER_SWEEP_SIZE"] == "4"
    assert "--array" not in req.text


# ---- on the local backend (real processes, cancelled at the end)
@pytest.fixture
def lx(launcher_env):
    from launcher.api.facade import Launcher

    with Launcher() as lx:
        yield lx


def launch(lx, tmp_path, body=SPEC) -> str:
    f = tmp_path / "s.yaml"
    f.write_text(body.replace("/ck/sw", str(tmp_path / "ck")))
    return lx.launch(str(f), target="local").job_id


def states(lx, sweep_id) -> dict:
    return {r.meta["sweep"]["index"]: r.state for r in sweep_rows(lx.app.store, sweep_id)}


@both_engines
def test_launch_starts_max_parallel_and_queues_the_rest_then_cancel_never_starts_them(lx, tmp_path):
    from launcher.sweep.one_by_one import fill

    sweep_id = launch(lx, tmp_path)
    st = states(lx, sweep_id)
    assert [st[i] for i in (2, 3)] == [QUEUED, QUEUED] and {st[0], st[1]} <= {"PENDING", "RUNNING"}
    assert fill(lx.app, sweep_id) == []  # both slots held
    store = lx.app.store
    assert [a.attempt for a in store.attempts(f"{sweep_id}-e2")] == []
    assert [e["kind"] for e in store.events(f"{sweep_id}-e2")] == ["queued"]
    reports = lx.cancel_sweep(sweep_id)
    assert sorted(r.job_id for r in reports) == [f"{sweep_id}-e{i}" for i in range(4)]
    assert set(states(lx, sweep_id).values()) == {"CANCELLED"}
    assert store.attempts(f"{sweep_id}-e2") == [] and store.attempts(f"{sweep_id}-e3") == []
    assert fill(lx.app, sweep_id) == []


@both_engines
def test_a_slot_freed_starts_the_next_element_once(lx, tmp_path):
    from launcher.sweep.one_by_one import fill

    sweep_id = launch(lx, tmp_path)
    lx.cancel(f"{sweep_id}-e1")  # closes element 1: its slot is free
    out = fill(lx.app, sweep_id)
    assert [(o.job_id, o.action) for o in out] == [(f"{sweep_id}-e2", "started")]
    assert fill(lx.app, sweep_id) == []
    st = states(lx, sweep_id)
    assert st[3] == QUEUED and st[2] in ("PENDING", "RUNNING")
    env = (lx.app.store.job_dir(f"{sweep_id}-e2") / "attempt-1.sh").read_text()
    assert "LAUNCHER_SWEEP_INDEX" in env and "element-0002" in env
    lx.cancel_sweep(sweep_id)


@both_engines
def test_a_launcher_holding_the_sweeps_claim_keeps_others_from_starting(lx, tmp_path):
    from launcher.sweep.one_by_one import claim_key, fill

    sweep_id = launch(lx, tmp_path)
    lx.cancel(f"{sweep_id}-e0")
    store = lx.app.store
    with store.tx() as db:
        db.execute(CLAIM_TAKEN, (claim_key(sweep_id), "other:1:x", 4e9, 0))
    assert [o.action for o in fill(lx.app, sweep_id)] == ["claimed"]
    assert states(lx, sweep_id)[2] == QUEUED
    store.release(claim_key(sweep_id), "other:1:x")
    assert [o.action for o in fill(lx.app, sweep_id)] == ["started"]
    lx.cancel_sweep(sweep_id)


@both_engines
def test_an_element_that_cannot_start_stays_queued_then_fails(lx, tmp_path, monkeypatch):
    from launcher.sweep import one_by_one
    from launcher_backends.local.backend import LocalBackend

    sweep_id = launch(lx, tmp_path)
    lx.cancel(f"{sweep_id}-e0")

    def refuse(self, request):
        raise SubmitError("no room")

    monkeypatch.setattr(LocalBackend, "submit", refuse)
    for n in range(1, one_by_one.START_TRIES + 1):
        (o,) = one_by_one.fill(lx.app, sweep_id)
        assert o.action == ("failed" if n == one_by_one.START_TRIES else "start_failed")
    row = lx.app.store.get_job(f"{sweep_id}-e2")
    assert row.state == "FAILED" and "no room" in row.reason and not is_open(row)
    monkeypatch.undo()
    lx.cancel_sweep(sweep_id)


@both_engines
def test_an_element_is_resubmitted_as_a_job_of_its_own(lx, tmp_path):
    from launcher.launching.launch import resubmit

    sweep_id = launch(lx, tmp_path)
    row = lx.app.store.get_job(f"{sweep_id}-e1")
    lx.app.backend("local").cancel(Handle.from_json(row.handle))
    h = resubmit(lx.app, row, "local", 2, "test")
    script = (lx.app.store.job_dir(row.job_id) / "attempt-2.sh").read_text()
    assert h.attempt == 2 and "LAUNCHER_PARAM_LR" in script and "element-0001" in script
    lx.cancel_sweep(sweep_id)


@both_engines
def test_a_render_error_records_nothing(lx, tmp_path):
    from launcher.core.errors import LauncherError

    with pytest.raises(LauncherError):
        launch(lx, tmp_path, SPEC.replace("run: sleep 60", "run: sleep 60\nsecrets: [NOT_SET_ANYWHERE_X]"))
    assert lx.app.store.list_jobs() == []


@both_engines
def test_cancel_of_one_queued_element_closes_it_before_it_starts(lx, tmp_path):
    from launcher.sweep.one_by_one import fill

    sweep_id = launch(lx, tmp_path)
    (r,) = lx.cancel_sweep(sweep_id, 2)
    assert r.job_id == f"{sweep_id}-e2" and r.note == "queued by the launcher: it never started" and r.ok
    lx.cancel(f"{sweep_id}-e0")
    assert [(o.job_id, o.action) for o in fill(lx.app, sweep_id)] == [(f"{sweep_id}-e3", "started")]
    assert lx.app.store.attempts(f"{sweep_id}-e2") == []
    lx.cancel_sweep(sweep_id)
