"""Run the real `launcher` command (a subprocess, as a user would) against a test
cluster, with an isolated LAUNCHER_HOME and config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import yaml

from tests.fixtures.polling import poll

LAUNCHER = str(Path(sys.executable).parent / "launcher")


def committed_steps(cli: "LauncherCLI", root) -> list[int]:
    """The committed steps under a checkpoint root, as `launcher checkpoints --json` lists them."""
    p = cli.run("checkpoints", root, "--json", check=False)
    if p.returncode != 0:
        return []
    return sorted(e["step"] for e in json.loads(p.stdout) if e["state"] == "committed")


def submitted_job(text: str) -> str:
    """The job id from launch's "JOB: submitted to TARGET" line, among any notes."""
    import re

    m = re.search(r"^(\S+): submitted to ", text, re.M)
    assert m, f"no job id in launcher output:\n{text}"
    return m.group(1)


def job_id_of(p: subprocess.CompletedProcess) -> str:
    return submitted_job(p.stdout + "\n" + p.stderr)


class LauncherCLI:
    def __init__(self, tmp: Path, cluster=None, extra_targets: dict | None = None):
        self.tmp = Path(tmp)
        self.home = self.tmp / "home"
        self.config = self.tmp / "config.yaml"
        targets = {}
        if cluster is not None:
            targets["testcl"] = {"backend": "slurm", "slurm_conf": str(cluster.conf), "partition": "batch",
                                 "facts_ttl": 0}
        targets.update(extra_targets or {})
        self.config.write_text(yaml.safe_dump({"targets": targets}))
        self.env = dict(cluster.env if cluster is not None else os.environ)
        self.env.update(LAUNCHER_HOME=str(self.home), LAUNCHER_CONFIG=str(self.config))
        self.remote_dir: Optional[Path] = None  # job dirs on the cluster, when a target is reached over SSH

    def run(self, *args, check=True, timeout=300, cwd=None, env=None) -> subprocess.CompletedProcess:
        p = subprocess.run([LAUNCHER, *map(str, args)], env={**self.env, **(env or {})}, capture_output=True,
                           text=True, timeout=timeout, cwd=str(cwd or self.tmp))
        if check and p.returncode != 0:
            raise AssertionError(f"launcher {' '.join(map(str, args))} exited {p.returncode}\n"
                                 f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        return p

    def spec(self, name: str, body: dict) -> Path:
        f = self.tmp / f"{name}.yaml"
        f.write_text(yaml.safe_dump({"name": name, **body}, sort_keys=False, allow_unicode=True))
        return f

    def launch(self, spec: Path, target="testcl", *extra) -> str:
        p = self.run("launch", spec, "--target", target, *extra)
        return job_id_of(p)

    def status(self, job: str) -> dict:
        return json.loads(self.run("status", job, "--json").stdout)

    def wait_state(self, job: str, states, timeout=120, interval=0.5) -> dict:
        states = {states} if isinstance(states, str) else set(states)
        last = {}

        def reached():
            last.update(self.status(job))
            return dict(last) if last["state"] in states else None

        return poll(f"{job} state in {sorted(states)}", reached, timeout=timeout, interval=interval,
                    detail=lambda: json.dumps(last, indent=1))

    def output(self, job: str) -> str:
        return self.run("logs", job).stdout


def ssh_cli(tmp: Path, cluster, sshd_server, name: str = "remote") -> LauncherCLI:
    """A launcher whose only target is the test cluster behind the test sshd (its login
    node): every Slurm command and file goes through SSH; this side has no SLURM_CONF.
    The SSH user is the server's throw-away, non-root user with a noisy ~/.bashrc; its
    job dirs are in its home (``c.remote_dir``), which the nodes see as shared storage."""
    remote_dir = sshd_server.scratch("remote-jobs")
    target = {"backend": "slurm", "partition": "batch", "facts_ttl": 0,
              "ssh_host": sshd_server.host, "ssh_port": sshd_server.port, "ssh_user": sshd_server.user,
              "ssh_key": str(sshd_server.client_key), "known_hosts": str(sshd_server.known_hosts),
              "ssh_config": "", "ssh_agent": False, "slurm_conf": str(cluster.conf),
              "remote_dir": str(remote_dir)}
    c = LauncherCLI(tmp, None, {name: target})
    c.remote_dir = remote_dir
    c.env["HOME"] = str(tmp)  # no ~/.ssh of the machine's user is consulted
    c.env.pop("SLURM_CONF", None)
    return c


# ---- several `launcher watch` processes at once (exactly-once tests) -------------------------
def start_watcher(cli: "LauncherCLI", i: int, interval: float = 0.1) -> subprocess.Popen:
    """A `launcher watch` process of its own session, logging to CLI.tmp/watch{I}.log."""
    log = open(cli.tmp / f"watch{i}.log", "ab")
    return subprocess.Popen([LAUNCHER, "watch", "--exit-when-idle", "--interval", str(interval)], env=cli.env,
                            stdout=log, stderr=subprocess.STDOUT, cwd=str(cli.tmp), start_new_session=True)


def stop_watchers(procs) -> None:
    import signal

    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                os.killpg(p.pid, signal.SIGCONT)  # a watcher a test froze (SIGSTOP) gets the TERM only once continued
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:  # never left behind, and never hiding the test's own failure
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)


def wait_all_closed(cli: "LauncherCLI", jobs, timeout: float, interval: float = 1) -> None:
    def all_closed():
        rows = json.loads(cli.run("status", "--json").stdout)
        return all(not r["open"] for r in rows if r["job_id"] in jobs)

    poll("every job closed", all_closed, timeout=timeout, interval=interval)


def starts_by_job(starts: Path) -> dict:
    """The "JOB ATTEMPT" lines the test programs append at every start, as job -> [attempts]."""
    import collections

    out = collections.defaultdict(list)
    for line in Path(starts).read_text().splitlines():
        job, attempt = line.split()
        out[job].append(int(attempt))
    return out
