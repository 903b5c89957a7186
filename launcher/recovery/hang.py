"""A watch pass's part in ``recovery.hang``: find a running job that reported no step for too
long (the decision is ``launcher.recovery.hangs``, pure), collect its stacks, then end the hung
run so that recovery takes over (docs/in-job-recovery.md#hangs).

In order, under the job's claim:
1. stacks: ``py-spy dump`` of each process of the run where py-spy is installed, otherwise the
   job side's ``faulthandler`` (SIGUSR2, ``launcher.jobside.stacks``); both stored in the job
   folder, ``stacks/attempt-<A>-g<G>/``;
2. the attempt's meta (``hang``) and the event ``hang_detected`` (the age of the last step, the
   limit, where the stacks are), written before anything is killed, so that the attempt's end is
   decided as a HANG (``recovery.hang_restarts``) whoever sees it first;
3. SIGKILL to the run's processes: with ``recovery.in_job`` the job script reruns the step in its
   allocation, otherwise the attempt fails and the launcher resubmits it;
4. when none of them could be killed, the attempt is cancelled through its backend instead (the
   scheduler's cancel ends the processes) and recovered as for a hang: a resubmission on
   ``recovery.hang_restarts``, never an in-job rerun (the allocation is gone). The attempt is then
   recorded ``cancelled``, not ``killed``, with why nothing was killed and why no stack was taken.

The run's processes are the ones that registered a stack file under the checkpoint root; a backend
reaches them when it is a ``ReachesRun`` (``local``: directly; Slurm: a step in the job's own
allocation). None is known under an s3:// root, with ``recovery.signal: USR2``, or when the program
never loaded the job-side helper; a backend that is no ``ReachesRun`` (SkyPilot) reaches none:
those hangs are ended by the cancel of step 4.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from launcher.backend.protocols import Handle, ReachesRun, can
from launcher.checkpoint import CheckpointError, open_store, read_generations
from launcher.checkpoint.metrics import MAX_METRICS_BYTES, metrics_key
from launcher.core.errors import LauncherError
from launcher.core.status import JobState, Status
from launcher.recovery import hangs
from launcher.recovery.outcome import Outcome
from launcher.state.claims import claimed
from launcher.state.rows import HANG_CANCEL_KEY
from launcher.backend.context import AppContext

STACK_WAIT_S = 5.0  # how long the faulthandler dumps may take to appear
STACK_SIGNAL = signal.SIGUSR2  # launcher.jobside.stacks.STACK_SIGNAL


def step(app: AppContext, job, spec, status, clock=time.time) -> Optional[Outcome]:
    """One hang check of one open job in a watch pass: an Outcome when it was found hung (and
    acted on), else None (the ordinary recovery applies)."""
    setting = spec.recovery.hang
    if setting is None or not job.ckpt_root or not isinstance(status, Status) or status.state is not JobState.RUNNING:
        return None
    latest = app.store.latest_attempt(job.job_id)
    if latest is None or not latest.handle:
        return None
    run = read_run(job.ckpt_root, job.job_id, latest.attempt)
    if run is None:
        return None
    gen, reports, files = run
    if hangs.already_acted(latest.meta, gen):
        return None
    hang = hangs.judge(setting, gen, reports, clock())
    if hang is None:
        return None
    return act(app, job, spec, hang, files, clock)


def read_run(root: str, job_id: str, attempt: int) -> Optional[tuple]:
    """(generation, its step reports [(step, at)], its stack files [(host, pid)]) of the attempt's
    newest run under ROOT; None when it has not started, or the root cannot be read (a hang is
    never concluded from a read that failed)."""
    try:
        store = open_store(root)
        gen = hangs.current_generation(job_id, attempt, read_generations(store).history)
        if gen is None:
            return None
        raw, _ = store.read(metrics_key(gen), limit=MAX_METRICS_BYTES)
        files = hangs.stack_files(store.list_tree(hangs.stacks_key(gen))) if store.is_local else []
    except (CheckpointError, OSError):
        return None
    return gen, hangs.report_times(raw or b""), files


def act(app: AppContext, job, spec, hang: hangs.Hang, files: list, clock=time.time) -> Optional[Outcome]:
    """Collect the hung run's stacks, record the hang, end the run (see the module)."""
    store = app.store
    with claimed(store, job.job_id, wait=False) as c:
        if c is None:
            return Outcome(job.job_id, "claimed", "another watcher is deciding on it")
        latest = store.latest_attempt(job.job_id)
        if latest is None or hangs.already_acted(latest.meta, hang.generation):
            return None
        backend = app.backend(latest.target)
        handle = Handle.from_json(latest.handle)
        reach = can(backend, ReachesRun)
        procs = list(files)
        pids = [f"{h}:{p}" for h, p in procs]
        prev = (latest.meta or {}).get(hangs.HANG_META) or {}
        recorded = prev.get("generation") == hang.generation  # not ended at an earlier pass: its cancel failed
        if not reach:
            unknown = f"the {latest.target} target's backend cannot reach the run's processes"
        elif not procs:
            unknown = hangs.no_process_reason(job.ckpt_root, spec.recovery.signal)
        else:
            unknown = ""
        dest = Path(store.job_dir(job.job_id)) / "stacks" / f"attempt-{latest.attempt}-g{hang.generation}"
        how = collect_stacks(backend, handle, job.ckpt_root, hang.generation, procs, dest) if not unknown else "none"
        stacks = str(dest) if how != "none" else ""
        no_stacks = unknown or ("" if stacks else f"none of its processes ({', '.join(pids)}) gave a dump: py-spy "
                                f"is not on the watcher's PATH, and no faulthandler dump came within {STACK_WAIT_S:.0f}s")
        said = f"no step for {hang.age_s:.0f}s after step {hang.step} (limit {hang.limit_s:.0f}s); stacks: " \
               f"{stacks or 'none'}"
        seen = _Seen(hang, stacks, how, pids, no_stacks)
        if not unknown:  # kill the run's processes: the attempt's end (or the in-job rerun) is the hang's
            in_job = spec.recovery.in_job is not None
            meta = seen.meta(latest.meta, clock(), in_job=in_job)
            detail = seen.detail(latest.attempt, in_job=in_job)
            store.write_progress(job.job_id, None, ((latest.attempt, {"meta": meta}),),
                                 () if recorded else ((hangs.EVENT, detail),))
            if backend.signal_run(handle, procs, signal.SIGKILL):
                return Outcome(job.job_id, "hang", f"{said}; {detail['recovery']}")
            unknown, recorded = f"none of its processes ({', '.join(pids)}) could be killed: gone, or not the run's", True
        return _cancel(app, job, c.job, latest, backend, handle, seen, unknown, said, clock, recorded)


@dataclass(frozen=True)
class _Seen:
    """What one pass found of a hung run: the HANG, where its stacks are (STACKS, collected HOW), its
    processes (PIDS), and why no stack was taken (NO_STACKS); the attempt's meta and the event say it."""

    hang: hangs.Hang
    stacks: str
    how: str
    pids: list
    no_stacks: str

    def meta(self, base: Optional[dict], now: float, in_job: bool = False, **ended) -> dict:
        return hangs.meta_after(base, self.hang, in_job=in_job, stacks=self.stacks, how=self.how, now=now,
                                no_stacks=self.no_stacks, **ended)

    def detail(self, attempt: int, in_job: bool = False, **ended) -> dict:
        return hangs.event_detail(attempt, self.hang, in_job=in_job, stacks=self.stacks, how=self.how,
                                  pids=self.pids, no_stacks=self.no_stacks, **ended)


def _cancel(app: AppContext, job, row, latest, backend, handle: Handle, seen: _Seen, not_killed: str, said: str,
            clock, recorded: bool) -> Outcome:
    """Under the job's claim: no process of the hung run could be killed (NOT_KILLED says why), so
    the attempt is cancelled through its backend (the scheduler's cancel ends its processes) and
    recovered as for a hang: the attempt is marked cancelled for the hang, and the job marked to
    stay open when that cancel shows (``launcher.state.rows.HANG_CANCEL_KEY``), both before the
    cancel, so whoever reads its end decides a HANG (``recovery.hang_restarts``). A cancel that
    fails leaves the hang not ended, and the next pass tries again. RECORDED: the hang's event is
    written already (by the kill that found nothing, or by the pass whose cancel failed)."""
    store = app.store
    hang = seen.hang
    meta = seen.meta(latest.meta, clock(), ended=hangs.CANCEL, not_killed=not_killed)
    detail = seen.detail(latest.attempt, ended=hangs.CANCEL, not_killed=not_killed)
    events = () if recorded else ((hangs.EVENT, detail),)
    store.patch_meta(job.job_id, **{HANG_CANCEL_KEY: {"attempt": latest.attempt, "handle": row.handle}})
    store.write_progress(job.job_id, None, ((latest.attempt, {"meta": meta}),), events)
    try:
        backend.cancel(handle)
    except LauncherError as e:
        meta = seen.meta(latest.meta, clock(), ended="", not_killed=f"{not_killed}; its cancel failed: {e}")
        store.patch_meta(job.job_id, **{HANG_CANCEL_KEY: None})
        store.write_progress(job.job_id, None, ((latest.attempt, {"meta": meta}),),
                             ((hangs.CANCEL_FAILED_EVENT, {"attempt": latest.attempt, "generation": hang.generation,
                                                           "error": str(e)}),))
        return Outcome(job.job_id, "hang", f"{said}; {not_killed}; its cancel failed ({e}): tried again at the "
                                           "next pass")
    store.record_event(job.job_id, hangs.CANCEL_EVENT, attempt=latest.attempt, generation=hang.generation,
                       native_id=latest.native_id, why=not_killed)
    return Outcome(job.job_id, "hang", f"{said}; {detail['recovery']}")


def collect_stacks(backend, handle: Handle, root: str, generation: int, procs: list, dest: Path) -> str:
    """Dump the stacks of PROCS ((host, pid)) into DEST: py-spy where the backend has it, otherwise
    the job side's faulthandler (asked by STACK_SIGNAL, read from the root). Which way it went:
    "py-spy", "faulthandler", "py-spy+faulthandler", or "none"."""
    dest.mkdir(parents=True, exist_ok=True)
    ways = []
    spied = backend.dump_stacks(handle, procs)
    for (host, pid), text in spied.items():
        (dest / f"{host}.{pid}.py-spy.txt").write_text(text)
    if spied:
        ways.append("py-spy")
    asked = backend.signal_run(handle, [p for p in procs if tuple(p) not in spied], STACK_SIGNAL)
    if asked:
        store = open_store(root)
        keys = {(h, p): f"{hangs.stacks_key(generation)}/{h}.{p}.txt" for h, p in asked}
        got: dict = {}
        deadline = time.monotonic() + STACK_WAIT_S
        while len(got) < len(keys) and time.monotonic() < deadline:
            for proc, key in keys.items():
                raw, _ = store.read(key)
                if raw and proc not in got:
                    got[proc] = raw
            if len(got) < len(keys):
                time.sleep(0.1)
        time.sleep(0.2)  # a dump under way finishes writing (faulthandler writes it in one go)
        got = {}
        for (host, pid), key in keys.items():
            raw, _ = store.read(key)
            if raw:
                (dest / f"{host}.{pid}.faulthandler.txt").write_bytes(raw)
                got[(host, pid)] = raw
        if got:
            ways.append("faulthandler")
    if not ways:
        try:
            dest.rmdir()
        except OSError:
            pass
        return "none"
    return "+".join(ways)
