"""A secret-looking key set under ``env:`` reaches a real Slurm job the way ``secrets:`` do,
and its value is in no file the launcher writes (state store, job dir, sbatch script,
RUN.json), from a login node and over SSH. Slurm's own state directory does keep the
job's environment while the job exists: the README says so, and this test shows it."""

from __future__ import annotations

import hashlib
import sqlite3
import time

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI, job_id_of, ssh_cli

pytestmark = pytest.mark.slurm

VALUE = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY-" + "7f3a9c"


def files_holding(root, needle: bytes) -> list[str]:
    return [str(f) for f in root.rglob("*") if f.is_file() and needle in f.read_bytes()]


def launched_without_leaks(cli: LauncherCLI, ck, target: str, scanned) -> str:
    spec = cli.spec("secretenv", {
        "env": {"AWS_SECRET_ACCESS_KEY": VALUE, "PLAIN": "visible"},
        "run": 'echo "got=$(printf %s "$AWS_SECRET_ACCESS_KEY" | sha256sum | cut -c1-16) plain=$PLAIN"',
        "checkpoint": {"root": str(ck)}, "resources": {"time_limit": "5m"}})
    p = cli.run("launch", spec, "--target", target, "--follow")
    assert "AWS_SECRET_ACCESS_KEY looks like a secret" in p.stderr
    job = job_id_of(p)
    assert f"got={hashlib.sha256(VALUE.encode()).hexdigest()[:16]} plain=visible" in cli.output(job)
    for root in scanned:
        assert files_holding(root, VALUE.encode()) == [], root
    spec_yaml = sqlite3.connect(cli.home / "state.db").execute("SELECT spec_yaml FROM jobs").fetchone()[0]
    assert "<secret: taken from the launcher's environment>" in spec_yaml
    return job


def test_on_a_login_node(clean_queue, tmp_path):
    cli = LauncherCLI(tmp_path, clean_queue)
    launched_without_leaks(cli, tmp_path / "ck", "testcl", [cli.home, tmp_path / "ck"])


def test_over_ssh_the_value_travels_on_stdin_only(clean_queue, sshd_server, tmp_path):
    cli = ssh_cli(tmp_path, clean_queue, sshd_server)
    ck = sshd_server.scratch("ck")  # the SSH login is a non-root user: its own writable dir
    launched_without_leaks(cli, ck, "remote", [cli.home, ck, cli.remote_dir])


def test_slurm_itself_keeps_the_environment_of_a_queued_job(clean_queue, tmp_path):
    """What the README warns about: StateSaveLocation/hash.N/job.N/environment holds the
    job's environment (secrets included) while the job exists, readable by root/SlurmUser."""
    cli = LauncherCLI(tmp_path, clean_queue)
    spec = cli.spec("held", {"secrets": ["MY_API_TOKEN"], "run": "sleep 60", "resources": {"time_limit": "5m"}})
    p = cli.run("launch", spec, "--target", "testcl", env={"MY_API_TOKEN": VALUE})
    job = job_id_of(p)
    try:
        state = clean_queue.state / "ctld"
        found = poll("the job's environment file in Slurm's state directory",
                     lambda: [f for f in state.glob("hash.*/job.*/environment") if VALUE.encode() in f.read_bytes()],
                     timeout=60)
        assert found
        assert files_holding(cli.home, VALUE.encode()) == []
    finally:
        cli.run("cancel", job, check=False)
        time.sleep(0.5)
