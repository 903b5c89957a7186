"""SSHRunner against a real OpenSSH server on 127.0.0.1 (tests/fixtures/sshd.py).

The server runs on this machine, so what a command did remotely is checked on the
local file system. The login is the server's throw-away user, whose ~/.bashrc is
deliberately noisy and slow; remote paths are scratch directories in its home
(``server.scratch``).
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading

import pytest

from launcher.core.errors import CommandError
from launcher.transport import SSHRunner, close_all, pool_stats
from launcher.transport.errors import (AuthenticationError, ConnectionLostError, HostKeyChangedError,
                                       HostUnreachableError, RemoteCommandNotFound, RemoteCommandTimeout,
                                       UnknownHostKeyError, may_have_run)
from launcher.transport.retry import retry_idempotent

pytestmark = pytest.mark.sshd


@pytest.fixture(autouse=True)
def _fresh_pool(monkeypatch, tmp_path):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no default ~/.ssh keys or config leak in
    close_all()
    yield
    close_all()


def opts(server, **kw):
    o = dict(ssh_host=server.host, ssh_port=server.port, ssh_user=server.user, ssh_key=str(server.client_key),
             known_hosts=str(server.known_hosts), ssh_config="", ssh_agent=False)
    o.update(kw)
    return o


# ---------------------------------------------------------------------------- commands

def test_run_returns_stdout_stderr_and_exit_code(sshd_server):
    r = SSHRunner(opts(sshd_server))
    res = r.run(["sh", "-c", "echo out; echo err >&2; exit 3"], check=False)
    assert (res.returncode, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert r.run(["echo", "ok"]).ok


def test_hostile_arguments_reach_the_remote_program_unchanged(sshd_server):
    values = ["a b", "it's", 'dq"', "; touch /tmp/pwned-launcher", "$(id)", "`id`", "x\ny", "*", "", "$HOME"]
    res = SSHRunner(opts(sshd_server)).run(["python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))",
                                            *values])
    import json

    assert json.loads(res.stdout) == values


def test_stdin_and_stdout_of_several_megabytes_flow_both_ways_without_deadlock(sshd_server):
    data = os.urandom(3 * 1024 * 1024).hex()  # 6 MB: far more than one SSH window
    res = SSHRunner(opts(sshd_server)).run(["sh", "-c", "cat; cat >&2 </dev/null"], input=data, timeout=120)
    assert res.stdout == data


def test_env_is_set_for_the_command_and_sshd_setenv_is_kept(sshd_server):
    r = SSHRunner(opts(sshd_server, env={"SLURM_CONF": "/etc/slurm x/slurm.conf"}))
    res = r.run(["sh", "-c", 'printf "%s|%s|%s" "$SLURM_CONF" "$EXTRA" "$LAUNCHER_SSHD_SETENV"'],
                env={"EXTRA": "it's $(here)"})
    assert res.stdout == "/etc/slurm x/slurm.conf|it's $(here)|from-sshd"


def test_a_failing_command_raises_with_argv_exit_code_and_stderr_tail(sshd_server):
    with pytest.raises(CommandError) as e:
        SSHRunner(opts(sshd_server)).run(["sh", "-c", "echo boom >&2; exit 7"])
    assert e.value.returncode == 7 and "boom" in str(e.value) and "exit 7" in str(e.value)
    assert f"{sshd_server.user}@{sshd_server.host}:{sshd_server.port}" in str(e.value)


def test_a_missing_slurm_command_says_to_check_the_client_install_and_path(sshd_server):
    from launcher.backend.config import Target
    from launcher_backends.slurm.backend import SlurmBackend
    from launcher_backends.slurm.options import SlurmOptions

    backend = SlurmBackend(Target(name="c", backend="slurm", options=SlurmOptions(**opts(sshd_server))))
    r = backend.runner  # the Slurm backend names its client programs to the transport
    with pytest.raises(RemoteCommandNotFound) as e:
        r.run(["sbatch", "--version"], env={"PATH": "/nonexistent"}, check=False)
    msg = str(e.value)
    assert msg.startswith(f"sbatch not found on {r.where}: is Slurm's client installed")
    assert "non-interactive shells" in msg and e.value.returncode == 127
    with pytest.raises(RemoteCommandNotFound, match=r"sbatch not found on .*: is it installed"):
        SSHRunner(opts(sshd_server)).run(["sbatch", "--version"], env={"PATH": "/nonexistent"})  # knows no Slurm
    backend.close()


def test_a_command_past_its_timeout_raises_a_transient_error_and_the_connection_stays_usable(sshd_server):
    r = SSHRunner(opts(sshd_server))
    with pytest.raises(RemoteCommandTimeout) as e:
        r.run(["sleep", "30"], timeout=1)
    assert may_have_run(e.value)
    assert r.run(["echo", "after"]).stdout == "after\n" and r.connects == 1


# ---------------------------------------------------------------------------- one connection

def test_one_connection_carries_every_command_and_file_of_every_runner_for_the_target(sshd_server, tmp_path):
    before = sshd_server.accepted_logins()
    remote = sshd_server.scratch("one-connection")
    a, b = SSHRunner(opts(sshd_server)), SSHRunner(opts(sshd_server))
    for i in range(15):
        (a if i % 2 else b).run(["echo", str(i)])
    a.put_file(str(remote / "f"), b"x")
    (tmp_path / "tree").mkdir()
    b.put_tree(str(tmp_path / "tree"), str(remote / "remote-tree"))
    assert sshd_server.accepted_logins() - before == 1
    assert a.connects == 1 and b.connects == 1
    [(key, stats)] = pool_stats().items()
    assert key == (sshd_server.user, "127.0.0.1", sshd_server.port, "") and stats["refs"] == 2
    a.close()
    assert b.run(["true"]).ok  # the connection lives while a runner holds it
    b.close()
    assert pool_stats() == {}


def test_more_concurrent_commands_than_sshd_sessions_all_succeed_on_one_connection(sshd_server):
    r = SSHRunner(opts(sshd_server))
    r.connect()
    before = sshd_server.accepted_logins()
    results, errors = [], []

    def work(i):
        try:
            results.append(r.run(["sh", "-c", f"sleep 0.3; echo {i}"]).stdout.strip())
        except Exception as e:  # pragma: no cover - reported by the assert below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(14)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and sorted(results, key=int) == [str(i) for i in range(14)]
    assert sshd_server.accepted_logins() == before and r.connects == 1


def test_a_dropped_connection_is_replaced_before_the_next_command(sshd_factory):
    s = sshd_factory()
    r = SSHRunner(opts(s))
    assert r.run(["echo", "1"]).stdout == "1\n"
    s.restart(drop_connections=True)
    assert r.run(["echo", "2"]).stdout == "2\n"
    assert r.connects == 2 and s.accepted_logins() == 2


@pytest.mark.parametrize("shell", ["persistent", "exec"])
def test_a_connection_that_dies_mid_command_is_reported_as_maybe_run(sshd_factory, shell):
    s = sshd_factory()
    r = SSHRunner(opts(s, ssh_shell=shell))
    r.run(["true"])
    cut = threading.Timer(0.5, s.drop_connections, kwargs={"commands": False})  # sshd dies mid-command
    cut.start()
    try:
        with pytest.raises(ConnectionLostError) as e:
            r.run(["sleep", "5"])
    finally:
        cut.cancel()
    assert may_have_run(e.value)
    assert r.run(["echo", "again"]).stdout == "again\n" and r.connects == 2


def test_a_server_that_is_down_fails_as_surely_not_run_and_a_retry_succeeds_once_it_is_back(sshd_factory):
    s = sshd_factory()
    r = SSHRunner(opts(s))
    r.connect()
    s.kill()
    with pytest.raises(HostUnreachableError) as e:
        r.run(["true"])
    assert not may_have_run(e.value)

    restarts = []

    def sleep(_):  # the backoff sleep is where the server comes back
        if not restarts:
            s.start()
            restarts.append(1)

    assert retry_idempotent(lambda: r.run(["echo", "back"]).stdout, sleep=sleep) == "back\n"
    assert restarts == [1]


# ---------------------------------------------------------------------------- host keys

def test_a_wrong_key_in_known_hosts_is_refused_with_both_fingerprints(sshd_server, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd_server.port} " + " ".join((tmp_path / "other.pub").read_text().split()[:2])
                  + "\n")
    before = kh.read_text()
    with pytest.raises(HostKeyChangedError) as e:
        SSHRunner(opts(sshd_server, known_hosts=str(kh)), target_name="c1").run(["true"])
    msg = str(e.value)
    assert "HAS CHANGED" in msg and "ssh-keygen -R" in msg and "launcher targets trust c1" in msg
    assert _fp(tmp_path / "other.pub") in msg and _fp_text(sshd_server.host_pubkey, tmp_path) in msg
    assert kh.read_text() == before  # never replaced


def test_an_unknown_host_is_refused_showing_its_key_fingerprint_and_the_trust_command(sshd_server, tmp_path):
    kh = tmp_path / "known_hosts"
    with pytest.raises(UnknownHostKeyError) as e:
        SSHRunner(opts(sshd_server, known_hosts=str(kh)), target_name="cluster-a").run(["true"])
    msg = str(e.value)
    assert "ED25519" in msg and _fp_text(sshd_server.host_pubkey, tmp_path) in msg
    assert "launcher targets trust cluster-a" in msg
    assert not kh.exists()


def test_hashed_known_hosts_entries_are_accepted(sshd_server, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text(sshd_server.known_hosts.read_text())
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(kh)], check=True, capture_output=True)
    assert "127.0.0.1" not in kh.read_text()
    assert SSHRunner(opts(sshd_server, known_hosts=str(kh))).run(["echo", "ok"]).stdout == "ok\n"


def test_a_revoked_host_key_is_refused_even_when_also_listed(sshd_server, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text(sshd_server.known_hosts.read_text() + f"@revoked * {sshd_server.host_pubkey}\n")
    with pytest.raises(HostKeyChangedError, match="@revoked"):
        SSHRunner(opts(sshd_server, known_hosts=str(kh))).run(["true"])


def test_the_known_key_type_is_negotiated_when_the_server_has_several(sshd_factory, tmp_path):
    s = sshd_factory(host_key_types=("ed25519", "ecdsa"))
    kh = tmp_path / "known_hosts"
    ecdsa = " ".join((s.dir / "ssh_host_ecdsa_key.pub").read_text().split()[:2])
    kh.write_text(f"[127.0.0.1]:{s.port} {ecdsa}\n")  # only the ECDSA key is known
    assert SSHRunner(opts(s, known_hosts=str(kh))).run(["echo", "ok"]).stdout == "ok\n"


def _fp(pub_path) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub_path)], capture_output=True,
                         text=True, check=True).stdout
    return out.split()[1]


def _fp_text(pub: str, tmp_path) -> str:
    p = tmp_path / "fp.pub"
    p.write_text(pub + "\n")
    return _fp(p)


# ---------------------------------------------------------------------------- authentication

def test_a_key_the_server_does_not_know_fails_naming_the_key_never_showing_it(sshd_server, tmp_path):
    key = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    with pytest.raises(AuthenticationError) as e:
        SSHRunner(opts(sshd_server, ssh_key=str(key))).run(["true"])
    msg = str(e.value)
    assert str(key) in msg and _fp(str(key) + ".pub") in msg and "rejected" in msg
    body = "".join(key.read_text().splitlines()[1:-1])
    assert body[:40] not in msg and "PRIVATE KEY" not in msg
    assert f"as {sshd_server.user} to 127.0.0.1:{sshd_server.port}" in msg


def test_a_passphrase_protected_key_is_not_prompted_for_and_ssh_add_is_suggested(sshd_server, tmp_path):
    key = tmp_path / "locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "s3cret-pass", "-f", str(key)], check=True)
    with pytest.raises(AuthenticationError) as e:
        SSHRunner(opts(sshd_server, ssh_key=str(key))).run(["true"])
    assert f"ssh-add {key}" in str(e.value) and "s3cret-pass" not in str(e.value)


def test_no_key_at_all_fails_clearly(sshd_server, tmp_path):
    o = opts(sshd_server)
    del o["ssh_key"]
    with pytest.raises(AuthenticationError, match="no key"):
        SSHRunner(o).run(["true"])


def test_keys_held_by_ssh_agent_are_used(sshd_server, tmp_path, monkeypatch):
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if sock.exists():
                break
            threading.Event().wait(0.01)
        env = dict(os.environ, SSH_AUTH_SOCK=str(sock))
        subprocess.run(["ssh-add", str(sshd_server.client_key)], env=env, check=True, capture_output=True)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        o = opts(sshd_server, ssh_agent=True)
        del o["ssh_key"]
        assert SSHRunner(o).run(["echo", "agent"]).stdout == "agent\n"
    finally:
        agent.kill()
        agent.wait()


# ---------------------------------------------------------------------------- ProxyJump

def _jump_config(tmp_path, jump, target, key):
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host jump\n  HostName 127.0.0.1\n  Port {jump.port}\n  User {jump.user}\n"
                   f"  IdentityFile {key}\n"
                   f"Host login\n  HostName 127.0.0.1\n  Port {target.port}\n  User {target.user}\n"
                   f"  IdentityFile {key}\n  ProxyJump jump\n")
    kh = tmp_path / "known_hosts"
    kh.write_text(jump.known_hosts.read_text() + target.known_hosts.read_text())
    return {"ssh_host": "login", "ssh_config": str(cfg), "known_hosts": str(kh), "ssh_agent": False}


def test_proxyjump_goes_through_the_jump_host_over_a_direct_tcpip_channel(sshd_server, sshd_factory, tmp_path):
    jump = sshd_factory(client_key=sshd_server.client_key, log_level="DEBUG1")
    before = sshd_server.accepted_logins()
    r = SSHRunner(_jump_config(tmp_path, jump, sshd_server, sshd_server.client_key))
    assert r.run(["echo", "via jump"]).stdout == "via jump\n"
    assert r.run(["echo", "again"]).ok and r.connects == 1
    assert jump.accepted_logins() == 1 and sshd_server.accepted_logins() == before + 1
    assert f"target 127.0.0.1 port {sshd_server.port}" in jump.log_text()  # sshd's direct-tcpip debug line
    assert len(r.route.hops) == 2 and r.route.pool_key[3] == (f"{jump.user}@127.0.0.1:{jump.port}",)


def test_a_jump_host_that_forbids_forwarding_is_named_in_the_error(sshd_server, sshd_factory, tmp_path):
    jump = sshd_factory(client_key=sshd_server.client_key, extra_config="AllowTcpForwarding no")
    with pytest.raises(HostUnreachableError, match=f"jump host .*:{jump.port} could not connect"):
        SSHRunner(_jump_config(tmp_path, jump, sshd_server, sshd_server.client_key)).run(["true"])


def test_a_proxycommand_from_the_ssh_config_is_used_as_the_connection(sshd_server, sshd_factory, tmp_path):
    jump = sshd_factory(client_key=sshd_server.client_key)
    proxy = " ".join(jump.ssh_argv(options=["-W", "%h:%p"]))
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host login\n  HostName 127.0.0.1\n  Port {sshd_server.port}\n  User {sshd_server.user}\n"
                   f"  ProxyCommand {proxy}\n")
    r = SSHRunner({"ssh_host": "login", "ssh_config": str(cfg), "known_hosts": str(sshd_server.known_hosts),
                   "ssh_key": str(sshd_server.client_key), "ssh_agent": False})
    assert r.run(["echo", "proxied"]).stdout == "proxied\n"
    assert jump.accepted_logins() == 1


# ---------------------------------------------------------------------------- secrets

def test_env_values_never_reach_the_logs_or_errors(sshd_server, caplog):
    secret = "hf_" + "Zq8" * 12
    caplog.set_level(logging.DEBUG)  # every logger, paramiko's included
    r = SSHRunner(opts(sshd_server, env={"SLURM_CONF": "/etc/slurm/slurm.conf"}))
    assert r.run(["printenv", "HF_TOKEN"], env={"HF_TOKEN": secret}).stdout.strip() == secret
    with pytest.raises(CommandError) as e:
        r.run(["sh", "-c", "exit 4"], env={"HF_TOKEN": secret})
    assert "HF_TOKEN" in caplog.text  # the names are logged...
    assert secret not in caplog.text and secret not in str(e.value)  # ...the values never
    assert "launcher.ssh" in {rec.name for rec in caplog.records}
