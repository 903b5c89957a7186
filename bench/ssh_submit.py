"""How much one reused SSH connection saves per remote command.

Starts its own sshd on 127.0.0.1 (tests/fixtures/sshd.py), then runs the same command N
times four ways and prints mean / p50 / p95 latency per command:

  reused     SSHRunner: one paramiko connection for all N commands (what launcher does)
  openssh    `ssh HOST CMD` once per command (OpenSSH client, new connection each time)
  mux        `ssh` through an OpenSSH ControlMaster (reference: OpenSSH's own reuse)
  fresh      SSHRunner with the pool closed before every command (a handshake each time)

The first three run round robin (one command of each in turn), so load changes on a
shared machine hit them alike; "fresh" runs after them. Every mode pays the same
server-side cost per command (sshd forks a session and starts the user's login shell,
which reads ~/.bashrc on Debian): on a login node with a heavy ~/.bashrc that cost
dominates, and only the connection setup differs between the modes.

The command is `true` by default. With --sbatch (needs SLURM_CONF pointing at a running
cluster reachable from this host), it is `sbatch --parsable --hold --wrap true`; every
held job is cancelled at the end. Figures only: nothing passes or fails on a time.

    .venv/bin/python bench/ssh_submit.py -n 50
    SLURM_CONF=/path/slurm.conf .venv/bin/python bench/ssh_submit.py -n 30 --sbatch
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from launcher.ssh import SSHRunner, close_all, remote_command  # noqa: E402
from tests.fixtures.sshd import start_sshd  # noqa: E402


def stats(samples: list[float]) -> dict:
    s = sorted(samples)
    return {"n": len(s), "mean_ms": statistics.fmean(s) * 1000, "p50_ms": s[len(s) // 2] * 1000,
            "p95_ms": s[min(len(s) - 1, int(len(s) * 0.95))] * 1000}


def timed(fn, n: int) -> tuple[list[float], list[str]]:
    lat, outs = [], []
    for _ in range(n):
        t = time.perf_counter()
        outs.append(fn())
        lat.append(time.perf_counter() - t)
    return lat, outs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=50, help="commands per mode (default 50)")
    ap.add_argument("--sbatch", action="store_true", help="submit held jobs instead of running `true`")
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = ap.parse_args()

    env = {}
    argv = ["true"]
    if args.sbatch:
        if not os.environ.get("SLURM_CONF"):
            ap.error("--sbatch needs SLURM_CONF (the cluster's slurm.conf)")
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
        argv = ["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"]

    with tempfile.TemporaryDirectory(prefix="launcher-bench-ssh-") as tmp:
        server = start_sshd(Path(tmp) / "sshd")
        try:
            opts = dict(ssh_host=server.host, ssh_port=server.port, ssh_user=server.user,
                        ssh_key=str(server.client_key), known_hosts=str(server.known_hosts), ssh_config="",
                        ssh_agent=False, env=env)
            line = remote_command(argv, env)
            job_ids: list = []

            def openssh(*extra):
                p = subprocess.run(server.ssh_argv(line, options=list(extra)), capture_output=True, text=True)
                if p.returncode:
                    raise RuntimeError(f"ssh failed: {p.stderr.strip()}")
                return p.stdout

            mux = ["-o", "ControlMaster=auto", "-o", f"ControlPath={tmp}/cm-%p", "-o", "ControlPersist=120"]
            job_ids.append(openssh(*mux))  # start the master outside the timing
            runner = SSHRunner(opts)
            t = time.perf_counter()
            runner.connect()
            connect_ms = (time.perf_counter() - t) * 1000
            logins = server.accepted_logins()

            # round robin, so that a change of load on the machine hits every mode alike
            modes = {"reused": lambda: runner.run(argv).stdout, "openssh": openssh, "mux": lambda: openssh(*mux)}
            lat = {m: [] for m in modes}
            for _ in range(args.n):
                for m, fn in modes.items():
                    t = time.perf_counter()
                    job_ids.append(fn())
                    lat[m].append(time.perf_counter() - t)
            # openssh logs in once per command; mux and reused never again
            assert server.accepted_logins() == logins + args.n and runner.connects == 1, "no reuse?"
            runner.close()
            subprocess.run(server.ssh_argv(options=mux + ["-O", "exit"]), capture_output=True)

            def fresh():  # a new paramiko connection per command (the pool emptied each time)
                close_all()
                r = SSHRunner(opts)
                try:
                    return r.run(argv).stdout
                finally:
                    r.close()

            lat["fresh"], outs = timed(fresh, args.n)
            job_ids += outs
            results = {m: stats(lat[m]) for m in ("reused", "fresh", "openssh", "mux")}
        finally:
            close_all()
            server.stop()

    if args.sbatch:
        ids = [o.strip().split(";")[0] for o in job_ids if o.strip()]
        for i in range(0, len(ids), 200):
            subprocess.run(["scancel", *ids[i:i + 200]], env=dict(os.environ), capture_output=True)

    base = results["openssh"]["mean_ms"]
    print(f"command: {' '.join(argv)}   n={args.n} per mode   sshd on 127.0.0.1 (OpenSSH), "
          f"first connect (TCP + handshake + key check + auth): {connect_ms:.1f} ms")
    print(f"{'mode':<9} {'mean ms':>9} {'p50 ms':>9} {'p95 ms':>9} {'vs openssh':>11}")
    for mode, r in results.items():
        print(f"{mode:<9} {r['mean_ms']:>9.1f} {r['p50_ms']:>9.1f} {r['p95_ms']:>9.1f} {base / r['mean_ms']:>10.2f}x")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"command": argv, "connect_ms": connect_ms, **results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
