"""What a job's exit status means, in words: "exit 137: killed by SIGKILL (often the
out-of-memory killer)" instead of "exit code 137". Pure; used where backends build a
status reason."""

from __future__ import annotations

import signal
from typing import Optional

EXIT_PREEMPTED = 75  # launcher.jobside.EXIT_PREEMPTED (EX_TEMPFAIL); kept here so this module stays import-light
# "never restart me": NVIDIA Resiliency Extension's convention, on every backend the launcher closes
# the job (no requeue, no resubmission, no in-job restart); launcher.jobside.injob.EXIT_NO_RESTART
EXIT_NO_RESTART = 93

# Exit statuses with a meaning of their own (a shell's, sysexits.h's, or the launcher's contract)
MEANINGS = {
    1: "the program failed (a general error)",
    2: "misuse of a shell builtin or a bad command-line argument",
    3: "the program's own exit status (launcher.jobside also exits 3 when a newer attempt took over "
       "this job's checkpoints)",
    EXIT_PREEMPTED: "checkpointed on a preemption notice and asked to be restarted (EX_TEMPFAIL)",
    EXIT_NO_RESTART: "the program asked never to be restarted (NVRx's convention): the job is closed",
    126: "a command was found but is not executable (permissions, or not a program)",
    127: "command not found (check PATH and the spelling in run:/setup:)",
    255: "exit status out of range (a program returned -1, or ssh lost its connection)",
}

# What a death by a signal usually means for a training job
SIGNAL_NOTES = {
    signal.SIGKILL: "often the out-of-memory killer, or a scheduler enforcing a limit",
    signal.SIGSEGV: "a segmentation fault: a crash in native code",
    signal.SIGTERM: "asked to stop (a cancel, a time limit, or a preemption)",
    signal.SIGINT: "interrupted (Ctrl-C)",
    signal.SIGABRT: "aborted (an assertion or a fatal error in native code)",
    signal.SIGBUS: "a bus error (often a file truncated under a memory map, or /dev/shm full)",
    signal.SIGFPE: "a floating-point exception (e.g. an integer division by zero)",
    signal.SIGHUP: "its terminal or session went away",
    signal.SIGPIPE: "it wrote to a pipe nobody was reading",
    signal.SIGUSR1: "the preemption/time-limit notice signal, not handled by the program",
    signal.SIGUSR2: "SIGUSR2, not handled by the program",
    signal.SIGXCPU: "a CPU-time limit",
}


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def explain(code: Optional[int]) -> str:
    """One phrase for an exit status (a shell's 128+N for a death by signal N)."""
    if code is None:
        return "no exit status recorded"
    if code == 0:
        return "exit 0: success"
    if code in MEANINGS:
        return f"exit {code}: {MEANINGS[code]}"
    if 128 < code < 128 + 65:
        num = code - 128
        note = SIGNAL_NOTES.get(num)
        return f"exit {code}: killed by {signal_name(num)}" + (f" ({note})" if note else "")
    if code < 0:  # Python's subprocess reports a death by signal N as -N
        return explain(128 - code)
    return f"exit {code}: the program's own exit status (see its output)"
