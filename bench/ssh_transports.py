"""A status and a submit over the two SSH transports, side by side, on the dockerized Slurm
cluster's login node (tests/cluster/docker; alice, whose ~/.bashrc is noisy and slow):

  paramiko  ``transport: paramiko`` (the default): launcher's own client, one connection
            per process, commands through its persistent shells
  openssh   ``transport: openssh``: the system ssh through the shared ControlMaster
            connection that ``launcher targets login`` opens (here opened once, before the
            timing: this login node wants only the key), commands through persistent
            shells, each one ``ssh`` process over the master

Both targets are probed once first (facts cached as by `launcher targets`: the same status
path on both). Each round: one Slurm backend per transport (what one `launcher` command builds), then a
status of a known job (``SlurmBackend.status``: one ``scontrol``) and a submit (render +
stage the script and the job-side helper + sbatch) on each, in turn (round robin, so load
changes on a shared machine hit both alike). "cold" is the first command of a fresh backend
(paramiko: TCP + handshake + auth + the shell's start; openssh: ``ssh -G`` + the shell's start
over the master); "warm" the commands after it. Figures only: nothing passes or fails.

    .venv/bin/python bench/ssh_transports.py [-n 10] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from launcher.backend.config import Target  # noqa: E402
from launcher.backend.protocols import JobRef  # noqa: E402
from launcher.backend.sections import parse_spec  # noqa: E402
from launcher.spec.validation import validate_model  # noqa: E402
from launcher.transport import close_all  # noqa: E402
from launcher_backends.slurm import SlurmBackend  # noqa: E402
from launcher_backends.slurm.options import SlurmOptions  # noqa: E402
from tests.fixtures.docker_slurm import start_docker_cluster, stop_docker_cluster  # noqa: E402

TRANSPORTS = ("paramiko", "openssh")


def stats(samples: list) -> dict:
    s = sorted(samples)
    return {"n": len(s), "mean_ms": statistics.fmean(s) * 1000, "p50_ms": s[len(s) // 2] * 1000,
            "p95_ms": s[min(len(s) - 1, int(len(s) * 0.95))] * 1000}


def backend(cluster, transport: str, home: Path) -> SlurmBackend:
    opts = {**cluster.target, "transport": transport}
    opts.pop("backend", None)

    class App:  # the launcher's home: where openssh's ControlPath lives
        pass

    app = App()
    app.home = str(home)
    return SlurmBackend(Target(f"bench-{transport}", "slurm", validate_model(SlurmOptions, opts, "bench")), app=app)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=10, help="rounds (default 10)")
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = ap.parse_args()
    spec = parse_spec({"name": "bench-ssh", "run": "true", "resources": {"time_limit": "5m"}}, "bench.yaml")
    cluster = start_docker_cluster("24.11")
    home = Path(tempfile.mkdtemp(prefix="lb-"))
    lat = {t: {k: [] for k in ("status cold", "status warm", "submit warm")} for t in TRANSPORTS}
    master = None
    try:
        # the shared connection, opened once outside the timing (as `launcher targets login` does)
        master = backend(cluster, "openssh", home)
        assert master.runner.login() in (True, False)
        facts = master.probe()
        first = master.submit(master.render(spec, facts, JobRef("bench-0", 1, job_dir="", seed=1)))
        master.close()
        for t in TRANSPORTS:  # both with the same cached facts (the same status path: scontrol --json)
            b = backend(cluster, t, home)
            b.probe()
            b.close()
        close_all()
        seq = 0
        for _ in range(args.n):
            for t in TRANSPORTS:
                b = backend(cluster, t, home)
                dt, _ = timed(lambda: b.status([first]))
                lat[t]["status cold"].append(dt)
                dt, _ = timed(lambda: b.status([first]))
                lat[t]["status warm"].append(dt)
                seq += 1
                req = b.render(spec, facts, JobRef(f"bench-{seq}", 1, job_dir="", seed=seq))
                dt, _ = timed(lambda: b.submit(req))
                lat[t]["submit warm"].append(dt)
                b.close()
                close_all()
    finally:
        if master is not None:
            master.runner.logout()
        close_all()
        cluster.run("scancel", "-u", "alice", check=False)
        stop_docker_cluster(cluster)
        shutil.rmtree(home, ignore_errors=True)
    results = {t: {k: stats(v) for k, v in d.items()} for t, d in lat.items()}
    print(f"docker Slurm 24.11 login node, alice (noisy ~/.bashrc, ~0.3 s a login shell); n={args.n} rounds")
    print(f"{'what':<13} {'transport':<9} {'mean ms':>9} {'p50 ms':>9} {'p95 ms':>9} {'openssh/paramiko':>17}")
    for k in lat["paramiko"]:
        for t in TRANSPORTS:
            r = results[t][k]
            ratio = r["mean_ms"] / results["paramiko"][k]["mean_ms"]
            print(f"{k:<13} {t:<9} {r['mean_ms']:>9.1f} {r['p50_ms']:>9.1f} {r['p95_ms']:>9.1f} {ratio:>16.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"n": args.n, **results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
