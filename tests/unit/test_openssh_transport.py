"""transport: openssh, the pure parts: ssh's argv, the SSH config merged with a target's
options (``ssh -G``), the ControlPath default, error classification; and the runner against
a stand-in ``ssh`` on PATH (no network)."""

from __future__ import annotations

import base64
import os
import stat

import pytest

from launcher.core.errors import ConfigError
from launcher.transport.errors import (ConnectionLostError, HostKeyChangedError, HostNotFoundError,
                                       HostUnreachableError, NotLoggedInError, SSHError, UnknownHostKeyError)
from launcher.transport.openssh import (MUX_TEMP_SUFFIX, SOCKET_PATH_MAX, OpenSSHRunner, base_options, classify,
                                        command_argv, control_argv, default_control_path, in_band, login_argv,
                                        merge, parse_ssh_g)
from launcher.transport.sshconfig import SSHOptions

G_PLAIN = "user alice\nhostname login.example\nport 22\ncontrolmaster false\ncontrolpersist no\nconnecttimeout none\n"


def opts(**kw) -> SSHOptions:
    return SSHOptions.from_target({"ssh_host": "cl", "transport": "openssh", **kw})


def test_target_options_become_ssh_flags_and_unset_ones_leave_the_config_alone():
    assert base_options(opts()) == []
    args = base_options(opts(ssh_port=2222, ssh_user="bob", ssh_key="~/k", known_hosts="/kh dir/known %h",
                             ssh_config="", ssh_agent=False, ssh_keepalive=20))
    assert args == ["-F", "none", "-p", "2222", "-l", "bob", "-i", os.path.expanduser("~/k"),
                    "-o", 'UserKnownHostsFile="/kh dir/known %%h"', "-o", "IdentityAgent=none",
                    "-o", "ServerAliveInterval=20"]
    assert base_options(opts(ssh_config="/etc/my ssh"))[:2] == ["-F", "/etc/my ssh"]


def test_ssh_g_output_is_read_first_value_wins():
    eff = parse_ssh_g("User alice\nidentityfile ~/.ssh/a\nidentityfile ~/.ssh/b\nproxyjump j@b:22\n")
    assert eff == {"user": "alice", "identityfile": "~/.ssh/a", "proxyjump": "j@b:22"}


def test_the_launchers_control_path_lives_under_its_home_unless_the_ssh_config_sets_one(tmp_path):
    plan = merge(opts(), parse_ssh_g(G_PLAIN), target="cl", home=str(tmp_path), uid=1000)
    assert plan.own_control_path and plan.control_path.startswith(f"{tmp_path}/ssh/")
    assert ["-o", f"ControlPath={plan.control_path}"] == list(plan.options[:2])
    assert "ConnectTimeout=15" in plan.options and plan.control_persist == "8h"
    assert plan.where == "alice@login.example"
    # the SSH config's ControlPath, ControlPersist and ConnectTimeout win
    eff = parse_ssh_g(G_PLAIN.replace("controlpersist no", "controlpersist 600").replace(
        "connecttimeout none", "connecttimeout 5") + "controlpath /home/a/.ssh/cm-abc\nport 2222\n")
    plan = merge(opts(ssh_control_persist="1h"), eff, target="cl", home=str(tmp_path), uid=1000)
    assert not plan.own_control_path and plan.control_path == "/home/a/.ssh/cm-abc"
    assert not any(o.startswith(("ControlPath=", "ConnectTimeout=")) for o in plan.options)
    assert plan.control_persist == "600" and plan.where == "alice@login.example"
    # another host for the same target name is another connection
    other = merge(opts(), parse_ssh_g(G_PLAIN.replace("login.example", "login2.example")), target="cl",
                  home=str(tmp_path), uid=1000)
    first = merge(opts(), parse_ssh_g(G_PLAIN), target="cl", home=str(tmp_path), uid=1000)
    assert other.control_path != first.control_path


def test_a_control_path_too_long_for_a_unix_socket_moves_under_tmp():
    short = default_control_path("/h", "k", 1000)
    assert short.startswith("/h/ssh/") and len(short) == len("/h/ssh/") + 16
    long_home = "/x" * 50
    path = default_control_path(long_home, "k", 1000, tmp="/tmp")
    assert path == f"/tmp/launcher-1000/{os.path.basename(short)}"
    assert len(path) + MUX_TEMP_SUFFIX < SOCKET_PATH_MAX
    assert default_control_path("/h/with%percent", "k", 1) .startswith("/h/with%percent/")


def test_commands_never_prompt_nor_become_a_master_and_the_login_does():
    plan = merge(opts(), parse_ssh_g(G_PLAIN), target="cl", home="/h", uid=1)
    argv = command_argv(plan, "sh -c 'x'")
    assert argv[0] == "ssh" and argv[-3:] == ["--", "cl", "sh -c 'x'"]
    for o in ("BatchMode=yes", "ControlMaster=no", "ClearAllForwardings=yes"):
        assert o in argv
    assert "-T" in argv and not any("StrictHostKeyChecking" in a for a in argv)
    login = login_argv(plan)
    assert "BatchMode=yes" not in login and "ControlMaster=yes" in login and "ControlPersist=8h" in login
    assert login[-4:] == ["-f", "-N", "--", "cl"]
    assert control_argv(plan, "check")[-4:] == ["-O", "check", "--", "cl"]


@pytest.mark.parametrize("stderr, started, kind, says", [
    ("alice@localhost: Permission denied (keyboard-interactive).\n", False, NotLoggedInError,
     "run `launcher targets login cl`"),
    ("Received disconnect from 127.0.0.1 port 2222:2: Too many authentication failures\n", False,
     NotLoggedInError, "launcher targets login cl"),
    ("No ED25519 host key is known for [localhost]:2222 and you have requested strict checking.\r\n"
     "Host key verification failed.\r\n", False, UnknownHostKeyError, "launcher targets login cl"),
    ("@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\nHost key verification failed.\n", False,
     HostKeyChangedError, "ssh-keygen -R"),
    ("ssh: Could not resolve hostname nope: Name or service not known\n", False, HostNotFoundError, "resolve"),
    ("ssh: connect to host 127.0.0.1 port 1: Connection refused\n", False, HostUnreachableError, "Connection refused"),
    ("Connection to localhost closed by remote host.\n", True, ConnectionLostError, "may or may not have run"),
    ("client_loop: send disconnect: Broken pipe\n", False, ConnectionLostError, "Broken pipe"),
    ("something new\n", False, SSHError, "something new"),
])
def test_ssh_failures_become_one_line_errors_that_say_what_to_do(stderr, started, kind, says):
    e = classify(255, stderr, target="cl", where="alice@localhost:2222", started=started)
    assert type(e) is kind and says in str(e) and "\n" not in str(e)


def test_a_token_in_what_ssh_said_is_not_repeated():
    e = classify(255, "ssh: Could not resolve hostname x: token=ghp_abcdefghijklmnopqrstuvwxyz0123456789\n",
                 target="cl", where="w")
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in str(e)


def test_binary_stdin_goes_in_band_as_base64():
    assert in_band("cat", b"text\n") == ("cat", b"text\n")
    assert in_band("cat", None) == ("cat", None)
    line, data = in_band("cat > f", b"PK\x03\x04\x00\xff")
    assert line == "base64 -d | ( cat > f )" and base64.decodebytes(data) == b"PK\x03\x04\x00\xff"


@pytest.mark.parametrize("raw, field", [
    ({"transport": "openssh"}, "ssh_host"),
    ({"ssh_host": "cl", "transport": "mosh"}, "transport"),
    ({"ssh_host": "cl", "transport": "openssh", "ssh_control_persist": "8 hours"}, "ssh_control_persist"),
    ({"ssh_host": "-oProxyCommand=x", "transport": "openssh"}, "ssh_host"),
])
def test_bad_options_name_their_field(raw, field):
    from launcher_backends.slurm.options import SlurmOptions

    with pytest.raises(Exception) as e:
        SlurmOptions(**raw)
    assert field in str(e.value)


def test_a_user_name_that_would_be_an_option_is_refused():
    with pytest.raises(ConfigError, match="ssh_user"):
        base_options(opts(ssh_user="-oProxyCommand=x"))


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch):
    """An ``ssh`` on PATH: ``-G`` prints a config; anything else says what $FAKE_SSH_SAYS says
    and exits $FAKE_SSH_RC."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text("#!/bin/sh\n"
                   f"for a; do [ \"$a\" = -G ] && {{ printf '{G_PLAIN}'; exit 0; }}; done\n"
                   "echo call >>\"$FAKE_SSH_CALLS\"\n"
                   "printf '%s\\n' \"$FAKE_SSH_SAYS\" >&2\nexit \"$FAKE_SSH_RC\"\n")
    ssh.chmod(ssh.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_CALLS", str(tmp_path / "ssh-calls"))  # one line per connection tried
    return monkeypatch


def test_no_shared_connection_is_one_line_fast_for_a_shell_and_an_exec(fake_ssh, tmp_path):
    fake_ssh.setenv("FAKE_SSH_SAYS", "alice@login.example: Permission denied (keyboard-interactive).")
    fake_ssh.setenv("FAKE_SSH_RC", "255")
    for shell in ("persistent", "exec"):
        r = OpenSSHRunner(opts(ssh_shell=shell), target_name="cl", home=str(tmp_path))
        calls = tmp_path / "ssh-calls"
        calls.unlink(missing_ok=True)
        with pytest.raises(NotLoggedInError, match=r"run `launcher targets login cl`"):
            r.run(["squeue"])
        # fast: one connection tried, no retries and no waiting for a prompt
        assert len(calls.read_text().splitlines()) == 1, calls.read_text()
        assert r.where == "alice@login.example" and not r.check()
        r.close()
    assert oct((tmp_path / "ssh").stat().st_mode & 0o777) == "0o700"


def test_a_remote_exit_255_inside_the_frame_is_the_commands(fake_ssh, tmp_path):
    """Only a 255 before our frame is ssh's own failure; the stand-in prints no frame."""
    fake_ssh.setenv("FAKE_SSH_SAYS", "")
    fake_ssh.setenv("FAKE_SSH_RC", "3")
    r = OpenSSHRunner(opts(ssh_shell="exec"), target_name="cl", home=str(tmp_path))
    res = r.run(["false"], check=False)
    assert res.returncode == 3


def _cli(tmp_path, target: dict, *args):
    import yaml
    from click.testing import CliRunner

    from launcher.cli import main

    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"targets": {"cl": {"backend": "slurm", "partition": "batch", **target}}}))
    env = {"LAUNCHER_CONFIG": str(cfg), "LAUNCHER_HOME": str(tmp_path / "home")}
    return CliRunner().invoke(main, list(args), env=env)


def test_login_is_for_openssh_targets_and_trust_for_paramiko_ones(tmp_path):
    r = _cli(tmp_path, {"ssh_host": "h"}, "targets", "login", "cl")
    assert r.exit_code != 0 and "transport: openssh" in r.output, r.output
    r = _cli(tmp_path, {"ssh_host": "h", "transport": "openssh"}, "targets", "trust", "cl")
    assert r.exit_code != 0 and "launcher targets login cl" in r.output, r.output


def test_login_when_already_logged_in_asks_nothing(fake_ssh, tmp_path):
    fake_ssh.setenv("FAKE_SSH_SAYS", "Master running (pid=1)")
    fake_ssh.setenv("FAKE_SSH_RC", "0")
    r = _cli(tmp_path, {"ssh_host": "h", "transport": "openssh"}, "targets", "login", "cl")
    assert r.exit_code == 0 and "cl: already logged in (alice@login.example)" in r.output, r.output
