"""The job-side helper: runs inside the job, on compute nodes where only Python exists.

STDLIB ONLY (plus boto3 for s3:// roots): it imports nothing from ``launcher`` except
``launcher.checkpoint``, so ``stage_zip()`` can ship both as one zipapp and a rendered
script can run ``python3 launcher_job.pyz <command>`` where the launcher is not
installed. Supports Python 3.8+.

    api        save / commit / restore: the checkpoint writer and reader
    env        what the job reads from its environment (root, generation, resume point)
    signals    preemption notices, standing down when superseded
    heartbeat  the liveness record ``launcher report`` reads
    stacks     faulthandler on SIGUSR2: a hung run's stacks, for ``recovery.hang``
    metrics    report(step, **metrics): metrics stored under the root (sweep early stopping)
    cli        the job-side commands (resume-env, latest, wait-commit, gc, stage, ...)
    zipapp     the packer: this package and launcher.checkpoint as one zipapp

Writer API for training programs::

    from launcher.jobside import (save, restore, resume_step, install_preemption_handler,
                                  preemption_requested, EXIT_PREEMPTED)
    install_preemption_handler()             # $LAUNCHER_PREEMPT_SIGNAL, default SIGUSR1
    with restore() as d:                     # None on a fresh start; S3: downloaded copy
        if d: load(d)
    start = resume_step() + 1 ...
    with save(step) as d:                    # a directory to write into (S3: local staging)
        write(d)                             # COMMIT.json only on clean exit
    report(step, loss=loss)                  # finite numbers, under ROOT/.launcher/metrics/
    if preemption_requested():
        sys.exit(EXIT_PREEMPTED)             # 75: checkpointed on notice, restart me

Environment read: LAUNCHER_CKPT_ROOT, LAUNCHER_GENERATION (the generation; without it
LAUNCHER_ATTEMPT stands in), LAUNCHER_RESUME_FROM, LAUNCHER_RESUME_STEP, LAUNCHER_JOB_ID (recorded as "run" in
COMMIT.json), LAUNCHER_PREEMPT_SIGNAL, LAUNCHER_CKPT_SHA256=1 (hash every file at save),
LAUNCHER_STAGING_DIR (where S3 saves and restores are staged, under
launcher-staging-<uid>/<root hash>/; default $TMPDIR), LAUNCHER_HEARTBEAT_SECONDS
(see start_heartbeat; 0 turns the heartbeat off).
"""

from launcher.jobside.api import commit, drain, restarted_in_process, restore, save
from launcher.jobside.cli import main
from launcher.jobside.env import ckpt_root, generation, latest_committed, resume_from, resume_step
from launcher.jobside.heartbeat import start_heartbeat
from launcher.jobside.metrics import report
from launcher.jobside.signals import (EXIT_PREEMPTED, EXIT_SUPERSEDED, clear_preemption, install_preemption_handler,
                      preempt_signals, preemption_requested, stand_down)
from launcher.jobside.zipapp import stage_zip

__all__ = ["EXIT_PREEMPTED", "EXIT_SUPERSEDED", "stand_down", "save", "commit", "drain", "restore", "resume_step",
           "resume_from", "generation", "ckpt_root", "latest_committed", "install_preemption_handler",
           "preemption_requested", "clear_preemption", "preempt_signals", "start_heartbeat", "stage_zip", "main",
           "report", "restarted_in_process"]
