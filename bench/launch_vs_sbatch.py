"""200 single `launch()` calls against raw `sbatch` of the same script, interleaved in
one run, on a throw-away test cluster (tests/cluster) that this script starts and stops.

    .venv/bin/python bench/launch_vs_sbatch.py [--n 200] [--profile FILE]

Each round submits one job with a raw `sbatch --parsable SCRIPT` subprocess (SCRIPT is
what launch() renders for the same spec, written once) and then one job through the
launch() API in the same process (render + provenance + stage + sbatch + state store),
so a busy machine slows both alike. Jobs are submitted held and cancelled afterwards.
Figures are printed, never asserted (issue 13 target: launch() at most 1.2x raw sbatch).
--profile writes a cProfile of the launch() calls (pstats format) and prints its top.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.slurm import start_cluster, stop_cluster  # noqa: E402


def stats(samples):
    ms = sorted(s * 1000 for s in samples)
    return statistics.mean(ms), statistics.median(ms), ms[max(0, int(len(ms) * 0.95) - 1)]


def raw_script(app, spec, tmp: Path) -> Path:
    """The sbatch script launch() submits for SPEC, rendered once (its job dir made)."""
    from launcher.backend import JobRef
    from launcher.submission import facts_for

    job_dir = tmp / "rawjob"
    job_dir.mkdir()
    req = app.backend("testcl").render(spec, facts_for(app, spec, "testcl"),
                                       JobRef(job_id="raw", attempt=1, job_dir=str(job_dir), seed=1))
    script = job_dir / "attempt-1.sbatch"
    script.write_text(req.text)
    return script


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", "-n", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile", help="write a cProfile of the launch() calls here")
    a = ap.parse_args()
    cluster = start_cluster(4)
    tmp = Path(tempfile.mkdtemp())
    try:
        os.environ.update(cluster.env)
        cfg = tmp / "config.yaml"
        cfg.write_text(f"targets:\n  testcl: {{backend: slurm, slurm_conf: {cluster.conf}, partition: batch}}\n")
        os.environ.update(LAUNCHER_HOME=str(tmp / "home"), LAUNCHER_CONFIG=str(cfg))
        spec_text = "name: bench\nrun: 'true'\nslurm: {extra: ['--hold']}\n"
        repo = tmp / "repo"  # the spec lives in a git work tree, as a real project's does
        repo.mkdir()
        spec_file = repo / "bench.yaml"
        spec_file.write_text(spec_text)
        (repo / "train.py").write_text("print('hi')\n")
        git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        subprocess.run([*git, "-C", str(repo), "add", "."], check=True)
        subprocess.run([*git, "-C", str(repo), "commit", "-qm", "bench"], check=True)
        time.sleep(2.1)  # files written this instant are "racy" for the git identity cache (gitcache)

        from launcher.app import App
        from launcher.launch import launch
        from launcher.specload import spec_from_text

        app = App()
        spec = spec_from_text(spec_text)
        app.facts("testcl")  # the probe is cached per target (facts_ttl), not part of a launch
        script = raw_script(app, spec, tmp)

        def raw_once():
            subprocess.run(["sbatch", "--parsable", str(script)], check=True, capture_output=True, env=cluster.env)

        def api_once():
            launch(app, spec, spec_text, str(spec_file), "testcl")

        for _ in range(a.warmup):  # first-use costs (imports, the helper zip) are not per-job costs
            raw_once()
            api_once()
        prof = None
        if a.profile:
            import cProfile

            prof = cProfile.Profile()
        raw, api = [], []
        for i in range(a.n):
            order = (raw_once, api_once) if i % 2 == 0 else (api_once, raw_once)
            for fn in order:
                if fn is api_once and prof is not None:
                    prof.enable()
                t = time.perf_counter()
                fn()
                dt = time.perf_counter() - t
                if fn is api_once and prof is not None:
                    prof.disable()
                (raw if fn is raw_once else api).append(dt)

        print(f"cluster: 4 nodes, Slurm {app.facts('testcl').get('slurm_version')}; n={a.n} each, interleaved; "
              f"load average {os.getloadavg()[0]:.2f}")
        print(f"{'per job (ms)':<34} {'mean':>8} {'median':>8} {'p95':>8}")
        for label, s in (("raw sbatch (subprocess)", raw), ("launch() API, one process", api)):
            print(f"{label:<34} {stats(s)[0]:8.2f} {stats(s)[1]:8.2f} {stats(s)[2]:8.2f}")
        r, l = stats(raw), stats(api)
        print(f"{'ratio launch() / raw sbatch':<34} {l[0] / r[0]:7.2f}x {l[1] / r[1]:7.2f}x {l[2] / r[2]:7.2f}x"
              f"   (target <= 1.2x)")
        if prof is not None:
            import pstats

            prof.dump_stats(a.profile)
            pstats.Stats(a.profile).sort_stats("cumulative").print_stats(40)
        app.close()
    finally:
        subprocess.run(["scancel", "-u", str(os.getuid())], env=cluster.env, capture_output=True)
        stop_cluster(cluster)


if __name__ == "__main__":
    main()
