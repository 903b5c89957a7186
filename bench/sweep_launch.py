"""Issue 13's benchmark table, side by side in one run, on a throw-away test cluster
(tests/cluster) that this script starts and stops:

    .venv/bin/python bench/sweep_launch.py [--size 1000] [--rounds 3] [--single-n 200] [--phases]

1. Launching a SIZE-element sweep through ``launcher.api.facade.Launcher`` (one sbatch --array plus
   a job row per element) against raw ``sbatch`` of the very script launcher renders for it
   (its ``#SBATCH --array=0-(SIZE-1)%P`` line and sweep table written once), and against
   submitit's ``map_array`` of SIZE calls (pickles + one sbatch --array). ROUNDS of each,
   interleaved; every array is submitted held and cancelled at the end.
2. ``status`` of the SIZE elements (``Launcher.sweep``, what ``launcher status SWEEP`` prints):
   its time (median of ROUNDS) and how many Slurm commands it ran, counted by wrappers put
   first on PATH (the first round).
3. SINGLE_N single ``launch()`` calls against raw ``sbatch`` (bench/launch_vs_sbatch.py).

--phases times the steps of each launcher sweep launch (bench/_phases.py: the functions it
calls wrapped in place) and prints their medians. Figures are printed, never asserted.
Budgets (issue 19; the ratio targets against a test controller's 8 ms sbatch are retired): a
SIZE=1,000 sweep launch <= 250 ms; status of its 1,000 elements <= 300 ms in one scheduler
call; the launcher's own work per single launch() (each launch minus the raw sbatch run beside
it) <= 5 ms.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from _cluster import TARGET, bench_cluster, slurm_version
from launch_vs_sbatch import launch_vs_raw, stats

W = 52  # the label column
SLURM_COMMANDS = ("sbatch", "squeue", "scontrol", "sacct", "sinfo", "scancel")


# (module, attribute, label) of what a sweep launch calls, looked up at call time; indented: part of the line above
SWEEP_PHASES = (
    ("launcher.launching.specinput", "spec_input", "parse the spec (spec_input)"),
    ("launcher.backend.sections", "load_yaml", "  YAML (load_yaml)"),
    ("launcher.backend.sections", "parse_spec", "  validate (parse_spec)"),
    ("launcher.spec.model", "resolve_paths", "  resolve_paths"),
    ("launcher.launching.targeting", "pick_target", "pick_target"),
    ("launcher.launching.specinput", "require_local_workdir", "require_local_workdir"),
    ("launcher.backend.support", "require_supported", "require_supported"),
    ("launcher.spec.secretenv", "for_launch", "secret env (for_launch)"),
    ("launcher.sweep.arrays", "new_job_id", "new_job_id"),
    ("launcher.launching.submission", "facts_for", "facts_for"),
    ("launcher_backends.slurm.array", "sweep_table", "  the sweep table"),
    ("launcher_backends.slurm.render", "render_template", "  the script template"),
    ("launcher.sweep.arrays", "element_rows", "element rows (element_rows)"),
    ("launcher.sweep.arrays", "begin_sweep", "SUBMITTING transaction (begin_sweep)"),
    ("launcher_backends.slurm.submitting", "submitted", "  wait for sbatch"),
    ("launcher.sweep.arrays", "record_array", "adopting transaction (record_array)"),
    ("launcher.sweep.arrays", "submitted_entries", "  submitted_entries"),
)


def sweep_objects(store, backend):
    """(object, method, label) of the store's and backend's steps of a sweep launch."""
    return ((store, "job_dir", "store.job_dir"),
            (backend, "render", "render"),
            (backend, "submit", "submit (stage, sbatch)"),
            (backend, "_stage_helper", "  stage helper"),
            (backend.runner, "put_file", "  write table and script"),
            (backend.runner, "start", "  start sbatch (fork/exec)"),
            (store.sweeps, "share", "  share (the array id)"),
            (store.bulk, "record_submitted", "  record_submitted"))


def _noop(i):
    return i


def sweep_spec(size: int, parallel: int) -> str:
    return (f"name: sweepbench\nrun: 'true'\nslurm: {{extra: ['--hold']}}\n"
            f"sweep: {{grid: {{x: [{', '.join(map(str, range(size)))}]}}, max_parallel: {parallel}}}\n")


def raw_array_script(bc, spec_text: str) -> Path:
    """The sbatch script (and sweep table) launcher submits for the sweep, written once."""
    from launcher.api.context import App
    from launcher.backend.protocols import JobRef
    from launcher.backend.sections import spec_from_text
    from launcher.launching.submission import facts_for

    job_dir = bc.tmp / "raw-sweep"
    job_dir.mkdir()
    app = App()
    try:
        spec = spec_from_text(spec_text)
        req = app.backend(TARGET).render(spec, facts_for(app, spec, TARGET),
                                         JobRef(job_id="raw", attempt=1, job_dir=str(job_dir), seed=1))
    finally:
        app.close()
    for name, content in req.files:
        (job_dir / name).write_bytes(content.encode() if isinstance(content, str) else content)
    script = job_dir / "attempt-1.sbatch"
    script.write_text(req.text)
    return script


def submitit_executor(bc, parallel: int):
    """A submitit SlurmExecutor for the same partition, held arrays; None when not installed."""
    try:
        import submitit
    except ImportError:
        return None
    ex = submitit.SlurmExecutor(folder=str(bc.tmp / "submitit" / "%j"))
    ex.update_parameters(partition="batch", time=5, array_parallelism=parallel, additional_parameters={"hold": True})
    return ex


def path_wrappers(bc) -> tuple[Path, Path]:
    """A folder of wrappers that log each Slurm command to a file, then run the real one."""
    d, log = bc.tmp / "wrappers", bc.tmp / "slurm-calls.log"
    d.mkdir()
    for name in SLURM_COMMANDS:
        real = shutil.which(name, path=bc.cluster.env["PATH"])
        w = d / name
        w.write_text(f"#!/bin/sh\necho \"{name} $*\" >> {shlex.quote(str(log))}\nexec {shlex.quote(real)} \"$@\"\n")
        w.chmod(0o755)
    return d, log


def time_sweeps(bc, lx, spec_file: Path, script: Path, ex, size: int, rounds: int, phases=None) -> dict:
    """{row: [seconds]} for ROUNDS of each way of launching the sweep, interleaved; PHASES (a
    _phases.Phases) times the steps of each launcher launch."""
    def raw():
        subprocess.run(["sbatch", "--parsable", str(script)], check=True, capture_output=True, env=bc.cluster.env)

    def launcher():
        if phases is None:
            out["sweep_id"] = lx.launch(str(spec_file), target=TARGET).job_id
            return
        with phases.launch():
            out["sweep_id"] = lx.launch(str(spec_file), target=TARGET).job_id

    def sub():
        jobs = ex.map_array(_noop, range(size))
        assert len(jobs) == size

    out: dict = {}
    ways = {"raw sbatch --array": raw, "launcher.api.facade.Launcher.launch": launcher}
    if ex is not None:
        ways["submitit map_array"] = sub
    times: dict = {k: [] for k in ways}
    names = list(ways)
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            t = time.perf_counter()
            ways[k]()
            times[k].append(time.perf_counter() - t)
    return {**times, "_sweep_id": out["sweep_id"]}


def time_status(bc, lx, sweep_id: str, rounds: int) -> tuple[float, list, float]:
    """(median seconds, Slurm commands of one status, seconds of one raw `scontrol -o show job`)
    for ROUNDS of the sweep's status; the first counts the Slurm commands (PATH wrappers)."""
    wrappers, log = path_wrappers(bc)
    old = os.environ["PATH"]
    os.environ["PATH"] = f"{wrappers}{os.pathsep}{old}"
    try:
        t = time.perf_counter()
        summary = lx.sweep(sweep_id)
        took = [time.perf_counter() - t]
    finally:
        os.environ["PATH"] = old
    calls = log.read_text().splitlines() if log.exists() else []
    for _ in range(rounds - 1):
        t = time.perf_counter()
        lx.sweep(sweep_id)
        took.append(time.perf_counter() - t)
    took = statistics.median(took)
    assert summary and summary.size == sum(summary.counts.values()), summary
    t = time.perf_counter()
    subprocess.run(["scontrol", "-o", "show", "job"], check=True, capture_output=True, env=bc.cluster.env)
    return took, calls, time.perf_counter() - t


def profile_launch(lx, spec_file: Path, top: int) -> None:
    """cProfile one more sweep launch, then its status; print the TOP costliest functions of
    each (cumulative, then own time)."""
    import cProfile
    import pstats

    def profiled(what: str, call):
        prof = cProfile.Profile()
        got = prof.runcall(call)
        print(f"---- profile of one sweep {what}")
        for key in ("cumulative", "tottime"):
            pstats.Stats(prof).sort_stats(key).print_stats(top)
        return got

    sweep_id = profiled("launch", lambda: lx.launch(str(spec_file), target=TARGET).job_id)
    profiled("status", lambda: lx.sweep(sweep_id))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--parallel", type=int, default=100, help="max_parallel / array_parallelism")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--single-n", type=int, default=200, help="single launch() calls (0: skip)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also cProfile one more sweep launch and print its N costliest functions (cumulative)")
    ap.add_argument("--phases", action="store_true", help="time the steps of each launcher sweep launch")
    a = ap.parse_args()
    phases = None
    if a.phases:
        from _phases import Phases

        phases = Phases(SWEEP_PHASES, title="a sweep launch")
    with bench_cluster() as bc:
        from launcher.api.facade import Launcher

        spec_text = sweep_spec(a.size, a.parallel)
        repo = bc.git_repo("sweeprepo", {"sweep.yaml": spec_text, "small.yaml": sweep_spec(2, 2)})
        script = raw_array_script(bc, spec_text)
        ex = submitit_executor(bc, a.parallel)
        with Launcher() as lx:
            lx.launch(str(repo / "small.yaml"), target=TARGET)  # first use: imports, probe, helper zip
            if phases is not None:
                phases.install(lx.app, TARGET, sweep_objects)
            if ex is not None:
                ex.map_array(_noop, range(2))
            subprocess.run(["sbatch", "--parsable", str(script)], check=True, capture_output=True, env=bc.cluster.env)
            sweeps = time_sweeps(bc, lx, repo / "sweep.yaml", script, ex, a.size, a.rounds, phases)
            status = time_status(bc, lx, sweeps.pop("_sweep_id"), a.rounds)
            if a.profile:
                profile_launch(lx, repo / "sweep.yaml", a.profile)
        single = launch_vs_raw(bc, a.single_n) if a.single_n else None
        print(f"cluster: 4 nodes, {slurm_version(bc.cluster)}; load average {os.getloadavg()[0]:.2f}; "
              f"sweep of {a.size} elements, max_parallel {a.parallel}, {a.rounds} rounds each (median)")
        report(sweeps, status, single, a, ex is not None)
        if phases is not None:
            phases.print()


def report(sweeps: dict, status: tuple, single, a, have_submitit: bool) -> None:
    raw = statistics.median(sweeps["raw sbatch --array"])
    print(f"{'what':<{W}} {'median':>10}  {'vs raw':>7}   target")
    for k, v in sweeps.items():
        m = statistics.median(v)
        label = f"{a.size}-element sweep: {k}"
        print(f"{label:<{W}} {m * 1000:8.1f} ms  {m / raw:6.2f}x"
              + ("   <= 250 ms" if k.startswith("launcher") else ""))
    if not have_submitit:
        print("submitit map_array: not run (submitit is not installed: pip install 'launcher[bench]')")
    took, calls, raw_status = status
    names = ", ".join(c.split(" ")[0] for c in calls) or "none"
    print(f"{'status of ' + str(a.size) + ' elements (Launcher.sweep, median)':<{W}} {took * 1000:8.1f} ms"
          f"   {len(calls)} Slurm command(s): {names}   <= 300 ms in one scheduler call")
    print(f"{'  one raw scontrol -o show job':<{W}} {raw_status * 1000:8.1f} ms")
    if single:
        r, l = stats(single[0]), stats(single[1])
        own = statistics.median((x - y) * 1000 for x, y in zip(single[1], single[0]))  # pairs run back to back
        print(f"{f'{a.single_n} single launch() vs raw sbatch, per job':<{W}} {l[0]:8.1f} ms  {l[0] / r[0]:6.2f}x"
              f"   (raw sbatch {r[0]:.1f} ms mean; medians {l[1]:.1f} / {r[1]:.1f} ms)")
        print(f"{'  the launcher own work (launch - raw, median)':<{W}} {own:8.1f} ms            <= 5 ms")


if __name__ == "__main__":
    main()
