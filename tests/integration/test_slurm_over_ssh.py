"""`launcher` on a laptop, the cluster behind SSH: the test cluster's login node is a
real sshd on 127.0.0.1. launch / status / logs / cancel all go through one verified
SSH connection per command run, with the job dir on the "remote" side."""

from __future__ import annotations

import threading
import time

import pytest

from .launcher_cli import job_id_of

pytestmark = [pytest.mark.slurm, pytest.mark.sshd]


def test_multinode_launch_status_logs_cancel_through_ssh(cli, clean_queue):
    spec = cli.spec("viassh", {"run": 'echo "rank $LAUNCHER_NODE_RANK of $LAUNCHER_NUM_NODES on $(hostname)"',
                               "resources": {"nodes": 2, "time_limit": "5m"}})
    job = cli.launch(spec, "remote", "--follow")
    out = cli.output(job)
    assert sorted(l.split(" on ")[0] for l in out.splitlines() if l.startswith("rank ")) == \
        ["rank 0 of 2", "rank 1 of 2"]
    st = cli.status(job)
    assert st["state"] == "COMPLETED" and st["target"] == "remote"
    assert (cli.remote_dir / job / "attempt-1.sbatch").exists()

    sleeper = cli.spec("sleepy", {"run": "sleep 300", "resources": {"time_limit": "10m"}})
    job2 = cli.launch(sleeper, "remote")
    cli.wait_state(job2, "RUNNING")
    cli.run("cancel", job2)
    cli.wait_state(job2, "CANCELLED", timeout=60)


def test_unknown_host_key_is_refused_until_trusted(cli, clean_queue, sshd_server, tmp_path):
    import yaml

    cfg = yaml.safe_load(cli.config.read_text())
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    cfg["targets"]["remote"]["known_hosts"] = str(empty)
    cli.config.write_text(yaml.safe_dump(cfg))
    spec = cli.spec("untrusted", {"run": "true"})
    p = cli.run("launch", spec, "--target", "remote", check=False)
    assert p.returncode != 0 and "launcher targets trust remote" in p.stderr and "SHA256:" in p.stderr
    assert cli.run("status").stdout.strip() == "no jobs"
    cli.run("targets", "trust", "remote", "--yes")
    job = cli.launch(spec, "remote", "--follow")
    assert cli.status(job)["state"] == "COMPLETED"


def test_sshd_killed_mid_submission_submits_exactly_once(cli, clean_queue, sshd_server):
    """The connection dies while sbatch runs: the retry looks the dedupe token up first."""
    spec = cli.spec("flappy", {"run": "sleep 1", "resources": {"time_limit": "5m"}})
    stop = threading.Event()

    def chaos():  # drop every SSH session a few times while the launch is in flight
        for _ in range(3):
            if stop.wait(0.25):
                return
            sshd_server.drop_connections()

    t = threading.Thread(target=chaos)
    t.start()
    try:
        p = cli.run("launch", spec, "--target", "remote", check=False)
    finally:
        stop.set()
        t.join()
    comments = clean_queue.run("squeue", "-h", "-t", "all", "-o", "%k").stdout.split()
    ours = [c for c in comments if c.startswith("launcher:flappy-")]
    if p.returncode == 0:
        job = job_id_of(p)
        assert ours == [f"launcher:{job}:1"], ours
    else:  # it may give up, but it never leaves two copies behind
        assert len(ours) <= 1, ours


def test_secrets_and_keys_never_reach_scripts_logs_or_state(cli, clean_queue, sshd_server, tmp_path):
    secret = "hf_" + "S3cr3tV4lu3" * 3
    cli.env["HF_TOKEN"] = secret
    spec = cli.spec("secretive", {"run": 'test "$HF_TOKEN" = "' + "$(cat /dev/null)" + '" || echo "token length ${#HF_TOKEN}"',
                                  "secrets": ["HF_TOKEN"], "resources": {"time_limit": "5m"}})
    job = cli.launch(spec, "remote", "--follow")
    assert f"token length {len(secret)}" in cli.output(job)
    key_text = sshd_server.client_key.read_text().split("-----")[2].strip().splitlines()[0]
    for root in (cli.home, cli.remote_dir / job):
        for f in root.rglob("*"):
            if f.is_file():
                data = f.read_bytes()
                assert secret.encode() not in data, f
                assert key_text.encode() not in data, f
    time.sleep(0)
