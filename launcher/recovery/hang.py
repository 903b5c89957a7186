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
   allocation, otherwise the attempt fails and the launcher resubmits it.

The run's processes are the ones that registered a stack file under the checkpoint root; a backend
reaches them when it is a ``ReachesRun`` (``local``: directly; Slurm: a step in the job's own
allocation). On the others the hang is recorded and reported, and nothing is killed.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Optional

from launcher.backend.protocols import Handle, ReachesRun, can
from launcher.checkpoint import CheckpointError, open_store, read_generations
from launcher.checkpoint.metrics import MAX_METRICS_BYTES, metrics_key
from launcher.core.status import JobState, Status
from launcher.recovery import hangs
from launcher.recovery.outcome import Outcome
from launcher.state.claims import claimed
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
        dest = Path(store.job_dir(job.job_id)) / "stacks" / f"attempt-{latest.attempt}-g{hang.generation}"
        how = collect_stacks(backend, handle, job.ckpt_root, hang.generation, procs, dest) if reach else "none"
        stacks = str(dest) if how != "none" else ""
        in_job = spec.recovery.in_job is not None and reach
        now = clock()
        meta = hangs.meta_after(latest.meta, hang, in_job=in_job, stacks=stacks, how=how, now=now)
        if not reach:
            meta[hangs.HANG_META]["killed"] = False
        detail = hangs.event_detail(latest.attempt, hang, in_job=in_job, stacks=stacks, how=how, pids=[f"{h}:{p}" for h, p in procs])
        if not reach:
            detail["recovery"] = f"none: the {latest.target} target's backend cannot reach the run's processes"
        store.write_progress(job.job_id, None, ((latest.attempt, {"meta": meta}),), ((hangs.EVENT, detail),))
        killed = backend.signal_run(handle, procs, signal.SIGKILL) if reach else []
    what = detail["recovery"] if killed or not reach else "no process of the run found to end"
    return Outcome(job.job_id, "hang", f"no step for {hang.age_s:.0f}s after step {hang.step} (limit "
                                       f"{hang.limit_s:.0f}s); stacks: {stacks or 'none'}; {what}")


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
