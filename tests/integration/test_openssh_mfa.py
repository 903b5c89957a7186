"""`transport: openssh` against a login node that wants a public key AND a TOTP code.

The dockerized 24.11 login node runs a second sshd (tests/cluster/docker/sshd_mfa_config,
127.0.0.1:2222 inside the container) with ``AuthenticationMethods publickey,keyboard-
interactive`` and Debian's pam_google_authenticator. It is reached the way many sites are:
through a jump host (the login node's first sshd, a ProxyJump in the user's ~/.ssh/config).
As alice (non-root), the test

- logs in once with `launcher targets login mfa`, driven through a pseudo-terminal: ssh asks
  for the verification code there, and the test answers with ``oathtool --totp``;
- then launches, queries, follows, cancels, stages, runs a small sweep and lets `watch`
  resubmit a failed attempt, all over the shared connection, with no terminal at all (each
  command in a new session: a prompt could not even be shown);
- closes the master (``ssh -O exit``, as an expiry does) and sees one line that says to log
  in, quickly;
- finds nothing of the launcher's left running on the login node.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pty
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from launcher.transport.openssh import OpenSSHRunner
from tests.fixtures.polling import poll
from tests.fixtures.policy import service_unavailable

from .launcher_cli import LAUNCHER, LauncherCLI, job_id_of

MFA_PORT = 2222
REMOTE_DIR = "/home/alice/launcher-jobs-mfa"


def totp(secret: str) -> str:
    """The current code, computed on this machine as an authenticator app would."""
    return subprocess.run(["oathtool", "--totp", "-b", secret], capture_output=True, text=True, check=True,
                          timeout=10).stdout.strip()


def pty_run(argv: list, env: dict, answer, timeout: float = 60) -> tuple[int, str]:
    """Run ARGV on a new pseudo-terminal; ANSWER(text so far) gives what to type (or None).
    Returns (exit code, everything the terminal showed)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its controlling terminal is the pty
        try:
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    shown, typed, deadline = b"", set(), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    shown += os.read(fd, 4096)
                except OSError:  # EIO: the terminal's last holder is gone
                    pass
            reply = answer(shown.decode("utf-8", "replace"))
            if reply is not None and reply not in typed:
                typed.add(reply)
                os.write(fd, reply.encode() + b"\r")
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError(f"{argv} still running after {timeout}s; the terminal showed:\n{shown.decode()}")
        while select.select([fd], [], [], 0.1)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(fd)
    return os.waitstatus_to_exitcode(status), shown.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def mfa(docker_slurm_2411, tmp_path_factory):
    """The MFA login node as target ``mfa`` (transport: openssh), with alice's TOTP secret
    in her ~/.google_authenticator and an ~/.ssh/config of this machine's user (a short
    tmp dir: HOME) whose ProxyJump goes through the login node's first sshd."""
    if not shutil.which("oathtool"):
        service_unavailable("oathtool", "missing command oathtool: run scripts/test (installs it) or "
                                        "apt-get install oathtool")
    c = docker_slurm_2411
    if c.exec("login", "sh", "-c", f"ss -ltn | grep -q ':{MFA_PORT} '", check=False).returncode != 0:
        service_unavailable("MFA sshd", f"nothing listens on port {MFA_PORT} of the login node "
                                        "(an image older than sshd_mfa_config?)")
    secret = base64.b32encode(os.urandom(10)).decode()
    c.exec("login", "sh", "-c", "umask 077 && cat > /home/alice/.google_authenticator", user="alice",
           input=f'{secret}\n" TOTP_AUTH\n" WINDOW_SIZE 3\n')
    c.run_as_alice("mkdir", "-p", REMOTE_DIR)
    base = tmp_path_factory.mktemp("mfa")
    home = base / "h"  # this machine's user's ~/.ssh, as far as the test goes
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh").chmod(0o700)
    key = c.known_hosts.read_text().split(None, 1)[1]  # the login node's host key: both sshds use it
    (home / ".ssh" / "known_hosts").write_text(c.known_hosts.read_text() + f"[localhost]:{MFA_PORT} {key}")
    common = (f"  User alice\n  IdentityFile {c.ssh_key}\n  IdentitiesOnly yes\n  IdentityAgent none\n"
              f"  UserKnownHostsFile {home}/.ssh/known_hosts\n")
    (home / ".ssh" / "config").write_text(
        f"Host cluster-mfa\n  HostName localhost\n  Port {MFA_PORT}\n  ProxyJump cluster-jump\n{common}"
        f"Host cluster-jump\n  HostName 127.0.0.1\n  Port {c.ssh_port}\n{common}")
    # ssh reads the config of the passwd entry's home, never $HOME's: the file is named here
    target = {"backend": "slurm", "ssh_host": "cluster-mfa", "transport": "openssh", "partition": "batch",
              "facts_ttl": 0, "remote_dir": REMOTE_DIR, "ssh_config": str(home / ".ssh" / "config")}
    cli = LauncherCLI(base, None, {"mfa": target})
    cli.ssh_config = home / ".ssh" / "config"
    cli.secret = secret
    cli.cluster = c
    yield cli
    logout(cli)
    c.exec("login", "rm", "-f", "/home/alice/.google_authenticator")


def login(cli) -> tuple[int, str]:
    def answer(text):
        return totp(cli.secret) if re.search(r"Verification code:\s*$", text) else None

    return pty_run([LAUNCHER, "targets", "login", "mfa"], cli.env, answer, timeout=90)


def logout(cli) -> None:
    subprocess.run([LAUNCHER, "targets", "logout", "mfa"], env=cli.env, capture_output=True, timeout=60,
                   stdin=subprocess.DEVNULL)


def no_tty(cli, *args, timeout=120, check=True) -> subprocess.CompletedProcess:
    """`launcher ARGS` with no terminal at all (a new session, stdin /dev/null): any prompt fails."""
    p = subprocess.run([LAUNCHER, *map(str, args)], env=cli.env, capture_output=True, text=True,
                       timeout=timeout, cwd=str(cli.tmp), stdin=subprocess.DEVNULL, start_new_session=True)
    if check:
        assert p.returncode == 0, f"launcher {args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def alice_processes(c) -> list[str]:
    """alice's processes on the login node other than sshd's own."""
    out = c.exec("login", "ps", "-u", "alice", "-o", "args=", check=False).stdout
    return [l for l in out.splitlines() if l.strip() and not l.startswith("sshd")]


def test_mfa_login_once_then_everything_over_the_shared_connection(mfa):
    cli, c = mfa, mfa.cluster
    c.reset()
    # before the login: one line saying what to do, and no prompt (a prompt waits: the time-out)
    p = no_tty(cli, "launch", cli.spec("early", {"run": "true"}), "--target", "mfa", check=False, timeout=60)
    assert p.returncode != 0 and "launcher targets login mfa" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr

    rc, screen = login(cli)
    assert rc == 0, screen
    assert "Verification code:" in screen and "mfa: logged in" in screen, screen
    sockets = list((cli.home / "ssh").iterdir())
    assert len(sockets) == 1 and sockets[0].is_socket(), sockets
    rc, screen = pty_run([LAUNCHER, "targets", "login", "mfa"], cli.env, lambda t: None, timeout=30)
    assert rc == 0 and "already logged in" in screen and "Verification" not in screen, screen

    # launch (stages the script and the helper), status, logs, with no terminal
    spec = cli.spec("mfa-hello", {"run": 'echo "hello from $(hostname) as $(id -un) with $GREETING"',
                                  "env": {"GREETING": "it's \"quoted\" $HOME"},
                                  "resources": {"time_limit": "5m"}})
    job = job_id_of(no_tty(cli, "launch", spec, "--target", "mfa", "--follow", timeout=240))
    st = json.loads(no_tty(cli, "status", job, "--json").stdout)
    assert st["state"] == "COMPLETED" and st["target"] == "mfa", st
    out = no_tty(cli, "logs", job).stdout
    assert "as alice with it's \"quoted\" $HOME" in out, out
    assert c.exists(f"{REMOTE_DIR}/{job}/attempt-1.sbatch")
    assert "openssh cluster-mfa" in no_tty(cli, "targets").stdout

    # a directory staged as one tar stream, binary file included, through the same connection
    src = cli.tmp / "tree"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("A\n")
    (src / "sub" / "b.bin").write_bytes(bytes(range(256)) * 8)
    runner = OpenSSHRunner(yaml.safe_load(cli.config.read_text())["targets"]["mfa"], target_name="mfa",
                           home=str(cli.home))
    try:
        assert runner.put_tree(str(src), f"{REMOTE_DIR}/tree").files == 2
        runner.put_file(f"{REMOTE_DIR}/tree/c.bin", b"\0\xff" * 10, 0o600)
    finally:
        runner.close()
    sums = c.exec("login", "sh", "-c", f"cd {REMOTE_DIR}/tree && sha256sum a.txt sub/b.bin c.bin && stat -c %a c.bin").stdout
    for name, data in (("a.txt", b"A\n"), ("sub/b.bin", bytes(range(256)) * 8), ("c.bin", b"\0\xff" * 10)):
        assert f"{hashlib.sha256(data).hexdigest()}  {name}" in sums, sums
    assert sums.split()[-1] == "600"

    # cancel
    sleepy = job_id_of(no_tty(cli, "launch", cli.spec("mfa-sleepy", {"run": "sleep 300",
                                                                      "resources": {"time_limit": "10m"}}),
                              "--target", "mfa"))
    poll("sleepy running", lambda: json.loads(no_tty(cli, "status", sleepy, "--json").stdout)["state"] == "RUNNING",
         timeout=120, interval=1)
    no_tty(cli, "cancel", sleepy)
    poll("sleepy cancelled",
         lambda: json.loads(no_tty(cli, "status", sleepy, "--json").stdout)["state"] == "CANCELLED",
         timeout=60, interval=1)

    # a small sweep: one sbatch --array, its table staged beside the script
    sweep_spec = cli.spec("mfa-sweep", {"run": 'echo "lr=$LAUNCHER_PARAM_LR"', "sweep": {"grid": {"lr": ["0.1", "0.01"]}},
                                        "resources": {"time_limit": "5m"}})
    sweep = no_tty(cli, "launch", sweep_spec, "--target", "mfa").stdout.split(":")[0].strip()

    def sweep_done():
        s = json.loads(no_tty(cli, "status", sweep, "--json").stdout)
        return s if s["counts"].get("COMPLETED") == 2 else None

    poll("sweep done", sweep_done, timeout=180, interval=2)
    assert "lr=0.01" in no_tty(cli, "logs", sweep, "--element", 1).stdout

    # recovery by watch: the first attempt fails, `watch --once` resubmits, the second succeeds
    flaky = job_id_of(no_tty(cli, "launch", cli.spec("mfa-flaky", {
        "run": 'if [ "$LAUNCHER_ATTEMPT" = 1 ]; then echo first; exit 3; fi; echo second',
        "recovery": {"app_error": 2}, "resources": {"time_limit": "5m"}}), "--target", "mfa"))

    def recovered():
        no_tty(cli, "watch", "--once")
        st = json.loads(no_tty(cli, "status", flaky, "--json").stdout)
        return st if st["state"] == "COMPLETED" and not st["open"] else None

    st = poll("flaky recovered by watch", recovered, timeout=240, interval=2)
    assert len(st["attempts"]) == 2, st["attempts"]

    # nothing of the launcher keeps running on the login node (only the master's sshd session)
    poll("no launcher shells left", lambda: alice_processes(c) == [], timeout=20, interval=0.5,
         detail=lambda: "\n".join(alice_processes(c)))

    # the master goes away (expiry, logout, a laptop's sleep): one line, quickly, never a prompt
    subprocess.run(["ssh", "-F", str(cli.ssh_config), "-O", "exit", "-o", f"ControlPath={sockets[0]}", "cluster-mfa"],
                   capture_output=True, timeout=30, check=True)
    p = no_tty(cli, "status", flaky, "--json", check=False, timeout=60)  # a final job: no SSH needed
    assert p.returncode == 0
    p = no_tty(cli, "logs", job, check=False, timeout=60)  # a prompt would wait: the time-out
    assert p.returncode != 0, p.stdout
    assert p.stderr.strip().splitlines() == [l for l in p.stderr.strip().splitlines() if "launcher targets login mfa" in l]
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


# --------------------------------------------------------------------------- a dead master
# (issue 28, item 6) Against the key-only test sshd: `targets login` works without a terminal
# there, so these tests need no docker cluster.

def _key_target(server, **kw) -> dict:
    t = {"backend": "slurm", "partition": "batch", "transport": "openssh", "ssh_host": server.host,
         "ssh_port": server.port, "ssh_user": server.user, "ssh_key": str(server.client_key),
         "known_hosts": str(server.known_hosts), "ssh_config": "", "ssh_agent": False, "facts_ttl": 0}
    t.update(kw)
    return t


def _ssh_processes(marker: str) -> list[tuple[int, str]]:
    """This user's ssh processes whose command line contains MARKER (a path unique to the test)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if os.stat(f"/proc/{entry}").st_uid != os.getuid():
                continue
        except OSError:
            continue
        line = b" ".join(argv).decode("utf-8", "replace")
        if argv and os.path.basename(argv[0]) == b"ssh" and marker in line:
            found.append((int(entry), line))
    return found


def _kill_all(marker: str) -> None:
    for pid, _ in _ssh_processes(marker):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def _master_pid(runner) -> int:
    p = subprocess.run(["ssh", *runner.plan.options, "-O", "check", "--", runner.plan.dest], capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    m = re.search(r"pid=(\d+)", p.stderr)
    assert p.returncode == 0 and m, p.stderr
    return int(m.group(1))


@pytest.mark.sshd
def test_a_killed_master_leaves_a_stale_socket_and_login_opens_a_new_one(sshd_server, tmp_path):
    cli = LauncherCLI(tmp_path, None, {"keyed": _key_target(sshd_server)})
    runner = OpenSSHRunner(_key_target(sshd_server), target_name="keyed", home=str(cli.home))
    # HOME/ssh/<key>, or /tmp/launcher-UID/<key> when a long temporary HOME would not fit a socket path
    control = Path(runner.control_path)
    marker = str(control)
    try:
        first = no_tty(cli, "targets", "login", "keyed", timeout=120)
        assert "keyed: logged in" in first.stdout, first.stdout
        assert control.is_socket(), sorted(control.parent.iterdir())
        try:
            os.kill(_master_pid(runner), 9)  # the master dies (OOM killer, a crash): its socket stays
            poll("master gone", lambda: not runner.check(), timeout=120, interval=0.2)
            assert control.is_socket()  # stale: nothing listens on it

            again = no_tty(cli, "targets", "login", "keyed", check=False, timeout=120)
            assert again.returncode == 0 and "keyed: logged in" in again.stdout, again.stdout + again.stderr
            assert runner.check(), "no master answers on the socket after the second login"
            assert runner.run(["echo", "through-the-master"]).stdout.endswith("through-the-master\n")
            runner.close()  # its shell is gone: what is left is the master
            masters = _ssh_processes(marker)
            assert len(masters) == 1, masters  # the new master, nothing else
        finally:
            runner.close()
    finally:
        logout(cli)
        _kill_all(marker)


@pytest.mark.sshd
@pytest.mark.parametrize("occupant", ["file", "listener"])
def test_failed_logins_leave_no_ssh_process_behind(sshd_server, tmp_path, occupant):
    """The ControlPath of the SSH config holds something that is not an ssh master (a file; a
    socket another program listens on): ssh would log in, fail to bind the socket, and stay in
    the background as a plain connection. Each try fails with a line naming the control path,
    and leaves no ssh process behind."""
    import socket
    import threading

    config = tmp_path / "ssh_config"
    taken = tmp_path / "master.sock"
    config.write_text(f"Host *\n  ControlPath {taken}\n")
    listener = None
    if occupant == "file":
        taken.write_text("not a socket\n")
    else:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(taken))
        listener.listen(16)

        def serve():  # accept and hang up: no ssh mux protocol
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                conn.close()

        threading.Thread(target=serve, daemon=True).start()
    cli = LauncherCLI(tmp_path, None, {"keyed": _key_target(sshd_server, ssh_config=str(config))})
    marker = str(config)
    try:
        tries = 3
        for _ in range(tries):
            p = no_tty(cli, "targets", "login", "keyed", check=False, timeout=120)
            assert p.returncode not in (0, 70) and "Traceback" not in p.stderr, p.stdout + p.stderr
            last = p.stderr.strip().splitlines()[-1]
            assert last.startswith("error: ") and str(taken) in last and "remove it" in last, p.stderr
        left = _ssh_processes(marker)
        assert left == [], f"{len(left)} ssh process(es) left after {tries} failed logins: {left}"
        assert taken.exists()  # not ours to remove
    finally:
        _kill_all(marker)
        if listener is not None:
            listener.close()
