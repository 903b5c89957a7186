"""In-job recovery (``recovery.in_job: {kind: allocation}``): the job script reruns a run step
that failed, in the same allocation, resuming from the nearest committed checkpoint, up to
``max_restarts`` times within ``window`` (docs/in-job-recovery.md).

The job script asks ``in-job-restart`` after every failed step. The decision is pure
(``decide``); the command then starts a new generation (fencing the failed run's writers,
resolving the nearest committed tier) whose GENERATIONS.json and attempt records carry
``in_job``: {"restart": K, "exit": RC, "failed_at": ISO, "previous_generation": G}, which
``launcher status``, the watch's events and ``launcher report`` read back.

Stdlib only (see ``launcher.jobside``).
"""

from __future__ import annotations

import os
import signal
import sys

from launcher.jobside.env import PROG

COMMAND = "in-job-restart"  # its command body is launcher.jobside.cli.cmd_in_job_restart
HELP = "decide whether to rerun a failed step in this allocation; print export lines for eval"

# exit statuses that are never restarted in the job: success, "saved on notice, requeue me"
# (the launcher's contract) and "do not restart" (NVRx's convention)
EXIT_OK, EXIT_REQUEUE, EXIT_NO_RESTART = 0, 75, 93


def parse_history(text):
    """"EPOCH:STEP EPOCH:STEP ..." (the job script's record of this allocation's in-job
    restarts: when, and the step each resumed from) -> [(epoch, step)]; bad words are skipped."""
    out = []
    for word in (text or "").split():
        at, _, step = word.partition(":")
        try:
            out.append((float(at), int(step)))
        except ValueError:
            continue
    return out


def format_history(history) -> str:
    return " ".join("%d:%d" % (int(at), int(step)) for at, step in history)


def decide(rc, history, now, max_restarts, window, committed_step):
    """(restart?, why) for a run step that exited RC at NOW. HISTORY: [(epoch, resume step)] of
    this allocation's earlier in-job restarts; COMMITTED_STEP: the newest committed step (-1:
    none). Gives up on the exits that are never restarted here, after MAX_RESTARTS restarts
    within WINDOW seconds, and when the last two restarts resumed from the same step with no
    newer commit since (a crash loop: the launcher's own no-progress guard, one layer down)."""
    if rc == EXIT_OK:
        return False, "the run completed"
    if rc == EXIT_REQUEUE:
        return False, "the run saved on a notice and asked to be requeued (exit 75)"
    if rc == EXIT_NO_RESTART:
        return False, "the run asked not to be restarted (exit 93)"
    recent = [h for h in history if now - h[0] < window]
    if len(recent) >= max_restarts:
        return False, ("%d in-job restart(s) within the last %s: recovery.in_job.max_restarts allows %d"
                       % (len(recent), _span(window), max_restarts))
    if len(history) >= 2 and history[-1][1] == history[-2][1] and committed_step <= history[-1][1]:
        since = "a fresh start" if history[-1][1] < 0 else "step %d" % history[-1][1]
        return False, "no progress: the last two in-job restarts resumed from %s with no new commit" % since
    return True, "exit %d: in-job restart %d of %d within %s" % (rc, len(recent) + 1, max_restarts, _span(window))


def _span(seconds) -> str:
    s = int(seconds)
    for unit, n in (("h", 3600), ("m", 60)):
        if s >= n and s % n == 0:
            return "%d%s" % (s // n, unit)
    return "%ds" % s


def add_arguments(sp) -> None:
    sp.add_argument("--root", default=None, help="checkpoint ROOT (default: $LAUNCHER_CKPT_ROOT)")
    sp.add_argument("--rc", type=int, required=True, help="the failed step's exit status")
    sp.add_argument("--history", default="", help="this allocation's in-job restarts, EPOCH:STEP ...")
    sp.add_argument("--max-restarts", type=int, required=True)
    sp.add_argument("--window", type=float, required=True, help="seconds")
    sp.add_argument("--rejoin-group", type=int, default=None, metavar="G",
                    help="only replica group G's step failed (torchft): restart it alone in this generation")
    sp.add_argument("--reap-group", action="store_true",
                    help="first kill what is left of the failed run in this process group (the local target)")


def reap_group() -> list:
    """SIGKILL what is left of a failed run in this process group: every member but this
    process and its ancestors (the job script, its supervisor). On the local target the run
    shares the job's process group (so a cancel reaches every run); its leftovers (a rank
    still blocked in a collective) must not live on beside the rerun. Returns the pids."""
    me = os.getpid()
    keep, pid = {me}, me
    while pid > 1:
        pid = _ppid(pid)
        if pid is None:
            break
        keep.add(pid)
    group, killed = os.getpgid(0), []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in keep:
            continue
        fields = _stat(int(name))
        if fields and int(fields[2]) == group and fields[0] != "Z":
            try:
                os.kill(int(name), signal.SIGKILL)
                killed.append(int(name))
            except OSError:
                pass
    if killed:
        print("%s: killed %d process(es) left by the failed run: %s" % (PROG, len(killed), killed), file=sys.stderr)
    return killed


def _stat(pid):
    """/proc/PID/stat's fields after the command name (state, ppid, pgrp, ...), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    return s[s.rfind(")") + 2:].split()


def _ppid(pid):
    fields = _stat(pid)
    return int(fields[1]) if fields else None
