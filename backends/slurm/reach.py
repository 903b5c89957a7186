"""A hung run's processes on their nodes (``ReachesRun``, for ``recovery.hang``): one
``srun --overlap`` step per node inside the job's own allocation signals (or py-spy dumps) the
pids the job side named, each only when its environment says it belongs to the job
(``SLURM_JOB_ID``). Pure: the commands and the reading of their output."""

from __future__ import annotations

from typing import Optional

# for each pid given: belongs to the job (its SLURM_JOB_ID), then signalled; the pids signalled are printed
_SIGNAL = ('j=$1; s=$2; shift 2; for p; do '
           'if tr "\\000" "\\n" < /proc/$p/environ 2>/dev/null | grep -qx "SLURM_JOB_ID=$j"; then '
           'kill -s "$s" "$p" 2>/dev/null && echo "$p"; fi; done')
# py-spy where installed on the node: each pid's dump after a line "@@launcher-pid <pid>"
_SPY = ('j=$1; shift; command -v py-spy >/dev/null 2>&1 || exit 0; for p; do '
        'if tr "\\000" "\\n" < /proc/$p/environ 2>/dev/null | grep -qx "SLURM_JOB_ID=$j"; then '
        'echo "@@launcher-pid $p"; py-spy dump --pid "$p" 2>&1; fi; done')


def by_host(procs) -> dict:
    out: dict = {}
    for host, pid in procs:
        out.setdefault(str(host), []).append(int(pid))
    return out


def job_of(native_id: str) -> Optional[str]:
    """The job id a step can be started in: a plain job's (an array element's name is not one)."""
    return native_id if native_id.isdigit() else None


def step_argv(job: str, host: str, script: str, args) -> list:
    return ["srun", f"--jobid={job}", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={host}", "--quiet",
            "--kill-on-bad-exit=0", "/bin/sh", "-c", script, "sh", *[str(a) for a in args]]


def signal_argv(job: str, host: str, pids, signum: int) -> list:
    return step_argv(job, host, _SIGNAL, [job, int(signum), *pids])


def spy_argv(job: str, host: str, pids) -> list:
    return step_argv(job, host, _SPY, [job, *pids])


def signalled(host: str, out: str) -> list:
    return [(host, int(w)) for w in out.split() if w.isdigit()]


def dumps(host: str, out: str) -> dict:
    """{(host, pid): text} from a py-spy step's output."""
    got: dict = {}
    pid = None
    for line in out.splitlines(keepends=True):
        if line.startswith("@@launcher-pid "):
            pid = int(line.split()[1])
            got[(host, pid)] = ""
        elif pid is not None:
            got[(host, pid)] += line
    return {k: v for k, v in got.items() if v.strip()}

