"""A local job whose supervisor is killed (kill -9 of that one process) keeps running: its
program's process group lives on. ``status``, ``find``, ``watch`` and ``cancel`` must still see
it and act on it, through the group and the marker its processes carry, not only through the
supervisor; once it ends they say how, when that can be known, and say that it cannot when not."""

from __future__ import annotations

import os
import signal

from launcher_backends.local import processes
from tests.fixtures.polling import poll


def _members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group PGID."""
    out = []
    for e in os.scandir("/proc"):
        if e.name.isdigit():
            try:
                f = open(f"/proc/{e.name}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if f[0] != "Z" and int(f[2]) == pgid:
                out.append(int(e.name))
    return out


def test_a_group_is_the_jobs_only_while_a_member_carries_its_token(tmp_path):
    """A process group whose leader is gone counts as the job's while any member carries the
    job's token in its environment and started no earlier than the job's leader; another
    group with the same number (a reused pid) does not."""
    import subprocess

    token = "launcher:orphan-x:1"
    env = {**os.environ, processes.TOKEN_VAR: token}
    leader = subprocess.Popen(["bash", "-c", "sleep 300 & echo $! ; wait"], env=env, start_new_session=True,
                              stdout=subprocess.PIPE, text=True)
    try:
        child = int(leader.stdout.readline())
        ticks = processes.proc_start_ticks(leader.pid)
        leader.kill()
        leader.wait()
        assert _members(leader.pid) == [child]
        assert processes.orphaned_groups({leader.pid: (ticks, token)}) == {leader.pid}
        assert processes.orphaned_groups({leader.pid: (ticks, "launcher:other:1")}) == set()
        later = processes.proc_start_ticks(child) + 1  # a leader that started after every member
        assert processes.orphaned_groups({leader.pid: (later, token)}) == set()
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
    poll("the group is gone", lambda: _members(leader.pid) == [], timeout=10, interval=0.05)
    assert processes.orphaned_groups({leader.pid: (ticks, token)}) == set()
