"""The Slurm status path: one call for every handle, JSON first where the probe found it.

Jobs slurmctld still knows: for ONE job, ``scontrol --json show job ID`` (Slurm >= 23.02
whose JSON the probe read: the ``json_status`` fact); for several, and whenever the JSON
answer cannot be read, ``scontrol -o show job``. ``scontrol show job`` takes one id at most,
so a batch reads every job on the cluster, and the JSON of a job is ~8x its text (8.8 KB
against 1.1 KB measured on 24.11): a batch in JSON would cost ~88 MB per poll on a cluster
holding 10,000 jobs, so batches stay one text call. The rest: ``sacct --json`` where slurmdbd keeps accounting, else
``sacct -P``, else the jobcomp records (``sacct -c``, text only: it ignores ``--json``).
Every Status says in ``extra["source"]`` which command it came from.
"""

from __future__ import annotations

import dataclasses

from launcher.core.errors import TransientError
from launcher.core.status import JobState, Status

from launcher_backends.slurm import json_status
from launcher_backends.slurm.array import with_array_tasks
from launcher_backends.slurm.states import SACCT_FIELDS, parse_sacct, parse_scontrol_oneliners, status_from_sacct, status_from_scontrol

GONE = "job no longer known to Slurm (past MinJobAge and no accounting record)"


def statuses(run, where: str, ids: list, json_parser: str = "") -> dict:
    """{native id: Status} for IDS (ids Slurm no longer knows are UNKNOWN). RUN runs an argv
    (``check=False``) on the cluster; WHERE names the cluster in errors."""
    found = live_statuses(run, where, ids, json_parser)
    missing = [i for i in ids if i not in found]
    if missing:
        found.update(past_statuses(run, missing, json_parser))
    return {i: found.get(i) or Status(JobState.UNKNOWN, "", GONE) for i in ids}


def _sourced(st: Status, source: str) -> Status:
    return dataclasses.replace(st, extra={**st.extra, "source": source})


def live_statuses(run, where: str, ids: list, json_parser: str = "") -> dict:
    if json_parser and len(ids) == 1:
        r = run(json_status.LIVE_ARGV + list(ids), check=False)
        doc = json_status.loads(r.stdout) if r.returncode == 0 else None
        if doc is not None:
            jobs = json_status.scontrol_jobs(doc)
            return {i: _sourced(json_status.status_from_job(jobs[i]), "scontrol --json") for i in ids if i in jobs}
    r = run(["scontrol", "-o", "show", "job"], check=False)
    if r.returncode != 0 and "Invalid job id" not in r.stderr:
        raise TransientError(f"scontrol show job failed on {where}: {r.stderr.strip()}")
    live = with_array_tasks(parse_scontrol_oneliners(r.stdout))  # sweep elements: <array>_<index>
    return {i: _sourced(status_from_scontrol(live[i]), "scontrol -o") for i in ids if i in live}


def past_statuses(run, ids: list, json_parser: str = "") -> dict:
    """Finished jobs: slurmdbd accounting when there is one, else the jobcomp records."""
    disabled = False
    if json_parser:
        r = run(json_status.SACCT_ARGV + [",".join(ids)], check=False)
        doc = json_status.loads(r.stdout) if r.returncode == 0 else None
        if doc is not None:
            past = json_status.sacct_jobs(doc)
            return {i: _sourced(json_status.status_from_sacct_json(past[i]), "sacct --json") for i in ids if i in past}
        disabled = "accounting storage is disabled" in (r.stderr + r.stdout).lower()
    records, source = history(run, ids, disabled)
    return {i: _sourced(status_from_sacct(records[i]), source) for i in ids if i in records}


def history(run, ids: list, disabled: bool = False) -> tuple[dict, str]:
    """({job id: [sacct -P record per run]}, the command): slurmdbd's accounting, else (when
    it is disabled) the jobcomp records (``sacct -c``: one record per run, so a requeued
    job shows each run); ({}, "") when neither answers."""
    r = None
    if not disabled:
        r = run(["sacct", "-n", "-P", "-X", "-j", ",".join(ids), "-o", SACCT_FIELDS], check=False)
        disabled = r.returncode != 0 and "accounting storage is disabled" in (r.stderr + r.stdout).lower()
    source = "sacct"
    if disabled:
        r, source = run(["sacct", "-c", "-n", "-P", "-j", ",".join(ids), "-o", SACCT_FIELDS], check=False), "sacct -c"
    if r is None or r.returncode != 0:
        return {}, ""
    return parse_sacct(r.stdout), source
