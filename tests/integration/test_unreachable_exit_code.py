"""docs/operations.md: "4: a target cannot be reached (scheduler, SSH host, cloud API): retrying
later may work". A Slurm target whose SSH host refuses connections (a port on 127.0.0.1 that
nothing listens on) makes `launch` and `render` exit 4 with one line naming the target, and
nothing is recorded (issue 33: it exited 1)."""

from __future__ import annotations

import socket

import pytest

from .launcher_cli import LauncherCLI


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: a connection is refused
    return port


@pytest.mark.parametrize("verb", ["launch", "render"])
def test_a_login_node_that_refuses_connections_exits_4_naming_the_target(tmp_path, verb):
    target = {"backend": "slurm", "ssh_host": "127.0.0.1", "ssh_port": closed_port(), "ssh_user": "nobody",
              "facts_ttl": 0}
    cli = LauncherCLI(tmp_path, None, {"far": target})
    spec = cli.spec("hello", {"run": "echo hello"})
    p = cli.run(verb, spec, "--target", "far", check=False, timeout=120)
    assert p.returncode == 4, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "target far: cannot reach Slurm" in lines[0] and "Traceback" not in p.stderr, p.stderr
    assert "no jobs" in cli.run("status").stdout
