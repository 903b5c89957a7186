"""200 single `launch()` calls against raw `sbatch` of the same script, interleaved in
one run, on a throw-away test cluster (tests/cluster) that this script starts and stops.

    .venv/bin/python bench/launch_vs_sbatch.py [--n 200] [--profile FILE] [--phases]

Each round submits one job with a raw `sbatch --parsable SCRIPT` subprocess (SCRIPT is
what launch() renders for the same spec, written once) and then one job through the
launch() API in the same process (render + provenance + stage + sbatch + state store),
so a busy machine slows both alike. Jobs are submitted held and cancelled afterwards.
Figures are printed, never asserted (issue 19 budget: the launcher's own work, each launch()
minus the raw sbatch run beside it, at most 5 ms).
--profile writes a cProfile of the launch() calls (pstats format) and prints its top.
--phases times the phases of each launch() (bench/_phases.py) and prints their medians.
The cluster's state and the launcher's home go under $TMPDIR (default /tmp). Each launch
makes a job folder and two files there; the header prints what a mkdir and a file create
cost on that file system at the time of the run (on this machine's one ext4 disk it moved
between 0.05 and 1 ms from hour to hour, and /tmp and /var/tmp swapped places): pick the
faster one with TMPDIR to see the launcher's own work.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

from _cluster import TARGET, bench_cluster, slurm_version


def stats(samples):
    ms = sorted(s * 1000 for s in samples)
    return statistics.mean(ms), statistics.median(ms), ms[max(0, int(len(ms) * 0.95) - 1)]


def raw_script(app, spec, tmp: Path) -> Path:
    """The sbatch script launch() submits for SPEC, rendered once (its job dir made)."""
    from launcher.backend.protocols import JobRef
    from launcher.launching.submission import facts_for

    job_dir = tmp / "rawjob"
    job_dir.mkdir()
    req = app.backend(TARGET).render(spec, facts_for(app, spec, TARGET),
                                     JobRef(job_id="raw", attempt=1, job_dir=str(job_dir), seed=1))
    script = job_dir / "attempt-1.sbatch"
    script.write_text(req.text)
    return script


def interleaved(raw_once, api_once, n: int, warmup: int = 3, prof=None) -> tuple[list, list]:
    """N timings of each, alternating which goes first (a busy machine slows both alike);
    PROF (a cProfile.Profile) records the api_once calls only."""
    for _ in range(warmup):  # first-use costs (imports, the helper zip) are not per-job costs
        raw_once()
        api_once()
    raw, api = [], []
    for i in range(n):
        for fn in ((raw_once, api_once) if i % 2 == 0 else (api_once, raw_once)):
            if fn is api_once and prof is not None:
                prof.enable()
            t = time.perf_counter()
            fn()
            dt = time.perf_counter() - t
            if fn is api_once and prof is not None:
                prof.disable()
            (raw if fn is raw_once else api).append(dt)
    return raw, api


def launch_vs_raw(bc, n: int, warmup: int = 3, prof=None, phases=None) -> tuple[list, list]:
    """(raw sbatch seconds, launch() seconds), N each, on BC (a bench_cluster); PHASES (a
    _phases.Phases) times the parts of each launch()."""
    from launcher.api.context import App
    from launcher.launching.launch import launch
    from launcher.backend.sections import spec_from_text

    spec_text = "name: bench\nrun: 'true'\nslurm: {extra: ['--hold']}\n"
    # the spec lives in a git work tree, as a real project's does
    spec_file = bc.git_repo("repo", {"bench.yaml": spec_text, "train.py": "print('hi')\n"}) / "bench.yaml"
    app = App()
    try:
        spec = spec_from_text(spec_text)
        app.facts(TARGET)  # the probe is cached per target (facts_ttl), not part of a launch
        script = raw_script(app, spec, bc.tmp)

        def raw_once():
            subprocess.run(["sbatch", "--parsable", str(script)], check=True, capture_output=True,
                           env=bc.cluster.env)

        def api_once():
            if phases is not None:
                with phases.launch():
                    launch(app, spec, spec_text, str(spec_file), TARGET)
            else:
                launch(app, spec, spec_text, str(spec_file), TARGET)

        if phases is not None:
            phases.install(app, TARGET)

        return interleaved(raw_once, api_once, n, warmup, prof)
    finally:
        app.close()


def fs_costs(where: Path, n: int = 100) -> tuple[float, float]:
    """Median ms of a mkdir and of a file create+write under WHERE: what each launch pays per
    job folder and per file (raw sbatch here reuses one script), which varies by file system
    and, on one ext4 disk, from hour to hour (measured here: 0.05 to 1 ms)."""
    import tempfile

    d = Path(tempfile.mkdtemp(dir=where, prefix="fs-"))
    dirs, files = [], []
    try:
        for i in range(n):
            t = time.perf_counter()
            (d / f"d{i}").mkdir()
            dirs.append(time.perf_counter() - t)
            t = time.perf_counter()
            (d / f"d{i}" / "f").write_bytes(b"x" * 3000)
            files.append(time.perf_counter() - t)
    finally:
        import shutil

        shutil.rmtree(d, ignore_errors=True)
    return statistics.median(dirs) * 1000, statistics.median(files) * 1000


def print_ratio(raw, api, n: int) -> None:
    print(f"{'per job (ms)':<34} {'mean':>8} {'median':>8} {'p95':>8}")
    for label, s in (("raw sbatch (subprocess)", raw), ("launch() API, one process", api)):
        print(f"{label:<34} {stats(s)[0]:8.2f} {stats(s)[1]:8.2f} {stats(s)[2]:8.2f}")
    r, l = stats(raw), stats(api)
    print(f"{'ratio launch() / raw sbatch':<34} {l[0] / r[0]:7.2f}x {l[1] / r[1]:7.2f}x {l[2] / r[2]:7.2f}x"
          f"   (n={n} each)")
    own = sorted((a - b) * 1000 for a, b in zip(api, raw))  # the pairs ran back to back
    print(f"{'launcher own work (launch - raw)':<34} {statistics.mean(own):8.2f} {statistics.median(own):8.2f} "
          f"{own[max(0, int(len(own) * 0.95) - 1)]:8.2f}   (each launch() minus the raw sbatch beside it; budget <= 5 ms)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", "-n", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile", help="write a cProfile of the launch() calls here")
    ap.add_argument("--phases", action="store_true", help="time the phases of each launch()")
    a = ap.parse_args()
    phases = None
    if a.phases:
        from _phases import Phases

        phases = Phases()
    prof = None
    if a.profile:
        import cProfile

        prof = cProfile.Profile()
    with bench_cluster() as bc:
        raw, api = launch_vs_raw(bc, a.n, a.warmup, prof, phases)
        mkdir_ms, create_ms = fs_costs(bc.tmp)
        print(f"cluster: 4 nodes, {slurm_version(bc.cluster)}; n={a.n} each, interleaved; "
              f"load average {os.getloadavg()[0]:.2f}; file system under {bc.tmp.parent}: "
              f"mkdir {mkdir_ms:.2f} ms, file create {create_ms:.2f} ms")
        print_ratio(raw, api, a.n)
        if phases is not None:
            phases.print(a.warmup)
    if prof is not None:
        import pstats

        prof.dump_stats(a.profile)
        pstats.Stats(a.profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
