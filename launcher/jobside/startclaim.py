"""An attempt's start is claimed once: the job side's last line of defence against a
second submission of the same attempt (a watcher that was paused past its claim and
submitted anyway, ``launcher.launching.submit``).

At every start, before any user code, the job script runs
``start-claim --job-dir DIR --attempt N --self ID``: it creates ``DIR/attempt-N.start``
create-only (O_EXCL) holding ID, the scheduler's id of this very job
(``$LAUNCHER_SELF_ID``). The file already holding ID is a restart of the same job (a
Slurm requeue in place): it goes on. Holding another id, this start is a duplicate of an
attempt that already started: it stands down (exit ``EXIT_DUPLICATE``) before running
anything, so a freeze at the worst instant costs a few seconds of an allocation, not a
run. Stdlib only.
"""

from __future__ import annotations

import time
import sys
import errno
import os

EXIT_DUPLICATE = 3  # the same code as a superseded attempt: this start is not the job's
# an element of a sweep run as an array claims its start in this folder of the array's job
# folder (templates/sbatch.sh.j2: element-$SLURM_ARRAY_TASK_ID)
ELEMENT_START_FOLDER = "element-{index}"


def claim_path(job_dir: str, attempt: int) -> str:
    return os.path.join(job_dir, "attempt-%d.start" % int(attempt))


def holder(job_dir: str, attempt: int):
    """The id holding ATTEMPT's start in JOB_DIR, or None (not started yet)."""
    try:
        with open(claim_path(job_dir, attempt)) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def claim_start(job_dir: str, attempt: int, self_id: str) -> tuple:
    """(True, SELF_ID) when this start may run (the claim is new, or already SELF_ID's);
    (False, the holder's id) when another job holds ATTEMPT's start."""
    if not self_id:
        raise ValueError("start-claim: --self is empty (the job's own scheduler id: $LAUNCHER_SELF_ID)")
    path = claim_path(job_dir, attempt)
    os.makedirs(job_dir, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as e:
        if e.errno != errno.EEXIST:
            raise
        for _ in range(50):  # its writer may be between create and write: read until it says who
            held = holder(job_dir, attempt)
            if held:
                return held == self_id, held
            time.sleep(0.1)
        return False, "?"
    try:
        os.write(fd, (self_id + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return True, self_id


COMMAND = "start-claim"
HELP = "claim this attempt's start once (a duplicate submission of it stands down)"


def add_arguments(p) -> None:
    p.add_argument("--job-dir", required=True)
    p.add_argument("--attempt", type=int, required=True)
    p.add_argument("--self", dest="self_id", default=os.environ.get("LAUNCHER_SELF_ID", ""))


def run(a) -> int:

    ok, held = claim_start(a.job_dir, a.attempt, a.self_id)
    if ok:
        return 0
    print("launcher: attempt %d already started as job %s; this start (%s) is a duplicate submission of it and "
          "stands down before running anything" % (a.attempt, held, a.self_id), file=sys.stderr)
    return EXIT_DUPLICATE
