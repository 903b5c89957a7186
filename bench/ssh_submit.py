"""Per-command cost over SSH on a login node with a noisy, slow ~/.bashrc.

By default this starts its own sshd on 127.0.0.1 (tests/fixtures/sshd.py), logging in as
a throw-away user whose ~/.bashrc prints banners on stdout and stderr and sleeps 0.3 s
(and whose ~/.profile does the same), like a real login node with module systems or
conda init. It then runs the same commands N times in each mode, round robin (one
command of each mode in turn, so load changes on a shared machine hit all modes alike),
and prints mean / p50 / p95 latency per command side by side:

  persistent  SSHRunner, ssh_shell: persistent (launcher's default): one connection,
              commands written to a long-lived `bash --noprofile --norc`, output framed
  exec        SSHRunner, ssh_shell: exec: one connection, one exec channel per command
              (sshd starts the login shell, ~/.bashrc and all, every time)
  openssh     `ssh HOST CMD` once per command (OpenSSH client, a new connection each)
  mux         `ssh` through an OpenSSH ControlMaster (OpenSSH's own connection reuse;
              still a login shell per command)

Commands: `true`; with --slurm also `squeue -h` and `sbatch --test-only --wrap true`
against a throw-away 2-node test cluster (tests/cluster) that this script starts and
stops. One-time costs (the connection; a persistent shell's start-up, which runs the
login shell and `bash -l` once) are printed apart. Figures only: nothing passes or fails.

    .venv/bin/python bench/ssh_submit.py -n 20
    .venv/bin/python bench/ssh_submit.py -n 20 --slurm --json /tmp/ssh_submit.json
    # another login node (e.g. the docker cluster's, as alice):
    .venv/bin/python bench/ssh_submit.py --ssh alice@127.0.0.1:2222 --key KEY --known-hosts FILE
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from launcher.transport import SSHRunner, close_all, pool_stats  # noqa: E402
from launcher.transport.cmdline import remote_command  # noqa: E402

MODES = ("persistent", "exec", "openssh", "mux")


def stats(samples: list[float]) -> dict:
    s = sorted(samples)
    return {"n": len(s), "mean_ms": statistics.fmean(s) * 1000, "p50_ms": s[len(s) // 2] * 1000,
            "p95_ms": s[min(len(s) - 1, int(len(s) * 0.95))] * 1000}


class Login:
    """Where to log in: the local throw-away noisy user, or --ssh USER@HOST:PORT."""

    def __init__(self, host, port, user, key, known_hosts, server=None):
        self.host, self.port, self.user, self.key, self.known_hosts = host, port, user, key, known_hosts
        self.server = server

    def ssh_argv(self, command: str, options=()) -> list[str]:
        return ["ssh", "-F", "/dev/null", "-i", str(self.key), "-p", str(self.port),
                "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                "-o", "LogLevel=ERROR", *options, f"{self.user}@{self.host}", command]

    def runner(self, shell: str, env: dict) -> SSHRunner:
        return SSHRunner(dict(ssh_host=self.host, ssh_port=self.port, ssh_user=self.user, ssh_key=str(self.key),
                              known_hosts=str(self.known_hosts), ssh_config="", ssh_agent=False, env=env,
                              ssh_shell=shell))


def bench(login: Login, commands: dict, n: int, tmp: str, env: dict) -> dict:
    mux = ["-o", "ControlMaster=auto", "-o", f"ControlPath={tmp}/cm-%p", "-o", "ControlPersist=300"]

    def openssh(line, *extra):
        p = subprocess.run(login.ssh_argv(line, options=list(extra)), capture_output=True, text=True)
        return p.returncode, p.stdout

    subprocess.run(login.ssh_argv("true", options=mux), capture_output=True)  # the master, outside the timing
    # both runners share one pooled connection; only how they run commands differs
    runners = {shell: login.runner(shell, env) for shell in ("persistent", "exec")}
    once = {}
    import paramiko  # noqa: F401  (its import is not the connection's cost)

    t = time.perf_counter()
    runners["exec"].connect()
    once["connect (TCP + handshake + host key check + auth)"] = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    runners["persistent"].run(["true"])
    once["persistent: first command (starts the shell: login shell + bash -l once)"] = (time.perf_counter() - t) * 1000

    results, checks = {}, {}
    for label, argv in commands.items():
        line = remote_command(argv, env)
        fns = {"persistent": lambda a=argv: runners["persistent"].run(a, check=False),
               "exec": lambda a=argv: runners["exec"].run(a, check=False),
               "openssh": lambda ln=line: openssh(ln),
               "mux": lambda ln=line: openssh(ln, *mux)}
        lat = {m: [] for m in MODES}
        outs = {m: set() for m in MODES}
        for _ in range(n):
            for m in MODES:
                t = time.perf_counter()
                r = fns[m]()
                lat[m].append(time.perf_counter() - t)
                outs[m].add(r.returncode if hasattr(r, "returncode") else r[0])
        results[label] = {m: stats(lat[m]) for m in MODES}
        checks[label] = {m: sorted(outs[m]) for m in MODES}
    subprocess.run(login.ssh_argv("", options=mux + ["-O", "exit"]), capture_output=True)
    results["_once_ms"] = once
    results["_exit_codes"] = checks
    results["_pool"] = {str(k): v for k, v in pool_stats().items()}
    for r in runners.values():
        r.close()
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20, help="commands per mode and command (default 20)")
    ap.add_argument("--slurm", action="store_true", help="also squeue and sbatch --test-only on a test cluster")
    ap.add_argument("--ssh", metavar="USER@HOST:PORT", help="bench this login instead of a local noisy one")
    ap.add_argument("--key", help="private key for --ssh")
    ap.add_argument("--known-hosts", help="known_hosts file for --ssh")
    ap.add_argument("--slurm-conf", help="with --ssh: SLURM_CONF on that login node (default: its own)")
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = ap.parse_args()

    commands = {"true": ["true"]}
    env: dict = {}
    cluster = server = None
    with tempfile.TemporaryDirectory(prefix="launcher-bench-ssh-") as tmp:
        try:
            if args.ssh:
                user, _, hostport = args.ssh.rpartition("@")
                host, _, port = hostport.partition(":")
                login = Login(host, int(port or 22), user, args.key, args.known_hosts)
                if args.slurm_conf:
                    env["SLURM_CONF"] = args.slurm_conf
                if args.slurm or args.slurm_conf:
                    commands.update(squeue=["squeue", "-h"],
                                    **{"sbatch --test-only": ["sbatch", "--test-only", "--wrap", "true"]})
            else:
                from tests.fixtures.sshd import start_sshd

                if args.slurm:
                    from tests.fixtures.slurm import start_cluster

                    cluster = start_cluster(2)
                    env["SLURM_CONF"] = str(cluster.conf)
                    commands.update(squeue=["squeue", "-h"],
                                    **{"sbatch --test-only": ["sbatch", "--test-only", "-p", "batch", "--wrap",
                                                              "true"]})
                server = start_sshd(Path(tmp) / "sshd")
                login = Login(server.host, server.port, server.user, server.client_key, server.known_hosts, server)
            results = bench(login, commands, args.n, tmp, env)
        finally:
            close_all()
            if server is not None:
                server.stop()
            if cluster is not None:
                from tests.fixtures.slurm import stop_cluster

                stop_cluster(cluster)

    where = f"{login.user}@{login.host}:{login.port}" + (
        " (local sshd, throw-away user with a noisy ~/.bashrc: banners on stdout+stderr, sleep 0.3 s)"
        if server else "")
    print(f"login: {where}; n={args.n} per mode and command, round robin")
    for what, ms in results["_once_ms"].items():
        print(f"  once: {what}: {ms:.0f} ms")
    print(f"{'command':<20} {'mode':<11} {'mean ms':>9} {'p50 ms':>9} {'p95 ms':>9} {'openssh/mode':>13}")
    for label in commands:
        base = results[label]["openssh"]["mean_ms"]
        for m in MODES:
            r = results[label][m]
            print(f"{label:<20} {m:<11} {r['mean_ms']:>9.1f} {r['p50_ms']:>9.1f} {r['p95_ms']:>9.1f} "
                  f"{base / r['mean_ms']:>12.1f}x")
    odd = {k: v for k, v in results["_exit_codes"].items() if any(codes != [0] for codes in v.values())}
    if odd:
        print(f"note: non-zero exit codes seen: {odd}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"login": where, "n": args.n, **results}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
