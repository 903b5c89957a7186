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


def _handoff(rank: int, nodes: int, port: int, *cmd: str, timeout: float = 30, job="job-1", start="sky-1_c_1"):
    return subprocess.Popen([sys.executable, str(HANDOFF), "--rank", str(rank), "--nodes", str(nodes),
                             "--master", "127.0.0.1", "--port", str(port), "--timeout", str(timeout), "--", *cmd],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "LAUNCHER_JOB_ID": job, "LAUNCHER_SELF_ID": start})


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


def test_another_start_of_the_same_job_is_never_given_the_answer(tmp_path):
    """A second launch of one attempt on the same cluster is another cluster job (another
    $SKYPILOT_TASK_ID): its nodes must not take the answer of the start that holds the claim,
    or they would run the user's program beside it."""
    port = _port()
    leader = _handoff(0, 2, port, sys.executable, "-c", "print('export LAUNCHER_ATTEMPT=1')", start="sky-1_c_1")
    assert leader.communicate(timeout=60)[0] == "export LAUNCHER_ATTEMPT=1\n"
    duplicate = _handoff(1, 2, port, timeout=3, start="sky-2_c_2")
    out, err = duplicate.communicate(timeout=60)
    assert (out, duplicate.returncode != 0) == ("", True) and "no answer from node 0" in err
    worker = _handoff(1, 2, port, start="sky-1_c_1")
    assert worker.communicate(timeout=60)[0] == "export LAUNCHER_ATTEMPT=1\n"


def test_a_claim_alone_prints_nothing_and_still_answers_every_node(tmp_path):
    """Several nodes without a checkpoint root: node 0's command is the start claim alone."""
    port = _port()
    workers = [_handoff(r, 3, port) for r in (1, 2)]
    leader = _handoff(0, 3, port, "sh", "-c", "true")
    outs = [p.communicate(timeout=60) for p in [leader, *workers]]
    assert [p.returncode for p in [leader, *workers]] == [0, 0, 0], [e for _, e in outs]
    assert [o for o, _ in outs] == ["", "", ""]


def test_node_0_standing_down_gives_no_node_a_start(tmp_path):
    """The start claim through the real job-side helper: the attempt is held by another
    start, so node 0 exits 3 and its peers get no answer."""
    port = _port()
    root = Path(__file__).resolve().parents[2]
    claim = (f"{sys.executable} -m launcher.jobside start-claim --job-dir {tmp_path} --attempt 2")
    (tmp_path / "attempt-2.start").write_text("sky-1_c_1\n")
    worker = _handoff(1, 2, port, timeout=3, start="sky-2_c_2")
    leader = subprocess.Popen([sys.executable, str(HANDOFF), "--rank", "0", "--nodes", "2", "--master", "127.0.0.1",
                               "--port", str(port), "--timeout", "3", "--", "sh", "-c", claim],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root,
                              env={**os.environ, "LAUNCHER_JOB_ID": "job-1", "LAUNCHER_SELF_ID": "sky-2_c_2"})
    out, err = leader.communicate(timeout=60)
    assert (leader.returncode, out) == (3, ""), err
    assert "stands down" in err
    assert worker.wait(timeout=60) != 0
