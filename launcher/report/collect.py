"""Gathering a job's history for the report: the state store, the scheduler's per-run
records (where the backend keeps them) and the checkpoint root's attempt records.

Sources, best first, for each attempt:

* submission: ``attempts.submitted`` (state store); a run requeued in place by the
  scheduler (Slurm: same job id, restart count + 1) starts waiting when the previous run
  ended.
* allocation start / end: the backend's per-run history (``Scheduler.run_history``; Slurm:
  accounting, one record per run, its times parsed by the backend), else
  ``attempts.started`` / ``attempts.ended``.
* program start, resume step, save timings, preemption notice:
  ``ROOT/.launcher/attempts/g<G>.json``, matched to attempts by (native id, run) where
  the backend reads them from the record's scheduler variables (``Scheduler.run_of``),
  else by generation number.

Nothing here fails because a source is missing: the report says what it lacked in
``notes``.
"""

from __future__ import annotations

import datetime
import json
import time
from typing import Optional

from launcher.backend.protocols import Handle, Scheduler, can
from launcher.checkpoint import CheckpointError, RootUnavailable, open_store, read_attempt, read_generations
from launcher.checkpoint.tiers import LOCAL
from launcher.jobside.heartbeat import heartbeat_key
from launcher.launching.submission import job_spec
from launcher.recovery.current import job_up_to_date
from launcher.report.accounting import ACTIVE, AttemptIn, History, InJobRun, Save
from launcher.state.bulk import NOTICED
from launcher.backend.context import AppContext
from launcher.state.rows import RESUME_TIER_KEY


def iso_ts(v) -> Optional[float]:
    if not v or not isinstance(v, str):
        return None
    try:
        d = datetime.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None
    if d.tzinfo is None:
        d = d.astimezone()  # naive: this machine's local time
    return d.timestamp()


_UNREAD = "could not read the checkpoint root"


def root_unread(notes: list, root: Optional[str]) -> bool:
    """Whether NOTES already say ROOT could not be read (then nothing else is asked of it: each
    question to a root that stopped answering costs a timeout)."""
    return bool(root) and any(n.startswith(f"{_UNREAD} {root}:") for n in notes)


def read_generation_records(root: Optional[str], job_id: str, notes: list) -> list[dict]:
    """Every ROOT/.launcher/attempts/g<G>.json written by JOB_ID, oldest generation first."""
    if not root:
        return []

    try:
        store = open_store(root)
        gens = read_generations(store)
    except (CheckpointError, OSError) as e:
        notes.append(f"{_UNREAD} {root}: program starts, resumes and save timings unknown: {e}")
        return []
    out = []
    for h in gens.history:
        g = h.get("generation")
        if not isinstance(g, int) or (h.get("job_id") not in (None, job_id)):
            continue
        lost = None  # the root stopped answering: asking for each later record costs a timeout each
        try:
            rec = read_attempt(store, g)
        except RootUnavailable as e:
            lost, rec = e, None
        except Exception as e:  # noqa: BLE001 - a record is advisory
            notes.append(f"attempt record g{g}.json unreadable: {e}")
            rec = None
        rec = dict(rec or {})
        rec["_heartbeat"] = None
        if lost is None:
            try:
                raw, _ = store.read(heartbeat_key(g))
                hb = json.loads(raw.decode("utf-8")) if raw else None
                rec["_heartbeat"] = hb if isinstance(hb, dict) else None
            except RootUnavailable as e:
                lost = e
            except Exception:  # noqa: BLE001 - advisory
                pass
        if lost is not None:
            notes.append(f"{_UNREAD} {root} from generation {g} on: those attempts' program starts and save "
                         f"timings unknown: {lost}")
        rec.setdefault("generation", g)
        rec.setdefault("started", h.get("started"))
        rec.setdefault("resume_step", h.get("resume_step"))
        rec.setdefault("job_id", h.get("job_id"))
        rec["rejoins"] = [r for r in h.get("rejoins") or [] if isinstance(r, dict)]  # torchft groups restarted alone
        if rec.get("job_id") in (None, job_id):
            out.append(rec)
        if lost is not None:
            break
    return out


def _run_readers(app: AppContext, rows) -> list:
    """``run_of`` of the backends (``Scheduler``) of the targets ROWS ran on."""
    readers = []
    for target in dict.fromkeys(a.target for a in rows if a.target):
        try:
            cls = app.registry.load_class(app.config.raw_target(target)["backend"])
        except Exception:  # noqa: BLE001 - the config may have changed since: matched by generation
            continue
        if can(cls, Scheduler) and cls.run_of not in readers:
            readers.append(cls.run_of)
    return readers


def _run_of(readers, rec) -> Optional[tuple]:
    sch = rec.get("scheduler")
    if not isinstance(sch, dict) or not sch:
        return None
    for read in readers:
        try:
            got = read(sch)
        except Exception:  # noqa: BLE001 - a record is advisory
            got = None
        if got is not None:
            return got
    return None


def _match(attempts, records, readers=()) -> dict:
    """{attempt number: generation record}. READERS: the backends' ``run_of``."""
    by_native: dict = {}
    for a in attempts:
        if a.native_id:
            by_native.setdefault(a.native_id, []).append(a.attempt)
    out: dict = {}
    left = []
    for rec in records:
        ran = _run_of(readers, rec)
        nums = by_native.get(str(ran[0])) if ran else None
        if nums:
            n = min(nums) + ran[1]
            if n in nums:
                if n not in out or (out[n].get("generation") or 0) < (rec.get("generation") or 0):
                    out[n] = rec
                continue
        left.append(rec)
    known = {a.attempt for a in attempts}
    rest = []
    for rec in left:
        g = rec.get("generation")
        if g in known and g not in out:
            out[g] = rec
        else:
            rest.append(rec)
    free = [a.attempt for a in attempts if a.attempt not in out and (a.started is not None)]
    for n, rec in zip(free, rest):
        out[n] = rec
    return out


def _num(x) -> Optional[float]:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _saves(rec) -> list:
    out = []
    for s in rec.get("saves") or []:
        a, b = iso_ts(s.get("start")), iso_ts(s.get("end"))
        if a is None or b is None or not isinstance(s.get("step"), int):
            continue
        tier = s.get("tier") if s.get("tier") == LOCAL else ""
        if tier and _num(s.get("seconds")) is not None:
            b = a + _num(s["seconds"])  # the time training was blocked (drain: sync drains before it goes on)
        out.append(Save(a, b, s["step"], bool(s.get("committed")), bool(s.get("preempt")), tier,
                        _num(s.get("drain_seconds"))))
    return out


def price_per_hour(app: AppContext, target: str, spec) -> tuple[Optional[float], str, int]:
    """($/h of one allocation, where the price came from, GPUs) from the target's gpu_hour_usd."""
    gpus = spec.resources.nodes * spec.resources.gpus_per_node if spec is not None else 0
    try:
        t = app.target(target)
        gpu_hour = t.opt("gpu_hour_usd")
        if gpu_hour is None:
            gpu_hour = (t.raw or {}).get("gpu_hour_usd")
    except Exception:  # noqa: BLE001 - the config may have changed since
        return None, "", gpus
    if gpu_hour is None or not gpus:
        return None, "", gpus
    return float(gpu_hour) * gpus, f"{target} gpu_hour_usd {float(gpu_hour):g} x {gpus} GPU(s)", gpus


def collect(app: AppContext, job: str, refresh: bool = True, now: Optional[float] = None,
            history: Optional[bool] = None, specs: Optional[dict] = None, records: Optional[list] = None):
    """(History, JobRow, notes) for JOB (a job id or unique prefix). HISTORY: ask the scheduler
    for its per-run records (default: when refreshing). SPECS: parsed specs by their stored
    text, shared by the calls for many jobs of one spec (a sweep's elements). RECORDS: the
    job's attempt records, when the caller read its root already (under a time bound)."""
    store = app.store
    notes: list = []
    row = store.get_job(job)
    if refresh:  # exactly as `launcher status JOB` does (launcher.recovery.current)
        row = _refreshed(app, row, notes)
    rows = store.attempts(row.job_id)
    spec = _stored_spec(row, notes, {} if specs is None else specs)
    # per-run scheduler records (Slurm requeues keep one job id for several runs)
    runs = _run_histories(app, rows, notes) if (refresh if history is None else history) else {}
    if records is None:  # (a root the refresh could not read is not asked again: one timeout, one note)
        records = [] if root_unread(notes, row.ckpt_root) else read_generation_records(row.ckpt_root, row.job_id, notes)
    attempts = _attempts_in(app, rows, runs, _match(rows, records, _run_readers(app, rows)), spec,
                            noticed_ends(store.events(row.job_id)), records)
    if row.ckpt_root and not records and not any(n.startswith(_UNREAD) for n in notes):
        notes.append(f"no attempt records of {row.job_id} under {row.ckpt_root}: program starts and save timings "
                     f"unknown")
    gpus = spec.resources.nodes * spec.resources.gpus_per_node if spec is not None else 0
    t0 = rows[0].submitted if rows else row.created
    hist = History(job_id=row.job_id, t0=t0, now=now if now is not None else time.time(), attempts=attempts,
                   jobside=bool(records), gpus=gpus,
                   planned_interval_s=(spec.checkpoint.interval if spec is not None else None))
    return hist, row, notes


def _refreshed(app: AppContext, row, notes: list):
    """The job's row brought up to date as `status` brings it (a failure becomes a note)."""
    unread = f"warning: cannot read checkpoints under {row.ckpt_root}: "

    def say(line: str) -> None:  # the refresh's failed read of the root is the report's one note about it
        if row.ckpt_root and line.startswith(unread):
            line = f"{_UNREAD} {row.ckpt_root}: program starts, resumes and save timings unknown: {line[len(unread):]}"
        notes.append(line)

    try:
        return job_up_to_date(app, row, say)
    except Exception as e:  # noqa: BLE001 - report from what is stored
        notes.append(f"could not refresh the job's status: {e}")
        return app.store.get_job(row.job_id)


def _stored_spec(row, notes: list, specs: dict):
    key = (row.spec_yaml, row.spec_path, row.meta.get("spec_base"))
    if key not in specs:
        try:
            specs[key] = job_spec(row)
        except Exception as e:  # noqa: BLE001
            specs[key] = e
    spec = specs[key]
    if isinstance(spec, Exception):
        notes.append(f"the stored spec does not parse any more: {spec}")
        return None
    return spec


def _run_histories(app: AppContext, rows, notes: list) -> dict:
    """{native id: the scheduler's runs of it} from backends that keep a run history."""
    runs: dict = {}
    for nid in dict.fromkeys(a.native_id for a in rows if a.native_id):
        a0 = next(a for a in rows if a.native_id == nid)
        try:
            backend = app.backend(a0.target)
            if can(backend, Scheduler) and a0.handle:
                runs[nid] = backend.run_history(Handle.from_json(a0.handle)) or []
        except Exception as e:  # noqa: BLE001
            notes.append(f"no per-run history for {a0.target} id {nid}: {e}")
    return runs


def noticed_ends(events: list) -> dict:
    """{attempt: when the launcher first recorded its end} from the job's ``attempt_ended`` events."""
    out: dict = {}
    for e in events:
        n = e.get("attempt")
        if e.get("kind") == NOTICED and isinstance(n, int) and isinstance(e.get("ts"), (int, float)):
            out[n] = min(out.get(n, e["ts"]), e["ts"])
    return out


def in_job_chain(rec: Optional[dict], records: list) -> list:
    """The runs of one attempt, oldest first: REC's generation with the in-job reruns before and
    after it (recovery.in_job: each names the generation it restarted); [{}] without REC."""
    if not rec:
        return [{}]
    by_gen = {r.get("generation"): r for r in records}
    after = {(r.get("in_job") or {}).get("previous_generation"): r for r in records
             if isinstance(r.get("in_job"), dict)}
    chain = [rec]
    while isinstance(chain[0].get("in_job"), dict) and len(chain) <= len(records):
        prev = by_gen.get(chain[0]["in_job"].get("previous_generation"))
        if prev is None or prev in chain:
            break
        chain.insert(0, prev)
    while chain[-1].get("generation") in after and len(chain) <= len(records):
        nxt = after[chain[-1].get("generation")]
        if nxt in chain:
            break
        chain.append(nxt)
    return chain


def _in_job_runs(chain: list) -> list:
    """The runs of CHAIN that failed and were rerun in the job, as the accounting takes them."""
    out = []
    for r, nxt in zip(chain, chain[1:]):
        failed, restarted = iso_ts(nxt["in_job"].get("failed_at")), iso_ts(nxt.get("started"))
        if failed is None or restarted is None:
            continue
        step = nxt.get("resume_step")
        out.append(InJobRun(failed, restarted, step if isinstance(step, int) else None, _saves(r),
                            restored_at=iso_ts((nxt.get("restored") or {}).get("at"))))
    return out


def _attempts_in(app: AppContext, rows, runs: dict, matched: dict, spec, noticed: dict, records: list = ()) -> list:
    """One AttemptIn per stored attempt: the scheduler's run times, the job-side record (its first
    run's and, with in-job reruns, each later run's: ``in_job_chain``), the price, when the
    launcher noticed its end (NOTICED: ``noticed_ends``)."""
    prices: dict = {}
    attempts = []
    prev_native, prev_end = None, None
    index_in_native: dict = {}
    for a in rows:
        k = index_in_native.get(a.native_id, 0)
        index_in_native[a.native_id] = k + 1
        run = runs.get(a.native_id) or []
        run = run[k] if k < len(run) else {}
        runs_in_job = in_job_chain(matched.get(a.attempt), records)
        first, rec = runs_in_job[0], runs_in_job[-1]  # the attempt's first run, and its last (in-job reruns)
        program_start = iso_ts(first.get("started"))
        started = _num(run.get("start")) or a.started
        ended = _num(run.get("end")) or a.ended
        if a is rows[-1] and a.state in ACTIVE and not run.get("end"):
            ended = None  # still pending or running
        queued = a.submitted
        if k > 0 and a.native_id == prev_native:
            # requeued in place: it waits again from the end of the previous run (when known;
            # else the row was written when the launcher noticed, later than the requeue)
            queued = prev_end if prev_end is not None else min(
                x for x in (a.submitted, started, program_start) if x is not None)
        if a.target not in prices:
            prices[a.target] = price_per_hour(app, a.target, spec)
        pph, psrc = _attempt_price(a, prices[a.target])
        hb = rec.get("_heartbeat") or {}
        attempts.append(AttemptIn(
            attempt=a.attempt, state=a.state, queued=queued, started=started, ended=ended,
            program_start=program_start, saves=_saves(rec), in_job=_in_job_runs(runs_in_job),
            group_restarts=sum(len(r.get("rejoins") or []) for r in runs_in_job),
            resume_step=first.get("resume_step") if first else None, generation=rec.get("generation"),
            # the tier its checkpoint came from: its generation's record's, else as the store copied it
            resume_tier=(first.get("resume_tier") if first else None) or (a.meta or {}).get(RESUME_TIER_KEY),
            host=(rec.get("node") or {}).get("hostname") or rec.get("host"), target=a.target,
            native_id=a.native_id, heartbeat=iso_ts(hb.get("at")), heartbeat_interval=_num(hb.get("interval")),
            cost_usd=a.cost_usd, price_per_hour=pph, price_source=psrc,
            preempt_notice=iso_ts(rec.get("preempt_signal_at")), noticed=noticed.get(a.attempt),
            # the restore after the launcher's interruption is the first run's (an in-job rerun's is not)
            restored_at=iso_ts((first.get("restored") or {}).get("at"))))
        prev_native, prev_end = a.native_id, ended
    return attempts


def _attempt_price(a, target_price: tuple) -> tuple:
    """($/h, its source): the backend's figure recorded at submit wins over the target's price."""
    pph, psrc, _ = target_price
    try:
        hourly = json.loads(a.handle or "{}").get("extra", {}).get("hourly_usd")
    except ValueError:
        hourly = None
    if isinstance(hourly, (int, float)) and hourly > 0:
        pph, psrc = float(hourly), f"{a.target}: ${float(hourly):g}/h recorded at submit"
    return pph, psrc
