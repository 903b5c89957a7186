"""LocalRunner: a command past its timeout is killed and reported as before, whether it
holds its output pipes open or closed them; one shared watchdog thread, not one per call."""

from __future__ import annotations

import threading

import pytest

from launcher.errors import CommandError, TransientError
from launcher.runner import LocalRunner


def test_output_input_and_exit_codes_come_back():
    r = LocalRunner(env={"X_SWEEPSPEED": "yes"})
    res = r.run(["sh", "-c", "cat; echo $X_SWEEPSPEED; echo err >&2"], input="in\n")
    assert (res.returncode, res.stdout, res.stderr) == (0, "in\nyes\n", "err\n")
    assert r.run(["sh", "-c", "exit 3"], check=False).returncode == 3
    with pytest.raises(CommandError):
        r.run(["sh", "-c", "exit 3"])
    with pytest.raises(CommandError, match="command not found on localhost"):
        r.run(["no-such-command-sweepspeed"])


@pytest.mark.parametrize("script", ["sleep 30", "exec >&- 2>&-; sleep 30"], ids=["pipes open", "pipes closed"])
def test_a_command_past_its_timeout_is_killed_and_reported(script):
    with pytest.raises(TransientError, match=r"^command timed out after 0.5s on localhost: sh -c "):
        LocalRunner().run(["sh", "-c", script], timeout=0.5)


def test_many_calls_share_one_watchdog_thread():
    r = LocalRunner()
    r.run(["true"])
    before = threading.active_count()
    for _ in range(20):
        r.run(["true"], timeout=30)
    assert threading.active_count() == before
    assert sum(t.name == "launcher-watchdog" for t in threading.enumerate()) == 1
