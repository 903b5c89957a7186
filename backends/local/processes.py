"""The local backend's jobs as processes: is one still ours and alive, and stopping many at once.

A local job is a process group led by its supervisor (``LocalBackend.submit``), named by the
leader's pid and its start time (field 22 of ``/proc/PID/stat``), which tells our process from
a later one that reused the pid. Stopping is SIGTERM to the group (the job's preemption notice:
it may checkpoint), a grace period, then SIGKILL to the groups still there (a job that ignores
its notice outlives its leader, the supervisor, which does not), and a wait until the killed
groups have no live member. ``stop_groups``
does that for many jobs against ONE grace period, so cancelling N jobs waits once, not N times.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Callable, Mapping, Optional

GRACE_S = 10.0  # from SIGTERM to SIGKILL: time for the job to save its checkpoint
KILL_WAIT_S = 5.0  # after SIGKILL: how long the kernel may take to end the group's members


def proc_start_ticks(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int, start_ticks: Optional[int]) -> bool:
    """True while *our* process runs: guards against PID reuse with the start time."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    if fields[0] == "Z":
        try:  # our own child finished: reap it so it does not linger as a zombie
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        return False
    if start_ticks is not None and int(fields[19]) != start_ticks:
        return False
    return True


def signal_group(pid: int, sig: int) -> Optional[str]:
    """Send SIG to process group PID: None when sent (or the group is gone), else why not."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return None
    except OSError as e:
        return f"could not signal process group {pid}: {e.strerror or e}"
    return None


def live_groups(pgids) -> set:
    """Those of process groups PGIDS that still have a member that is not a zombie (one pass
    over /proc for all of them). A group's number is not reused while it has any member, so
    once our leader was seen alive the group that remains is the job's (a job that ignores its
    notice outlives its leader, which does not). Zombies do not count: an init that reaps
    late (a container's) would otherwise hold every cancel for the whole grace period."""
    want, out = set(pgids), set()
    if not want:
        return out
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        if fields[0] != "Z" and int(fields[2]) in want:
            out.add(int(fields[2]))
    return out


def stop_groups(groups: Mapping[str, tuple], grace_s: Optional[float] = None, poll: float = 0.05,
                is_alive: Callable[[int, Optional[int]], bool] = alive,
                live: Callable[[set], set] = live_groups) -> dict:
    """Stop every job of GROUPS ({key: (leader pid, its start ticks)}): SIGTERM the group of
    each leader still alive (IS_ALIVE: ours, not a reused pid), wait until every such group is
    gone or GRACE_S (default ``GRACE_S``) has passed (one wait for all), SIGKILL the groups
    left. {key: error} for the groups that could not be signalled; a job already gone counts
    as stopped."""
    grace_s = GRACE_S if grace_s is None else grace_s
    errors, waiting = {}, {}
    for key, (pid, ticks) in groups.items():
        if pid <= 1:  # killpg(0) would signal our own group, killpg(1) init's
            errors[key] = f"{pid} is not a job's process id"
        elif is_alive(pid, ticks):
            err = signal_group(pid, signal.SIGTERM)
            if err:
                errors[key] = err
            else:
                waiting[key] = (pid, ticks)
    deadline = time.monotonic() + grace_s
    while waiting:
        leaders = {k: p for k, p in waiting.items() if is_alive(*p)}  # first: reaps a leader that is our child
        groups = live({pid for k, (pid, _) in waiting.items() if k not in leaders})
        waiting = {k: p for k, p in waiting.items() if k in leaders or p[0] in groups}
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(poll)
    for key, (pid, ticks) in waiting.items():
        err = signal_group(pid, signal.SIGKILL)
        if err:
            errors[key] = err
    # a killed group is gone only once the kernel has ended its members: wait for that (bounded),
    # so a caller that looks right after sees no live member of a job it was told is stopped
    killed = {p[0] for k, p in waiting.items() if k not in errors}
    deadline = time.monotonic() + KILL_WAIT_S
    while killed:
        for pid in list(killed):
            is_alive(pid, None)  # reaps a leader that is our own child
        killed = live(killed)
        if not killed or time.monotonic() >= deadline:
            break
        time.sleep(poll)
    for pid in killed:
        key = next(k for k, p in waiting.items() if p[0] == pid)
        errors[key] = f"process group {pid} still has live members {KILL_WAIT_S:g} s after SIGKILL"
    return errors
