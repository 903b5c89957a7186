"""The Slurm backend's way to a login node: ``runner_for_target`` from its target options,
and Slurm's client commands over one SSH connection to the real test cluster."""

from __future__ import annotations

import pytest

from launcher.backend.config import Target
from launcher.transport import SSHRunner, runner_for_target
from launcher.transport.retry import retry_idempotent

pytestmark = [pytest.mark.sshd, pytest.mark.usefixtures("fresh_ssh_pool")]


def ssh_keys(server) -> dict:
    return dict(ssh_host=server.host, ssh_port=server.port, ssh_user=server.user, ssh_key=str(server.client_key),
                known_hosts=str(server.known_hosts), ssh_config="")


def test_the_slurm_backend_builds_an_ssh_runner_from_its_target_options(sshd_server):
    from launcher_backends.slurm.backend import SlurmBackend
    from launcher_backends.slurm.options import SlurmOptions

    opts = SlurmOptions(partition="batch", slurm_conf="/etc/slurm test/slurm.conf", **ssh_keys(sshd_server))
    backend = SlurmBackend(Target(name="cluster-a", backend="slurm", options=opts))
    runner = backend.runner
    assert isinstance(runner, SSHRunner) and runner.trust_hint == "launcher targets trust cluster-a"
    assert runner.run(["printenv", "SLURM_CONF"]).stdout == "/etc/slurm test/slurm.conf\n"
    backend.close()


def test_sbatch_squeue_and_scancel_run_over_one_connection(sshd_server, clean_queue):
    cluster = clean_queue
    runner = runner_for_target("testcl", ssh_keys(sshd_server), {"SLURM_CONF": str(cluster.conf)})
    before = sshd_server.accepted_logins()
    token = "launcher:job-ssh:1"  # the dedupe token a resubmission looks for
    out = runner.run(["sbatch", "--parsable", "--hold", "--comment", token, "-o", "/dev/null", "--wrap", "true"])
    job_id = out.stdout.strip().split(";")[0]
    listed = retry_idempotent(lambda: runner.run(["squeue", "-h", "-o", "%i|%k"]).stdout)
    assert f"{job_id}|{token}" in listed.splitlines()
    runner.run(["scancel", job_id])
    assert sshd_server.accepted_logins() - before == 1
    runner.close()
