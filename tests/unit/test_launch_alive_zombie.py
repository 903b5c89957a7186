"""A launch that has ended is over even before its parent reaps it: a SUBMITTING row whose
launch is a zombie is settled by its traces, not waited on (a fault schedule saw watch wait on
an interrupted launch its parent had not reaped yet, and leave the row SUBMITTING)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from launcher.launching.submit import launch_alive, zombie


def test_an_ended_launch_not_yet_reaped_is_over():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        end = time.monotonic() + 30
        while not zombie(p.pid) and time.monotonic() < end:  # ended; not reaped: no wait() yet
            time.sleep(0.05)
        assert zombie(p.pid)
        os.kill(p.pid, 0)  # signal 0 still reaches it
        assert launch_alive({"launch_by": f"{socket.gethostname()}:{p.pid}"}) is False
    finally:
        p.wait()


def test_a_running_launch_is_alive_and_a_gone_one_is_not():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not zombie(p.pid)
        assert launch_alive({"launch_by": f"{socket.gethostname()}:{p.pid}"}) is True
    finally:
        p.kill()
        p.wait()
    assert launch_alive({"launch_by": f"{socket.gethostname()}:{p.pid}"}) is False
    assert launch_alive({"launch_by": f"another-host:{os.getpid()}"}) is None
