"""`launcher targets trust NAME` against a real sshd: an unknown host is refused until
a person accepts its fingerprint; a changed key is never replaced."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from click.testing import CliRunner

from launcher.cli import main
from launcher.transport import SSHRunner
from launcher.transport.errors import UnknownHostKeyError

pytestmark = [pytest.mark.sshd, pytest.mark.usefixtures("fresh_ssh_pool")]


def fingerprint_of(pub: str, tmp_path) -> str:
    p = tmp_path / "k.pub"
    p.write_text(pub + "\n")
    return subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(p)], capture_output=True, text=True,
                          check=True).stdout.split()[1]


def configure(launcher_env, targets: dict) -> None:
    launcher_env["config"].write_text(yaml.safe_dump({"targets": targets}))


def target_for(server, known_hosts, **kw):
    t = {"backend": "slurm", "partition": "batch", "ssh_host": server.host, "ssh_port": server.port,
         "ssh_user": server.user, "ssh_key": str(server.client_key), "known_hosts": str(known_hosts),
         "ssh_config": "", "ssh_agent": False}
    t.update(kw)
    return t


def test_an_unknown_host_is_refused_until_trusted_then_connects(sshd_server, launcher_env, tmp_path):
    kh = tmp_path / "kh" / "known_hosts"
    target = target_for(sshd_server, kh)
    configure(launcher_env, {"cluster-a": target})
    with pytest.raises(UnknownHostKeyError, match="launcher targets trust cluster-a"):
        SSHRunner(target, target_name="cluster-a").run(["true"])

    fp = fingerprint_of(sshd_server.host_pubkey, tmp_path)
    declined = CliRunner().invoke(main, ["targets", "trust", "cluster-a"], input="n\n")
    assert declined.exit_code != 0 and fp in declined.output and "ED25519" in declined.output
    assert not kh.exists() or kh.read_text() == ""

    accepted = CliRunner().invoke(main, ["targets", "trust", "cluster-a"], input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert f"[127.0.0.1]:{sshd_server.port}: recorded ED25519 {fp} in {kh}" in accepted.output
    assert SSHRunner(target, target_name="cluster-a").run(["echo", "in"]).stdout == "in\n"

    again = CliRunner().invoke(main, ["targets", "trust", "cluster-a"])  # no question asked
    assert again.exit_code == 0 and "already trusted" in again.output
    assert len(kh.read_text().splitlines()) == 1
    # what we wrote is what OpenSSH reads
    r = subprocess.run(sshd_server.ssh_argv("echo", "openssh", options=["-o", f"UserKnownHostsFile={kh}"]),
                       capture_output=True, text=True)
    # (after the noisy ~/.bashrc's banner: OpenSSH has no framing)
    assert r.returncode == 0 and r.stdout.endswith("\nopenssh\n"), r.stderr


def test_trust_yes_records_without_asking(sshd_server, launcher_env, tmp_path):
    kh = tmp_path / "known_hosts"
    configure(launcher_env, {"c": target_for(sshd_server, kh)})
    res = CliRunner().invoke(main, ["targets", "trust", "c", "--yes"])
    assert res.exit_code == 0 and "recorded" in res.output
    assert sshd_server.host_pubkey in kh.read_text()


def test_trust_refuses_a_changed_key_and_leaves_known_hosts_alone(sshd_server, launcher_env, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "old")], check=True)
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd_server.port} " + " ".join((tmp_path / "old.pub").read_text().split()[:2])
                  + "\n")
    before = kh.read_text()
    configure(launcher_env, {"c": target_for(sshd_server, kh)})
    res = CliRunner().invoke(main, ["targets", "trust", "c", "--yes"])
    assert res.exit_code != 0 and "HAS CHANGED" in res.output and "ssh-keygen -R" in res.output
    assert kh.read_text() == before


def test_trust_records_the_jump_host_and_the_login_node_of_a_proxyjump_route(
        sshd_server, sshd_factory, launcher_env, tmp_path):
    jump = sshd_factory(client_key=sshd_server.client_key)
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host jump\n  HostName 127.0.0.1\n  Port {jump.port}\n  User {jump.user}\n"
                   f"  IdentityFile {sshd_server.client_key}\n"
                   f"Host login\n  HostName 127.0.0.1\n  Port {sshd_server.port}\n  User {sshd_server.user}\n"
                   f"  IdentityFile {sshd_server.client_key}\n  ProxyJump jump\nHost *\n  HashKnownHosts yes\n")
    kh = tmp_path / "known_hosts"
    target = {"backend": "slurm", "ssh_host": "login", "ssh_config": str(cfg), "known_hosts": str(kh),
              "ssh_agent": False}
    configure(launcher_env, {"via-jump": target})
    res = CliRunner().invoke(main, ["targets", "trust", "via-jump"], input="y\ny\n")
    assert res.exit_code == 0, res.output
    assert res.output.count("recorded") == 2
    assert fingerprint_of(jump.host_pubkey, tmp_path) in res.output
    assert fingerprint_of(sshd_server.host_pubkey, tmp_path) in res.output
    assert "127.0.0.1" not in kh.read_text()  # HashKnownHosts yes: names are hashed
    assert SSHRunner(target).run(["echo", "ok"]).stdout == "ok\n"


def test_trust_on_a_target_without_ssh_host_explains_there_is_nothing_to_trust(launcher_env):
    configure(launcher_env, {"here": {"backend": "slurm"}})
    res = CliRunner().invoke(main, ["targets", "trust", "here"])
    assert res.exit_code != 0 and "no ssh_host" in res.output
