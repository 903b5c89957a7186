"""Node 0 -> other nodes hand-off of the resume point in a multi-node SkyPilot job."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from launcher_backends.skypilot.handoff import sanitize

HANDOFF = Path(__file__).resolve().parents[2] / "backends" / "skypilot" / "handoff.py"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _handoff(rank: int, nodes: int, port: int, *cmd: str, timeout: float = 30, job="job-1"):
    return subprocess.Popen([sys.executable, str(HANDOFF), "--rank", str(rank), "--nodes", str(nodes),
                             "--master", "127.0.0.1", "--port", str(port), "--timeout", str(timeout), "--", *cmd],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "LAUNCHER_JOB_ID": job})


def test_only_launcher_exports_pass_and_values_are_requoted():
    text = ("export LAUNCHER_ATTEMPT=3\n"
            "export LAUNCHER_RESUME_FROM='/ck/step 000000010.g2'\n"
            "export LAUNCHER_Y='$(id)'\n"
            "export LAUNCHER_X=$(touch /tmp/pwned)\n"
            "touch /tmp/pwned\n"
            "export PATH=/evil\n"
            "export LAUNCHER_A=1; rm -rf /\n")
    assert sanitize(text) == ("export LAUNCHER_ATTEMPT=3\n"
                              "export LAUNCHER_RESUME_FROM='/ck/step 000000010.g2'\n"
                              "export LAUNCHER_Y='$(id)'\n")


def test_every_node_gets_node_0s_answer_and_the_command_runs_once(tmp_path):
    port = _port()
    calls = tmp_path / "calls"
    cmd = [sys.executable, "-c", f"open({str(calls)!r}, 'a').write('x'); print('export LAUNCHER_ATTEMPT=7')"]
    workers = [_handoff(r, 4, port) for r in (1, 2, 3)]  # started first: they wait for node 0
    leader = _handoff(0, 4, port, *cmd)
    outs = [p.communicate(timeout=60) for p in [leader, *workers]]
    assert [p.returncode for p in [leader, *workers]] == [0, 0, 0, 0], [e for _, e in outs]
    assert {o for o, _ in outs} == {"export LAUNCHER_ATTEMPT=7\n"}
    assert calls.read_text() == "x"


def test_a_stranger_on_the_port_is_not_counted_as_a_node(tmp_path):
    port = _port()
    leader = _handoff(0, 2, port, sys.executable, "-c", "print('export LAUNCHER_ATTEMPT=1')")
    assert leader.communicate(timeout=60)[0] == "export LAUNCHER_ATTEMPT=1\n"
    for _ in range(50):  # the detached server is up once the leader has returned; be lenient anyway
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                c.sendall(b"GET / HTTP/1.0\r\n\r\n")
                assert c.recv(100) == b""  # no answer for a stranger
            break
        except ConnectionRefusedError:
            continue
    other_job = _handoff(1, 2, port, timeout=3, job="someone-else")
    assert other_job.communicate(timeout=60)[0] == ""  # a different job id gets nothing either
    worker = _handoff(1, 2, port)
    assert worker.communicate(timeout=60)[0] == "export LAUNCHER_ATTEMPT=1\n"


def test_node_0s_failure_is_its_exit_code_and_the_others_give_up_after_the_timeout():
    port = _port()
    leader = _handoff(0, 2, port, sys.executable, "-c", "import sys; sys.exit(5)")
    worker = _handoff(1, 2, port, timeout=2)
    assert leader.wait(timeout=60) == 5
    _, err = worker.communicate(timeout=60)
    assert worker.returncode != 0 and "no answer from node 0" in err
