"""LocalRunner: a command past its timeout is killed and reported as before, whether it
holds its output pipes open or closed them; one shared watchdog thread, not one per call."""

from __future__ import annotations

import threading

import pytest

from launcher.core.errors import CommandError, TransientError
from launcher.transport.runner import LocalRunner


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


def test_a_shorter_deadline_added_after_a_longer_one_is_still_enforced():
    """The watchdog is woken only for a deadline sooner than those it waits for: a short
    command started while a long one is watched is still killed at its own deadline."""
    import subprocess
    import time

    from launcher.transport.watchdog import Watchdog

    dog = Watchdog()
    long_one = subprocess.Popen(["sleep", "30"])
    short_one = subprocess.Popen(["sleep", "30"])
    try:
        dog.watch(long_one, 60)
        time.sleep(0.3)  # the watchdog now sleeps until the long deadline
        dog.watch(short_one, 0.3)
        short_one.wait(timeout=20)  # (sleep 30 would end by itself only after this wait gave up)
        assert short_one.returncode < 0 and dog.unwatch(short_one)  # killed by the watchdog
        assert long_one.poll() is None and not dog.unwatch(long_one)
    finally:
        for p in (long_one, short_one):
            p.kill()
            p.wait()
