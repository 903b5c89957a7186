"""A sweep on the local target (real processes, the real `launcher` command): every element is
its own process, `launcher watch` starts queued elements as slots free and never runs more
than max_parallel at once; with three watchers every element still runs exactly once. On both
engines of the state store (tests.fixtures.stores: the launchers share one SQLite file, or one
PostgreSQL server)."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI, job_id_of, start_watcher, stop_watchers

pytestmark = pytest.mark.usefixtures("state_engine")  # sets LAUNCHER_STATE_URL, which LauncherCLI passes on

N, MAX_PARALLEL = 6, 2


def element_program(tmp: Path) -> Path:
    """Appends "start T PARAMS SEED ROOT" and "end T" to OUT/e<index>.txt around a short sleep."""
    f = tmp / "element.py"
    f.write_text(textwrap.dedent("""
        import os, sys, time
        out = os.path.join(os.environ["OUT"], "e" + os.environ["LAUNCHER_SWEEP_INDEX"] + ".txt")
        def note(line):
            with open(out, "a") as f:
                f.write(line + "\\n")
        note("start %r %s %s %s %s" % (time.time(), os.environ["LAUNCHER_PARAM_LR"], os.environ["LAUNCHER_PARAMS"],
                                       os.environ["LAUNCHER_SEED"], os.environ["LAUNCHER_CKPT_ROOT"]))
        time.sleep(float(os.environ.get("HOLD", "1.5")))
        note("end %r" % time.time())
    """))
    return f


def launch_sweep(cli: LauncherCLI, hostile: bool = False) -> tuple[str, Path]:
    out = cli.tmp / "out"
    out.mkdir()
    lrs = [0.001 * (i + 1) for i in range(N)]
    spec = cli.spec("swl", {"run": f"{sys.executable} {element_program(cli.tmp)}", "env": {"OUT": str(out)},
                            "checkpoint": {"root": str(cli.tmp / "ck")},
                            "sweep": {"grid": {"lr": lrs}, "max_parallel": MAX_PARALLEL}})
    p = cli.run("launch", spec, "--target", "local")
    assert "as separate jobs, at most 2 at once" in p.stderr
    return job_id_of(p), out


def intervals(out: Path) -> dict:
    """index -> [(start, end, params json, seed, root)], one per run of the element."""
    runs: dict = {}
    for f in sorted(out.glob("e*.txt")):
        i = int(f.stem[1:])
        lines = f.read_text().splitlines()
        starts = [ln.split(" ", 5) for ln in lines if ln.startswith("start ")]
        ends = [float(ln.split()[1]) for ln in lines if ln.startswith("end ")]
        runs[i] = [(float(s[1]), e, s[3], s[4], s[5]) for s, e in zip(starts, ends)]
        assert len(starts) == len(ends), f.read_text()
    return runs


def most_at_once(runs: dict) -> int:
    edges = sorted([(s, 1) for rs in runs.values() for s, *_ in rs] + [(e, -1) for rs in runs.values()
                                                                          for _, e, *_ in rs],
                   key=lambda x: (x[0], x[1]))  # an end at the same instant as a start comes first
    now = peak = 0
    for _, d in edges:
        now += d
        peak = max(peak, now)
    return peak


def sweep_status(cli: LauncherCLI, sweep_id: str) -> dict:
    return json.loads(cli.run("status", sweep_id, "--json").stdout)


def all_completed(cli: LauncherCLI, sweep_id: str):
    s = sweep_status(cli, sweep_id)
    return s if s["counts"] == {"COMPLETED": N} else None


def check_runs(cli: LauncherCLI, sweep_id: str, out: Path) -> None:
    runs = intervals(out)
    assert sorted(runs) == list(range(N))
    assert all(len(rs) == 1 for rs in runs.values()), runs  # exactly once
    assert most_at_once(runs) <= MAX_PARALLEL, runs
    seeds = set()
    for i, [(_, _, params, seed, root)] in runs.items():
        assert json.loads(params) == {"lr": 0.001 * (i + 1)}
        assert root == str(cli.tmp / "ck" / f"element-{i:04d}")
        seeds.add(seed)
    assert len(seeds) == N
    for i in range(N):
        attempts = cli.status(f"{sweep_id}-e{i}")["attempts"]
        assert len(attempts) == 1, attempts


def test_watch_runs_six_elements_two_at_a_time(tmp_path):
    cli = LauncherCLI(tmp_path)
    sweep_id, out = launch_sweep(cli)
    first = sweep_status(cli, sweep_id)
    assert first["counts"].get("QUEUED", 0) >= N - MAX_PARALLEL - 2  # status may start some itself
    p = cli.run("watch", "--exit-when-idle", "--interval", "0.3", timeout=300)
    assert "no open jobs left" in p.stdout
    s = all_completed(cli, sweep_id)
    assert s, sweep_status(cli, sweep_id)
    assert [e["params"]["lr"] for e in s["elements"]] == [0.001 * (i + 1) for i in range(N)]
    check_runs(cli, sweep_id, out)


def test_three_watchers_start_each_element_once_and_never_more_than_max_parallel(tmp_path):
    cli = LauncherCLI(tmp_path)
    cli.env["LAUNCHER_CLAIM_TTL"] = "5"  # a killed watcher's claims are taken over quickly
    cli.env["HOLD"] = "1.0"
    sweep_id, out = launch_sweep(cli)
    watchers = [start_watcher(cli, i, interval=0.05) for i in range(3)]
    try:
        poll("an element of the second pair started", lambda: len(list(out.glob("e*.txt"))) >= 3, timeout=120,
             interval=0.1)
        os.killpg(watchers[0].pid, signal.SIGKILL)  # one watcher dies wherever it was
        watchers[0].wait(timeout=30)
        poll("every element completed", lambda: all_completed(cli, sweep_id), timeout=240, interval=1,
             detail=lambda: json.dumps(sweep_status(cli, sweep_id), indent=1))
    finally:
        stop_watchers(watchers)
    check_runs(cli, sweep_id, out)


def test_cancel_of_the_sweep_closes_queued_elements_before_they_start(tmp_path):
    cli = LauncherCLI(tmp_path)
    cli.env["HOLD"] = "60"
    sweep_id, out = launch_sweep(cli)
    p = cli.run("cancel", sweep_id)
    assert p.returncode == 0
    s = sweep_status(cli, sweep_id)
    assert s["counts"] == {"CANCELLED": N}
    cli.run("watch", "--once")
    assert len(list(out.glob("e*.txt"))) <= MAX_PARALLEL  # the queued ones never started
    for i in range(MAX_PARALLEL, N):
        assert cli.status(f"{sweep_id}-e{i}")["attempts"] == []


def test_a_plugin_target_that_runs_no_arrays_gets_one_job_per_element(tmp_path):
    # the fakecloud plugin is a Scheduler whose runs_arrays says no for its targets: the launcher keeps
    # max_parallel, as on local
    plugin = Path(__file__).parent / "fakecloud"
    cli = LauncherCLI(tmp_path, None, {"cloud": {"backend": "fakecloud"}})
    cli.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin), cli.env.get("PYTHONPATH")]))
    cli.env["HOLD"] = "0.2"
    out = cli.tmp / "out"
    out.mkdir()
    spec = cli.spec("swc", {"run": f"{sys.executable} {element_program(cli.tmp)}", "env": {"OUT": str(out)},
                            "checkpoint": {"root": str(cli.tmp / "ck")},
                            "sweep": {"points": [{"lr": 0.001}, {"lr": 0.002}, {"lr": 0.003}], "max_parallel": 1}})
    p = cli.run("launch", spec, "--target", "cloud")
    assert "as separate jobs, at most 1 at once" in p.stderr
    sweep_id = job_id_of(p)
    cli.run("watch", "--exit-when-idle", "--interval", "0.3", timeout=300)
    s = sweep_status(cli, sweep_id)
    assert s["counts"] == {"COMPLETED": 3}, s
    runs = intervals(out)
    assert sorted(runs) == [0, 1, 2] and most_at_once(runs) == 1
    assert {cli.status(f"{sweep_id}-e{i}")["target"] for i in range(3)} == {"cloud"}
