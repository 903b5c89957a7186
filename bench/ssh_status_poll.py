"""Status of 1,000 jobs on a cluster behind SSH: launcher's batched poll (one remote
command) against one `scontrol show job ID` per job over the same reused connection.

    .venv/bin/python bench/ssh_status_poll.py [-n 1000] [--per-job-sample 50]

Starts a throw-away test cluster (tests/cluster) and a private sshd on 127.0.0.1 as its
login node, submits N held jobs, and prints figures (nothing asserted).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.slurm import start_cluster, stop_cluster  # noqa: E402
from tests.fixtures.sshd import start_sshd  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("--per-job-sample", type=int, default=50)
    a = ap.parse_args()
    from launcher.backend.protocols import Handle
    from launcher.backend.config import Target
    from launcher_backends.slurm import SlurmBackend
    from launcher_backends.slurm.options import SlurmOptions

    tmp = Path(tempfile.mkdtemp())
    os.environ["HOME"] = str(tmp)
    cluster = start_cluster(4)
    sshd = start_sshd(tmp / "sshd")
    try:
        ids = []
        t = time.perf_counter()
        for start in range(0, a.n, 100):  # a few array jobs would be one id: submit one job each
            for _ in range(min(100, a.n - start)):
                p = subprocess.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"],
                                   env=cluster.env, capture_output=True, text=True, check=True)
                ids.append(p.stdout.strip().split(";")[0])
        print(f"submitted {len(ids)} held jobs locally in {time.perf_counter() - t:.1f} s")
        opts = SlurmOptions(ssh_host=sshd.host, ssh_port=sshd.port, ssh_user=sshd.user, ssh_key=str(sshd.client_key),
                            known_hosts=str(sshd.known_hosts), ssh_config="", ssh_agent=False,
                            slurm_conf=str(cluster.conf))
        backend = SlurmBackend(Target("remote", "slurm", opts))
        runner = backend.runner
        runner.run(["true"])  # connect once, outside the timings
        calls = []
        real = runner.run

        def counted(argv, **kw):
            calls.append(argv[0])
            return real(argv, **kw)

        runner.run = counted
        handles = [Handle("slurm", "remote", f"j{i}", jid) for i, jid in enumerate(ids)]
        t = time.perf_counter()
        statuses = backend.status(handles)
        batched = time.perf_counter() - t
        pending = sum(1 for s in statuses if s.state.value == "PENDING")
        n_batched = len(calls)
        calls.clear()
        sample = ids[: a.per_job_sample]
        t = time.perf_counter()
        for jid in sample:
            runner.run(["scontrol", "-o", "show", "job", jid])
        per_job = (time.perf_counter() - t) / len(sample)
        print(f"{'':<44} {'remote cmds':>11} {'seconds':>9}")
        print(f"{'launcher status(): one batched poll':<44} {n_batched:>11} {batched:>9.2f}  ({pending} PENDING)")
        print(f"{'scontrol show job ID, one per job (scaled)':<44} {len(ids):>11} {per_job * len(ids):>9.2f}  "
              f"(measured on {len(sample)}: {per_job * 1000:.0f} ms each)")
        print(f"speed-up: {per_job * len(ids) / batched:.0f}x")
        backend.close()
    finally:
        subprocess.run(["scancel", "-u", "root"], env=cluster.env, capture_output=True)
        sshd.kill()
        stop_cluster(cluster)


if __name__ == "__main__":
    main()
