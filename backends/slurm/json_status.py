"""Job status from Slurm's JSON outputs (23.02+): ``scontrol --json show job`` for every job
slurmctld still knows, ``sacct --json`` for finished ones where slurmdbd keeps accounting.

Pure functions over the parsed documents, plus the probe's command. Each record is read into
the same values the text path reads (``states.job_status`` / ``states.run_status``), so both
paths give the same Status. The shapes, by data parser (``meta.plugin.data_parser``; Slurm's
src/plugins/data_parser/v0.0.4x/parsers.c, checked against 24.11.5's real output):

- v0.0.39 (23.02): ``job_state`` is a string (``job_state_string``, as ``JobState=`` prints);
  ``exit_code`` is the raw wait status, ``{set, infinite, number}``; times are plain integers.
- v0.0.40 (23.11), v0.0.41 (24.05), v0.0.42 (24.11): ``job_state`` is a list, the base state
  and then flags (``["PENDING", "REQUEUED"]``, ``["COMPLETED", "COMPLETING"]``); ``exit_code``
  is ``{status: ["ERROR"], return_code: {set, infinite, number}, signal: {id: {...}, name}}``;
  times and most numbers are ``{set, infinite, number}`` (``set: false``: no value).

``scontrol -o show job`` prints the reason as ``state_description`` with blanks made ``_``
when there is one, else ``state_reason``; its state is the first of the flags
``job_state_string`` checks, else the base state: ``reason`` and ``state_name`` do the same.
On 22.05 ``scontrol --json`` does not exist and ``sacct -c`` (jobcomp) ignores ``--json``:
the text path stays (``status_io``).
"""

from __future__ import annotations

import json
import re
from typing import Optional

from launcher.core.status import Status

from launcher_backends.slurm.array import task_ids
from launcher_backends.slurm.states import job_status, native_state, run_status

SINCE = (23, 2, 0)
# a job id no cluster hands out soon (the highest id is 0x3FFFFFF): the probe's answer has no job in it
PROBE_ARGV = ["scontrol", "--json", "show", "job", "67108863"]
LIVE_ARGV = ["scontrol", "--json", "show", "job"]
SACCT_ARGV = ["sacct", "--json", "-X", "-j"]  # + comma-separated ids
# the flags job_state_string prints instead of the base state, in its order
SHOWN_FLAGS = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
               "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING")
FLAGS = frozenset(SHOWN_FLAGS) | {"LAUNCH_FAILED", "RECONFIG_FAIL", "POWER_UP_NODE"}


def number(v) -> Optional[int]:
    """``7`` or ``{"set": true, "infinite": false, "number": 7}`` -> 7; unset or infinite -> None."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return int(v)
    if isinstance(v, dict):
        if v.get("infinite") or v.get("set") is False:
            return None
        return number(v.get("number"))
    return int(v) if isinstance(v, str) and v.isdigit() else None


def state_name(v) -> str:
    """``job_state`` as ``JobState=`` prints it: ``"RUNNING"`` (23.02) or ``["RUNNING", "COMPLETING"]``."""
    if isinstance(v, str):
        return native_state(v)
    states = [s for s in (v or []) if isinstance(s, str)]
    for flag in SHOWN_FLAGS:
        if flag in states:
            return flag
    return next((s for s in states if s not in FLAGS), "")


def wait_status_code(raw: Optional[int]) -> Optional[int]:
    """A raw wait status (23.02's exit_code) -> what the text path reads from ``rc:signal``."""
    if raw is None:
        return None
    sig = raw & 0x7F
    if sig == 0:
        return (raw >> 8) & 0xFF
    return 128 + sig if sig != 0x7F else 0


def exit_code(v) -> Optional[int]:
    """``exit_code`` -> the shell's view: the return code, or 128 + the signal that ended it."""
    if isinstance(v, dict) and ("status" in v or "return_code" in v):
        sig = number((v.get("signal") or {}).get("id"))
        if sig:
            return 128 + sig
        rc = number(v.get("return_code"))
        if rc is not None:
            return rc
        return None if "PENDING" in (v.get("status") or ()) else 0
    return wait_status_code(number(v))


def reason(job: dict) -> str:
    desc = job.get("state_description") or ""
    return re.sub(r"\s", "_", desc) if desc else (job.get("state_reason") or "")


def _time(v) -> Optional[float]:
    t = number(v)
    return float(t) if t else None


def status_from_job(job: dict) -> Status:
    """One record of ``scontrol --json show job``'s ``jobs``."""
    requeue = job.get("requeue")
    return job_status(state_name(job.get("job_state")), reason(job), exit_code(job.get("exit_code")),
                      number(job.get("restart_cnt")) or 0, job.get("nodes") or "", _time(job.get("start_time")),
                      _time(job.get("end_time")),
                      {"comment": job.get("comment") or "", "partition": job.get("partition") or "",
                       "requeue": str(int(requeue)) if isinstance(requeue, bool) else str(requeue or "")})


def scontrol_jobs(doc: dict) -> dict[str, dict]:
    """``scontrol --json show job`` -> {job id: record}, plus every array task under
    ``<array id>_<index>`` (a started task has its own record; the tasks still pending share
    the array's record, whose ``array_task_string`` lists them), as ``array.with_array_tasks``."""
    jobs = {str(j["job_id"]): j for j in doc.get("jobs") or () if isinstance(j, dict) and "job_id" in j}
    out = dict(jobs)
    for j in jobs.values():
        array = number(j.get("array_job_id"))
        if not array:
            continue
        pending, task = j.get("array_task_string") or "", number(j.get("array_task_id"))
        for i in task_ids(pending) if pending else ([task] if task is not None else []):
            out.setdefault(f"{array}_{i}", j)
    return out


def sacct_jobs(doc: dict) -> dict[str, list[dict]]:
    """``sacct --json`` -> {job id: [record per run, as listed]}, array tasks also under ``<array>_<index>``."""
    out: dict[str, list[dict]] = {}
    for j in doc.get("jobs") or ():
        if not isinstance(j, dict) or "job_id" not in j:
            continue
        jid = str(j["job_id"])
        out.setdefault(jid, []).append(j)
        arr = j.get("array") or {}
        array, task = number(arr.get("job_id")), number(arr.get("task_id"))
        if array and task is not None and f"{array}_{task}" != jid:
            out.setdefault(f"{array}_{task}", []).append(j)
    return out


def status_from_sacct_json(records: list[dict]) -> Status:
    """A finished job's accounting records (``sacct --json``), oldest first. Restarts: one per
    record before the last, or the recorded count where slurmdbd keeps one record per job."""
    last = records[-1]
    st, t = last.get("state") or {}, last.get("time") or {}
    restarts = max(len(records) - 1, number(last.get("restart_cnt")) or 0)
    return run_status(state_name(st.get("current")), st.get("reason") or "", exit_code(last.get("exit_code")),
                      last.get("nodes") or "", _time(t.get("start")), _time(t.get("end")), restarts,
                      [state_name((r.get("state") or {}).get("current")) for r in records])


def loads(text: str) -> Optional[dict]:
    """A JSON document with a ``jobs`` list, or None (not JSON: an old Slurm, a noisy shell)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("jobs"), list) else None


def probed_parser(returncode: int, stdout: str) -> str:
    """The probe's answer to PROBE_ARGV: the data parser (``data_parser/v0.0.42``) when
    ``scontrol --json`` answers with jobs JSON, else ``""`` (the text path is used)."""
    doc = loads(stdout) if returncode == 0 else None
    if doc is None:
        return ""
    plugin = (doc.get("meta") or {}).get("plugin") or {}
    return plugin.get("data_parser") or "data_parser/unknown"
