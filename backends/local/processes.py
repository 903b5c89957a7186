"""The local backend's jobs as processes: is one still ours and alive, and stopping many at once.

A local job is a process group led by its supervisor (``LocalBackend.submit``), named by the
leader's pid and its start time (field 22 of ``/proc/PID/stat``), which tells our process from
a later one that reused the pid. Stopping is SIGTERM to the group (the job's preemption notice:
it may checkpoint), a grace period, then SIGKILL to the groups still there (a job that ignores
its notice outlives its leader, the supervisor, which does not), and a wait until the killed
groups have no live member. ``stop_groups``
does that for many jobs against ONE grace period, so cancelling N jobs waits once, not N times.

The supervisor is not the only way to the job: every process of the group carries the
attempt's token in its environment (``TOKEN_VAR``, set when the supervisor is started, and
inherited), so a group whose leader was killed while its members run on is still found
(``orphaned_groups``): by its number, a member that is not a zombie, started no earlier than
the leader, and has the token in ``/proc/PID/environ``. A group number is not reused while the
group has a member, and the token tells our group from a later one that reused the number.
All of this reads ``/proc``: the local backend runs on Linux only (``require_proc``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Callable, Mapping, Optional

from launcher.core.errors import LauncherError

PROC = "/proc"
TOKEN_VAR = "LAUNCHER_LOCAL_TOKEN"  # the attempt's token, in the environment of every process of its job
GRACE_S = 10.0  # from SIGTERM to SIGKILL: time for the job to save its checkpoint
KILL_WAIT_S = 5.0  # after SIGKILL: how long the kernel may take to end the group's members


def require_proc() -> None:
    """Raise unless this system has Linux's /proc, which the local backend follows its jobs by."""
    if not os.path.isfile(f"{PROC}/self/stat"):
        raise LauncherError(f"the local backend runs on Linux only: it follows its jobs through /proc, and "
                            f"{PROC}/self/stat is missing on this system ({sys.platform})")


def _stat(pid) -> Optional[list]:
    """The fields of /proc/PID/stat after the command name (state first), or None when gone."""
    try:
        with open(f"{PROC}/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def proc_start_ticks(pid: int) -> Optional[int]:
    fields = _stat(pid)
    try:
        return int(fields[19]) if fields else None
    except (ValueError, IndexError):
        return None


def alive(pid: int, start_ticks: Optional[int]) -> bool:
    """True while *our* process runs: guards against PID reuse with the start time."""
    fields = _stat(pid)
    if fields is None:
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
    for pid, fields in _processes():
        if fields[0] != "Z" and int(fields[2]) in want:
            out.add(int(fields[2]))
    return out


def _processes():
    """(pid, stat fields) of every process now (one pass over /proc; those that end meanwhile are left out)."""
    for entry in os.scandir(PROC):
        if entry.name.isdigit():
            fields = _stat(entry.name)
            if fields is not None:
                yield int(entry.name), fields


def carries(pid: int, token: str) -> bool:
    """True when process PID was started with TOKEN_VAR=TOKEN in its environment (False when
    gone, or its environment cannot be read: another user's, a setuid program)."""
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return False
    return f"{TOKEN_VAR}={token}".encode() in env.split(b"\0")


def orphaned_groups(groups: Mapping[int, tuple]) -> set:
    """Those of GROUPS ({pgid: (its leader's start ticks, the job's token)}) that still have a
    member of the job: not a zombie, started no earlier than the leader, with the token in its
    environment (one pass over /proc for all of them). The leader itself need not be there:
    this is how a job whose supervisor was killed is still seen."""
    out: set = set()
    if not groups:
        return out
    for pid, fields in _processes():
        try:
            pgid, started = int(fields[2]), int(fields[19])
        except (ValueError, IndexError):
            continue
        if pgid in out or pgid not in groups or fields[0] == "Z":
            continue
        ticks, token = groups[pgid]
        if token and (ticks is None or started >= ticks) and carries(pid, token):
            out.add(pgid)
    return out


def _jobs(groups: Mapping[str, tuple]) -> tuple[dict, dict]:
    """({key: (leader pid, its start ticks, the job's token or None)}, {key: error}) of GROUPS
    ({key: (leader pid, its start ticks[, the job's token])}): a pid that names no job's group
    is an error."""
    jobs, errors = {}, {}
    for key, (pid, ticks, *token) in groups.items():
        if pid <= 1:  # killpg(0) would signal our own group, killpg(1) init's
            errors[key] = f"{pid} is not a job's process id"
        else:
            jobs[key] = (pid, ticks, token[0] if token else None)
    return jobs, errors


def _running(jobs: dict, is_alive, orphans) -> dict:
    """{key: (leader pid, its start ticks)} of the JOBS still running: the leader alive
    (IS_ALIVE: ours, not a reused pid) or, for a job with a token, its group still holding a
    member of the job (ORPHANS, one pass for all)."""
    up = {k for k, (pid, ticks, _) in jobs.items() if is_alive(pid, ticks)}
    found = orphans({pid: (ticks, token) for k, (pid, ticks, token) in jobs.items() if k not in up and token})
    return {k: (pid, ticks) for k, (pid, ticks, _) in jobs.items() if k in up or pid in found}


def _signal_groups(targets: dict, sig: int) -> tuple[dict, dict]:
    """Send SIG to the group of each of TARGETS ({key: (leader pid, its start ticks)}): (those
    signalled, {key: error} of the others)."""
    sent, errors = {}, {}
    for key, (pid, ticks) in targets.items():
        err = signal_group(pid, sig)
        if err:
            errors[key] = err
        else:
            sent[key] = (pid, ticks)
    return sent, errors


def _wait_gone(waiting: dict, grace_s: float, poll: float, is_alive, live) -> dict:
    """Those of WAITING ({key: (leader pid, its start ticks)}) still there after GRACE_S, or
    sooner once none is: the leader alive, or the group holding a live member."""
    deadline = time.monotonic() + grace_s
    while waiting:
        leaders = {k: p for k, p in waiting.items() if is_alive(*p)}  # first: reaps a leader that is our child
        groups = live({pid for k, (pid, _) in waiting.items() if k not in leaders})
        waiting = {k: p for k, p in waiting.items() if k in leaders or p[0] in groups}
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(poll)
    return waiting


def _wait_killed(killed: set, poll: float, is_alive, live) -> set:
    """Those of the KILLED groups that still have a live member after ``KILL_WAIT_S``: a killed
    group is gone only once the kernel has ended its members."""
    deadline = time.monotonic() + KILL_WAIT_S
    while killed:
        for pid in list(killed):
            is_alive(pid, None)  # reaps a leader that is our own child
        killed = live(killed)
        if not killed or time.monotonic() >= deadline:
            break
        time.sleep(poll)
    return killed


def stop_groups(groups: Mapping[str, tuple], grace_s: Optional[float] = None, poll: float = 0.05,
                is_alive: Callable[[int, Optional[int]], bool] = alive,
                live: Callable[[set], set] = live_groups,
                orphans: Callable[[Mapping[int, tuple]], set] = orphaned_groups) -> dict:
    """Stop every job of GROUPS ({key: (leader pid, its start ticks[, the job's token])}):
    SIGTERM the group of each job still running, its leader alive (IS_ALIVE: ours, not a
    reused pid) or, for a job with a token, its group still holding a member of the job
    (ORPHANS, one pass for all: the leader was killed, the job runs on), wait until every such
    group is gone or GRACE_S (default ``GRACE_S``) has passed (one wait for all), SIGKILL the
    groups left. {key: error} for the groups that could not be signalled; a job already gone
    counts as stopped."""
    grace_s = GRACE_S if grace_s is None else grace_s
    jobs, errors = _jobs(groups)
    waiting, errs = _signal_groups(_running(jobs, is_alive, orphans), signal.SIGTERM)
    errors.update(errs)
    left = _wait_gone(waiting, grace_s, poll, is_alive, live)
    _, errs = _signal_groups(left, signal.SIGKILL)
    errors.update(errs)
    # wait (bounded) until the kernel has ended the killed groups' members, so a caller that
    # looks right after sees no live member of a job it was told is stopped
    for pid in _wait_killed({p[0] for k, p in left.items() if k not in errors}, poll, is_alive, live):
        key = next(k for k, p in left.items() if p[0] == pid)
        errors[key] = f"process group {pid} still has live members {KILL_WAIT_S:g} s after SIGKILL"
    return errors
