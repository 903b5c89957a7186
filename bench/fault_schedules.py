"""Randomized fault schedules, many more than CI runs (issue 20 §10): the harness of
tests/integration/fault_harness.py on the local target and on a throw-away netns Slurm test
cluster that this script starts and always stops, and with --docker on a dockerized Slurm
24.11 cluster reached over SSH (started and removed likewise).

    .venv/bin/python bench/fault_schedules.py [--local 500] [--slurm 100] [--docker 0] [--seed S] [--only I,J]
                                              [--parallel 4] [--slurm-parallel 2] [--json FILE] [--keep]
                                              [--postgres | --url postgresql://...] [--watchers 3]

Each schedule draws a scenario (a launch, a job whose first attempt fails so a watcher
resubmits it, a sweep), a fault point of launcher.core.faults, an action there (a pause
longer than the claim TTL, kill -9, an interrupt, a sleep), the process that gets it (the
launch or one of 2-3 concurrent watchers), timing jitter, sometimes a concurrent cancel, and
on Slurm sometimes slurmctld stopped past its MessageTimeout. After healing, it checks the
three invariants (no (job, attempt) ran user code twice; no job the scheduler has is unknown
to `status`; no command reported an action it did not take).

Prints, per backend: schedules run, per scenario, fault point, action and victim how many
ran and in how many the fault fired, and the violations (must be 0), each with its seed
and the line that replays it. Exits 1 when there is a violation. The Slurm schedules run the
real sbatch unless $LAUNCHER_FAULT_SBATCH names a wrapper for them all (e.g. ``lost:once``: Slurm
takes the job, its answer is lost; tests/integration/sbatch_wrappers.py). --slurm 0 skips Slurm
(it needs root and the Slurm packages, as the slurm test tier does). --postgres (or --url) runs
every schedule (local and Slurm) on a PostgreSQL store, a fresh database each: the launch and the
watchers of a schedule are then a team's on one server (issue 29: exactly-once with the writers'
lock shared per job). The launches and watchers of the Slurm schedules run on this machine, like
a login node's, so they reach the server on 127.0.0.1 while their jobs run on the cluster's
nodes. --watchers N gives every schedule N concurrent watchers (issue 29's acceptance: 3)
instead of 2 or 3 drawn; its replay line carries LAUNCHER_FAULT_WATCHERS=N.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.integration.fault_harness import as_dict, base_seed, draw, run_many, summary  # noqa: E402
from tests.integration.sbatch_wrappers import overridden  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--local", type=int, default=500, help="schedules on the local target")
    ap.add_argument("--slurm", type=int, default=100, help="schedules on a netns Slurm test cluster (0: none)")
    ap.add_argument("--seed", type=int, default=None, help="base seed (default $LAUNCHER_FAULT_SEED, else random)")
    ap.add_argument("--only", default="", help="comma-separated schedule indices to run alone (replay)")
    ap.add_argument("--parallel", type=int, default=6, help="local schedules at a time")
    ap.add_argument("--docker", type=int, default=0,
                    help="schedules on a dockerized Slurm 24.11 cluster over SSH (0: none; needs Docker)")
    ap.add_argument("--slurm-parallel", type=int, default=2, help="Slurm schedules at a time (netns and docker)")
    ap.add_argument("--json", default="", help="write every result here")
    ap.add_argument("--keep", action="store_true", help="keep every schedule's folder (default: failing ones)")
    ap.add_argument("--url", default="", help="the local schedules' stores on this PostgreSQL server (a fresh "
                                              "database each), as a team's")
    ap.add_argument("--postgres", action="store_true", help="the same on a PostgreSQL server this script starts "
                                                            "and always stops (tests.fixtures.postgres)")
    ap.add_argument("--watchers", type=int, default=0, help="concurrent watchers in every schedule (default: 2 "
                                                                "or 3, drawn per schedule)")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else base_seed()
    only = [int(i) for i in a.only.split(",") if i.strip()]
    if len(set(only)) != len(only):  # its jobs are told from the others' by seed and index (job_name)
        ap.error(f"--only {a.only}: each index at most once (a schedule's Slurm jobs are named by seed and index, so "
                 "a second run of one index on the same cluster would read the first run's jobs as its own); "
                 "run the command again to replay it again")
    crowd = a.watchers or None
    again = f" --watchers {a.watchers}" if crowd else ""
    print(f"base seed {seed} (replay one: bench/fault_schedules.py --seed {seed}{again} --only I)", flush=True)
    work = Path(tempfile.mkdtemp(prefix="launcher-faults-"))
    results, out = {}, []
    server = None
    if a.postgres and (a.local or a.slurm or a.docker):
        from tests.fixtures.postgres import start_postgres

        server = start_postgres()
        print(f"PostgreSQL {server.port} on 127.0.0.1 (postmaster pid {server.pid})", flush=True)
    try:
        url = server.url() if server is not None else a.url
        _run_all(a, seed, only, crowd, url, work, results, out)
    finally:
        if server is not None:
            server.destroy()
    if a.json:
        Path(a.json).write_text(json.dumps({k: [as_dict(x) for x in v] for k, v in results.items()}, indent=1,
                                           default=str))
    print("\n".join(out))
    bad = [x for v in results.values() for x in v if x.violations]
    for x in bad:
        print("\n" + x.report())
    print(f"\nviolations: {sum(len(x.violations) for x in bad)} (base seed {seed}); folders under {work}")
    return 1 if bad else 0


def _run_all(a, seed, only, crowd, url, work, results, out) -> None:
    """The local, netns Slurm and docker schedules A asks for, into RESULTS (per backend) and OUT (summaries)."""
    store = " on PostgreSQL" if url else ""
    if a.local:
        t0 = time.monotonic()
        schedules = [draw(seed, i, crowd=crowd) for i in (only or range(a.local))]
        results["local"] = run_many(schedules, work / "local", a.parallel, echo=_echo, keep=a.keep, url=url)
        out.append(f"== local{store}: {time.monotonic() - t0:.0f}s\n{summary(results['local'])}")
        print(out[-1], flush=True)
    if a.slurm:
        from tests.fixtures.slurm import preflight, start_cluster, stop_cluster

        problem = preflight()
        if problem:
            out.append(f"== slurm: not run ({problem})")
            print(out[-1], flush=True)
        else:
            cluster = start_cluster(4)
            try:
                root = cluster.shared_dir / "faults"
                root.mkdir()
                # Slurm schedules take their own indices (after the local ones): one base seed replays both
                base = a.local if not only else 0
                results["slurm"] = _on_cluster("slurm", cluster, root, seed, base, only or range(a.slurm),
                                               a.slurm_parallel, cluster.env, a.keep, out, crowd, url)
            finally:
                cluster.run("scancel", "-u", str(os.getuid()), check=False)  # the cluster is ours
                stop_cluster(cluster, keep=a.keep)
    if a.docker:
        from tests.fixtures.docker_slurm import docker_preflight, start_docker_cluster, stop_docker_cluster

        problem = docker_preflight()
        if problem:
            out.append(f"== docker: not run ({problem})")
            print(out[-1], flush=True)
        else:
            cluster = start_docker_cluster("24.11")
            try:
                root = Path(cluster.home_on_host) / "alice" / "faults"  # on the shared home: the nodes write there
                root.mkdir()
                base = a.local + a.slurm if not only else 0  # after the local and netns ones
                env = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHER_")}
                results["docker"] = _on_cluster("docker", cluster, root, seed, base, only or range(a.docker),
                                                a.slurm_parallel, env, a.keep, out, crowd, url)
            finally:
                if root.exists():  # the volume goes with the cluster: what run_many kept is copied out first
                    shutil.copytree(root, work / "docker", dirs_exist_ok=True)
                stop_docker_cluster(cluster)


def _on_cluster(label, cluster, root, seed, base, indices, parallel, env, keep, out, crowd=None, url="") -> list:
    """Slurm schedules BASE+I (I in INDICES) of SEED on CLUSTER, summed up into OUT; CROWD
    watchers each (None: drawn), on a fresh database of the PostgreSQL server URL each ("": SQLite)."""
    t0 = time.monotonic()
    schedules = [draw(seed, base + i, backends=("slurm",), crowd=crowd) for i in indices]
    if label == "slurm":  # $LAUNCHER_FAULT_SBATCH (e.g. lost:once): that wrapper sbatch first on PATH
        schedules = [overridden(s) for s in schedules]
    results = run_many(schedules, root, parallel, env=env, cluster=cluster, echo=_echo, keep=keep, url=url)
    store = " on PostgreSQL" if url else ""
    out.append(f"== {label} ({_version(cluster)}){store}: {time.monotonic() - t0:.0f}s\n{summary(results)}")
    print(out[-1], flush=True)
    return results


def _echo(line: str) -> None:
    print(line, flush=True)


def _version(cluster) -> str:
    try:
        return cluster.run("sinfo", "--version").stdout.strip()
    except Exception:  # noqa: BLE001 - only a label
        return "Slurm ?"


if __name__ == "__main__":
    sys.exit(main())
