"""``launcher.api.facade.Launcher``: every method's typed result (frozen dataclasses of
``launcher.api.results``), Launcher alone deciding single job vs sweep, and the CLI's output
(``--json`` included) unchanged by the typed results: each printed from the result's ``to_json()``
is what the dict the method used to return printed."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from click.testing import CliRunner

from launcher.api.errors import WrongKind
from launcher.api.results import (BackendInfo, GcResult, Lineage, RunDiff, SweepCancelled, SweepReport, SweepStatus,
                                  TargetInfo)
from launcher.cli import main
from launcher.core.status import JobState
from launcher.state.watchers import user_name
from tests.fixtures.polling import poll

QUICK = "name: q\nrun: 'true'\n"
LONG = "name: l\nrun: sleep 300\n"
SWEEP = "name: sw\nrun: 'true'\nsweep: {grid: {lr: [0.1, 0.2, 0.3]}, max_parallel: 2}\n"
SLEEPY_SWEEP = "name: sws\nrun: sleep 300\nsweep: {grid: {lr: [0.1, 0.2]}, max_parallel: 2}\n"


@pytest.fixture
def lx(launcher_env):
    from launcher.api.facade import Launcher

    notes: list = []
    with Launcher(note=notes.append) as launcher:
        launcher.seen = notes
        yield launcher


def spec(tmp_path, text: str, name: str = "s.yaml") -> str:
    f = tmp_path / name
    f.write_text(text)
    return str(f)


def cli(*args):
    """(exit code, stdout, stderr) of the launcher command (click 8.1: mix_stderr=False)."""
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    r = runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def finished_sweep(lx, tmp_path) -> str:
    sweep_id = lx.launch(spec(tmp_path, SWEEP, "sw.yaml"), target="local").job_id
    poll("every element completed", lambda: lx.sweep(sweep_id).counts == {"COMPLETED": 3}, timeout=60, interval=0.2)
    return sweep_id


def frozen(result) -> bool:
    field = dataclasses.fields(result)[0].name
    try:
        setattr(result, field, None)
    except dataclasses.FrozenInstanceError:
        return True
    return False


# ---- each method's result type
def test_status_of_a_job_and_of_a_sweep_and_sweep(lx, tmp_path):
    from launcher.api.status_view import JobDetail

    job = lx.launch(spec(tmp_path, QUICK), target="local").job_id
    lx.wait(job, poll=0.1, timeout=60)
    d = lx.status(job)
    assert isinstance(d, JobDetail) and d.to_json() == d.to_dict() and d.state == "COMPLETED"
    assert lx.sweep(job) is None  # a job is not a sweep

    sweep_id = finished_sweep(lx, tmp_path)
    s = lx.status(sweep_id)
    assert isinstance(s, SweepStatus) and frozen(s) and s == lx.sweep(sweep_id)
    assert s.sweep_id == sweep_id and s.size == 3 and [e["index"] for e in s.elements] == [0, 1, 2]
    assert list(s.to_json()) == ["sweep", "size", "metric", "counts", "elements"]
    assert SweepStatus.from_json(s.to_json()) == s


def test_cancel_of_a_job_and_of_a_sweep(lx, tmp_path):
    from launcher.recovery.cancel import CancelReport

    job = lx.launch(spec(tmp_path, LONG), target="local").job_id
    r = lx.cancel(job)
    assert isinstance(r, CancelReport) and r.ok and r.cancelled

    sweep_id = lx.launch(spec(tmp_path, SLEEPY_SWEEP, "sws.yaml"), target="local").job_id
    one = lx.cancel(sweep_id, element=1)
    assert isinstance(one, SweepCancelled) and frozen(one) and one.element == 1 and one.ok
    assert [x.job_id for x in one.reports] == [f"{sweep_id}-e1"]
    whole = lx.cancel(sweep_id)
    assert isinstance(whole, SweepCancelled) and whole.element is None and len(whole.reports) == 2
    assert whole.summary_line() == f"sweep {sweep_id}: 2 element(s): 1 cancelled now, 1 already cancelled"


def test_report_of_a_job_and_of_a_sweep(lx, tmp_path):
    from launcher.report import JobReport

    job = lx.launch(spec(tmp_path, QUICK), target="local").job_id
    lx.wait(job, poll=0.1, timeout=60)
    assert isinstance(lx.report(job, refresh=False), JobReport)
    sweep_id = finished_sweep(lx, tmp_path)
    rep = lx.report(sweep_id, refresh=False)
    assert isinstance(rep, SweepReport) and frozen(rep) and rep.sweep_id == sweep_id and rep.size == 3
    assert rep.to_json()["sweep"] == sweep_id and rep.counts == {"COMPLETED": 3}
    assert lx.report_sweep(sweep_id, refresh=False).to_json() == rep.to_json()


def test_a_plot_of_a_sweep_a_metric_of_a_job_and_following_a_sweep_are_refused(lx, tmp_path):
    job = lx.launch(spec(tmp_path, QUICK), target="local").job_id
    lx.wait(job, poll=0.1, timeout=60)
    with pytest.raises(WrongKind) as e:
        lx.report(job, metric="loss")
    assert not e.value.sweep and e.value.exit_code == 2
    sweep_id = finished_sweep(lx, tmp_path)
    with pytest.raises(WrongKind) as e:
        lx.report(sweep_id, plot=str(tmp_path / "x.png"))
    assert e.value.sweep
    jobs = len(lx.jobs(all=True))
    said = len(lx.seen)
    with pytest.raises(WrongKind) as e:
        lx.launch(spec(tmp_path, SWEEP + "env: {API_TOKEN: x}\n", "warned.yaml"), target="local", single=True)
    assert e.value.sweep and e.value.size == 3
    assert len(lx.jobs(all=True)) == jobs and len(lx.seen) == said  # nothing submitted, nothing said


def test_gc_lineage_diff_backends_targets(lx, tmp_path, monkeypatch):
    root = tmp_path / "ck"
    root.mkdir()
    gc = lx.gc(str(root), dry_run=True)
    assert isinstance(gc, GcResult) and frozen(gc) and gc.dry_run and gc.kept == []
    assert list(gc.to_json()) == ["kept", "deleted", "quarantined", "skipped", "dry_run"]

    backends = lx.backends()
    assert all(isinstance(b, BackendInfo) for b in backends) and frozen(backends[0])
    assert [b.to_json() for b in backends] == lx.app.registry.describe()
    assert all(isinstance(t, TargetInfo) for t in lx.targets(probe=False))

    record = {"checkpoint": {"path": "p", "step": 3}, "root": str(root), "run_id": "j-1", "run_id_source": "commit",
              "record_location": None, "run": None, "generation": None, "save": None, "ancestry": []}
    monkeypatch.setattr("launcher.api.facade.lineage", lambda checkpoint, home=None: record)
    lin = lx.lineage(str(root))
    assert isinstance(lin, Lineage) and frozen(lin) and lin.run_id == "j-1" and lin.to_json() is record

    a = lx.launch(spec(tmp_path, QUICK), target="local").job_id
    b = lx.launch(spec(tmp_path, QUICK), target="local").job_id
    for j in (a, b):
        lx.wait(j, poll=0.1, timeout=60)
    diff = lx.diff(a, b)
    assert isinstance(diff, RunDiff) and frozen(diff) and (diff.a, diff.b) == (a, b)
    assert list(diff.to_json()) == ["a", "b", "config", "code", "packages", "versions", "run", "same"]


# ---- the CLI's output, --json included, is what the former dicts printed
def test_status_json_is_unchanged(lx, tmp_path):
    from launcher.api import status_view as view
    from launcher.sweep.control import sweep_status

    job = lx.launch(spec(tmp_path, QUICK), target="local").job_id
    lx.wait(job, poll=0.1, timeout=60)
    sweep_id = finished_sweep(lx, tmp_path)

    assert cli("status", job, "--json") == (0, view.job_json(lx.status(job)) + "\n", "")
    # the list names whose each job is (a SQLite store's: its file's owner) and which rows are as stored
    rows = lx.jobs()
    assert cli("status", "--json") == (0, view.jobs_json(rows, view.whose(lx.app, rows)) + "\n", "")
    assert {j["owner"] for j in json.loads(cli("status", "--json")[1])} == {view.store_owner(lx.app.store)}
    assert cli("status", sweep_id, "--json") == (0, json.dumps(sweep_status(lx.app, sweep_id), indent=2) + "\n", "")
    code, out, _ = cli("status", sweep_id)
    assert code == 0 and out.startswith(f"sweep {sweep_id}: 3 elements: 3 COMPLETED\n")


def test_launch_prints_the_same_line_and_refuses_to_follow_a_sweep(lx, tmp_path):
    code, out, err = cli("launch", spec(tmp_path, QUICK), "--target", "local")
    assert code == 0 and err == "" and re.fullmatch(r"q-[0-9a-f]{6}: submitted to local \(local id \d+\)\n", out)

    f = spec(tmp_path, SWEEP, "sw.yaml")
    code, out, err = cli("launch", f, "--follow")
    assert code == 2 and out == "" and err.endswith(
        f"Error: {f} is a sweep of 3 elements and --follow follows one job: launch it without --follow (it prints "
        "the sweep id), then `launcher status SWEEP` shows every element and `launcher logs SWEEP --element N [-f]` "
        "prints (or follows) the output of element N\n")
    assert [j.name for j in lx.jobs(all=True)] == ["q"]  # the sweep was never submitted


def test_cancel_prints_the_same_lines(lx, tmp_path):
    job = lx.launch(spec(tmp_path, LONG), target="local")
    assert cli("cancel", job.job_id) == (0, f"{job.job_id}: cancelled attempt 1 (local id {job.native_id})\n"
                                            f"{job.job_id}: closed as CANCELLED; `launcher watch` will not resume it\n",
                                         "")
    # the reason names who cancelled: this process's user on a SQLite store (launcher.state.actors)
    assert cli("cancel", job.job_id)[1] == (f"{job.job_id}: was already cancelled: CANCELLED (cancelled by "
                                            f"{user_name()}); nothing to do\n")

    sweep_id = lx.launch(spec(tmp_path, SLEEPY_SWEEP, "sws.yaml"), target="local").job_id
    code, out, err = cli("cancel", sweep_id)
    lines = out.splitlines()
    assert code == 0 and err == "" and len(lines) == 5
    assert lines[-1] == f"sweep {sweep_id}: 2 element(s): 2 cancelled now"
    assert all(line.startswith(f"{sweep_id}-e") for line in lines[:-1])
    assert {r.state for r in lx.jobs(all=True) if r.job_id.startswith(sweep_id)} == {JobState.CANCELLED.value}


def test_report_backends_and_gc_json_are_unchanged(lx, tmp_path):
    from launcher.checkpoint import gc, open_store
    from launcher.report.sweep_collect import gather_sweep

    sweep_id = finished_sweep(lx, tmp_path)
    want = json.dumps(gather_sweep(lx.app, sweep_id, refresh=False), indent=2, default=str) + "\n"
    assert cli("report", sweep_id, "--json", "--no-refresh") == (0, want, "")
    assert cli("backends", "--json") == (0, json.dumps(lx.app.registry.describe(), indent=2) + "\n", "")
    root = tmp_path / "ck"
    root.mkdir()
    want = json.dumps(gc(open_store(str(root)), 3, dry_run=True), indent=2) + "\n"
    assert cli("checkpoints", root, "--gc", "--dry-run", "--json") == (0, want, "")
    code, _, err = cli("report", sweep_id, "--plot", tmp_path / "x.png")
    assert code == 2
    assert err.endswith(f"Error: --plot draws one job's timeline: pass one element, {sweep_id}-e<index>\n")


def test_config_info_trust_and_keep_watching_go_through_the_launcher(lx, launcher_env):
    from launcher.api.errors import ConfigError
    from launcher.api.results import ConfigInfo

    info = lx.config_info()
    assert isinstance(info, ConfigInfo) and frozen(info) and info.path == str(launcher_env["config"]) and info.exists
    with pytest.raises(ConfigError, match="has no ssh_host"):
        lx.trust("local", lambda key: True)
    seen: list = []
    assert lx.keep_watching(once=True, echo=seen.append) is None and seen == []  # nothing open: nothing to say
    code, out, err = cli("targets", "trust", "local", "--yes")
    assert code == 2 and out == "" and "target 'local' has no ssh_host" in err


def test_the_door_names_every_public_result_and_imports_them_on_first_use():
    import subprocess
    import sys

    import launcher.api as api
    from launcher.api import results

    assert api.Launcher.__module__ == "launcher.api.facade"
    assert api.SpecReader.__module__ == "launcher.api.specs" and api.SpecLauncher.__module__ == "launcher.api.rendering"
    assert issubclass(api.Launcher, api.SpecLauncher) and issubclass(api.SpecLauncher, api.SpecReader)
    for name in api.__all__:
        assert getattr(api, name) is getattr(results, name, None) or name in ("Launcher", "SpecLauncher", "SpecReader")
    code = "import sys, launcher.api.errors; print('launcher.api.facade' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip()
    assert out == "False"  # `launcher --help` imports the errors module of every verb, not the facade
