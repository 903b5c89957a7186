"""A fleet of watchers over many jobs (issue 29 item 7): the BASELINE of today's `launcher watch`.

    .venv/bin/python bench/fleet.py --jobs N --targets T --watchers W[,W...] [--url postgresql://...]
        [--status-latency-ms L] [--submit-latency-ms M] [--churn F [--churn-once]] [--passes P] [--interval S] [--seed X]
        [--slope] --json

N open jobs, spread round robin over T targets of a scheduler stand-in (``bench/fleet_plugin``: a
backend registered through the ``launcher.backends`` entry-point group like any plugin, its
scheduler a SQLite file every process of the run shares; a batched status call answers after L
ms, a call about one job, a submission or the lookup of its dedupe token, after M ms: 0 unless
given). For each watcher count W: a fresh store (SQLite under a fresh home; with --url, a fresh
database on that PostgreSQL server) with the N jobs RUNNING, then W watcher processes at once,
each running P passes of the real watch pass (``Launcher.watch()``: what `launcher watch --once`
runs; a pass starts every S seconds, as in the loop of `launcher watch`). Meanwhile,
every S seconds (the scheduler's own clock: when a pass takes longer than S, more than F of the
jobs change between two passes of a watcher), the bench's driver changes the state of a
fraction F of the running jobs in the scheduler: half end (COMPLETED), half are preempted
(PREEMPTED: the watchers resubmit them). When the watchers are done, one more pass settles
what the last churn did, then the scheduler and the store are compared.

One JSON line per watcher count (``--json``; without it, the same figures as a table):

- ``pass_s_p50``, ``pass_cpu_s_p50``: wall and CPU (the watcher process's) of one pass, median
  over every pass of every watcher; ``standin_cpu_s_per_pass``: of that, the stand-in's own CPU
  in its status calls (reading its file), on average per pass;
- ``observe_gap_s_p99``: per job, the longest time it went unobserved (no status call answered
  for it) between the watchers' start and their end (or until the call that saw it COMPLETED),
  the first stretch included; the 99th percentile over the jobs (``observe_gap_s_max``: the
  longest of all);
- ``status_calls_per_target_per_tick``: status calls made during the passes / (T x P): a tick is
  one pass of the fleet (every watcher's k-th pass), and today each watcher makes one call per
  target per pass;
- ``claims_per_s``: job claims taken (by every watcher) per second of the run; with
  ``--churn-once`` (F of the jobs change once, before the watchers start), per second from the
  start to the last claim taken: how fast W watchers drain one burst of work;
- ``double_submits``: scheduler jobs beyond the first carrying the same dedupe token (job,
  attempt);
- ``lost``: jobs whose end the store disagrees with after the settling pass: preempted and not
  resubmitted, closed other than COMPLETED, COMPLETED in the scheduler but open in the store,
  or tracking another scheduler job than the live one. Not lost: a job the recovery policy gave
  up on because two restarts in a row resumed from nothing (the stand-in's jobs commit no
  checkpoint; a job preempted three times by the churn meets that guard), counted as
  ``gave_up``.

``--slope``: also the CPU a pass spends per UNCHANGED job: one watcher, no churn, at N/2 and N
jobs; the slope of the pass CPU (p50) between the two, in microseconds per job, with and without
the stand-in's own CPU, as one more JSON line (``"slope": true``).
Printed, never asserted (bench/: figures, not tests). Targets the control plane must later meet:
<= 50 us CPU per unchanged job, observe_gap_s_p99 <= 30 s with 3 watchers, exactly 1 status
call per target per tick (docs/benchmarks.md, "Fleet (issue 29 baseline)").
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterable, Optional
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "bench" / "fleet_plugin"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _stand_in():
    """bench/fleet_plugin/fleet_backend.py, loaded from its file: its folder goes on the
    watchers' PYTHONPATH only, never on this process's sys.path, where its .dist-info would add
    the stand-in to every backend listing of an importer (a test session)."""
    spec = importlib.util.spec_from_file_location("fleet_backend", PLUGIN / "fleet_backend.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fb = _stand_in()

KEYS = ("watchers", "jobs", "targets", "pass_s_p50", "pass_cpu_s_p50", "observe_gap_s_p99",
        "status_calls_per_target_per_tick", "claims_per_s", "double_submits", "lost")
SPEC = "name: fleet\nrun: 'true'\nrecovery: {preemption: 1000}\n"
ENDED_OK = "COMPLETED"
LIVE = ("PENDING", "RUNNING")


# ---- the pure pieces (tests/unit/test_fleet_bench.py)
def percentile(values: Iterable[float], q: float) -> Optional[float]:
    """The Q-th percentile (0..100) of VALUES, linear between the closest ranks (numpy's
    default); None for no values."""
    xs = sorted(float(v) for v in values)
    if not xs:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is not in 0..100")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def max_gaps(seen: dict, jobs: Iterable[str], start: float, end: float, done: Optional[dict] = None) -> dict:
    """{job: the longest time it went unobserved} within [START, END]. SEEN: {job: times it was
    observed}; DONE: {job: when it stopped needing observation (it ended COMPLETED)}: once an
    observation at or after that time was made, the rest of the window does not count. A job
    never observed went unobserved for the whole window (up to its DONE time, if earlier)."""
    done = done or {}
    out = {}
    for job in jobs:
        times = sorted(t for t in seen.get(job, ()) if start <= t <= end)
        finish = done.get(job)
        stop = end
        if finish is not None and times and times[-1] >= finish:
            stop = times[-1]  # its completion was observed: nothing to observe after that
        elif finish is not None and not times:
            stop = min(end, max(start, finish))
        points = [start] + [t for t in times if t <= stop] + [stop]
        out[job] = max(b - a for a, b in zip(points, points[1:]))
    return out


def pick_churn(running: list, fraction: float, rng: random.Random) -> tuple[list, list]:
    """(to end, to preempt): round(FRACTION x len(RUNNING)) of RUNNING picked at random, the
    first half (rounded down) to end COMPLETED, the rest to be preempted."""
    if not 0 <= fraction <= 1:
        raise ValueError(f"churn {fraction} is not in 0..1")
    k = min(len(running), int(round(fraction * len(running))))
    chosen = rng.sample(list(running), k)
    return chosen[:k // 2], chosen[k // 2:]


def double_submits(tokens: Iterable[str]) -> int:
    """Scheduler jobs beyond the first per dedupe token (a (job, attempt) submitted twice)."""
    counts: dict = {}
    for t in tokens:
        counts[t] = counts.get(t, 0) + 1
    return sum(n - 1 for n in counts.values() if n > 1)


def gave_up_by_policy(state: str, reason: str, sched_state: str) -> bool:
    """Whether the store's close is the recovery policy's own documented decision on the
    scheduler's last word: a job of the stand-in never commits a checkpoint, so two restarts in a
    row that resumed from nothing end it ("gave up: no progress", launcher.recovery.policy)."""
    return state == "GAVE_UP" and reason.startswith("gave up: no progress") and sched_state not in LIVE \
        and sched_state != ENDED_OK


def lost_jobs(store_rows: dict, sched_latest: dict) -> list:
    """Jobs the store and the scheduler disagree on after settling. STORE_ROWS: {job: (state,
    native id of its current handle[, reason])}; SCHED_LATEST: {job: (native id, state)} of its
    newest scheduler job that was not cancelled. A job the policy gave up on for want of
    progress (``gave_up_by_policy``) is not lost: it is counted as ``gave_up``."""
    out = []
    for job, (state, native, *why) in sorted(store_rows.items()):
        s = sched_latest.get(job)
        if s is None:
            out.append(job)
            continue
        s_native, s_state = s
        if s_state == ENDED_OK:
            ok = state == ENDED_OK
        elif s_state in LIVE:
            ok = state in LIVE and str(native) == str(s_native)
        else:  # preempted and never resubmitted, or ended otherwise
            ok = gave_up_by_policy(state, why[0] if why else "", s_state) and str(native) == str(s_native)
        if not ok:
            out.append(job)
    return out


def gave_up_jobs(store_rows: dict) -> int:
    return sum(1 for state, _native, *why in store_rows.values()
               if state == "GAVE_UP" and (why[0] if why else "").startswith("gave up: no progress"))


def claim_span(reports: list, start: float, end: float, once: bool) -> float:
    """The seconds claims_per_s divides by: the run's (START to END), or with the change made
    once (--churn-once), from START to the last claim any watcher took (how fast they drained it)."""
    last = [r["last_claim"] for r in reports if r.get("last_claim")]
    return max(last) - start if once and last else end - start


def calls_per_target_per_tick(calls: int, targets: int, passes: int) -> float:
    return calls / float(max(1, targets) * max(1, passes))


def result_line(watchers: int, jobs: int, targets: int, passes: list, gaps: dict, calls: int, n_passes: int,
                claims: int, seconds: float, doubles: int, lost: int, standin_cpu: float = 0.0) -> dict:
    """The JSON line of one watcher count. PASSES: (wall s, CPU s) of every pass of every watcher."""
    p50 = percentile([w for w, _ in passes], 50)
    c50 = percentile([c for _, c in passes], 50)
    g99 = percentile(gaps.values(), 99)
    return {"watchers": watchers, "jobs": jobs, "targets": targets,
            "pass_s_p50": _r(p50), "pass_cpu_s_p50": _r(c50), "observe_gap_s_p99": _r(g99),
            "status_calls_per_target_per_tick": round(calls_per_target_per_tick(calls, targets, n_passes), 3),
            "claims_per_s": round(claims / seconds, 3) if seconds > 0 else 0.0,
            "double_submits": doubles, "lost": lost,
            "observe_gap_s_max": _r(max(gaps.values()) if gaps else None),
            "standin_cpu_s_per_pass": _r(standin_cpu, 6), "passes": len(passes)}


def slope_us(size_a: int, cpu_a: float, size_b: int, cpu_b: float) -> float:
    """Microseconds of pass CPU per job between two sizes."""
    return (cpu_b - cpu_a) / float(size_b - size_a) * 1e6


def _r(v, nd: int = 4):
    return None if v is None else round(float(v), nd)


# ---- a run
class Run:
    """One fleet: a scheduler file, a config with T targets, a store with N open jobs."""

    def __init__(self, jobs: int, targets: int, url: str, latency_ms: float, work: Path, submit_ms: float = 0.0):
        self.gave_up = 0  # jobs the policy closed for want of progress (``verdict``)
        self.jobs, self.targets, self.latency_ms = jobs, targets, latency_ms
        self.dir = Path(tempfile.mkdtemp(prefix="fleet-", dir=work))
        self.home = self.dir / "home"
        self.sched = self.dir / "scheduler.db"
        self.config = self.dir / "config.yaml"
        self.url, self.db_name, self._admin = url, "", url
        self.ids = [f"fj{i:06d}" for i in range(jobs)]
        try:
            if url:  # a fresh database on the server, dropped at the end
                self.db_name = f"fleet_{secrets.token_hex(4)}"
                _pg_admin(url, f'CREATE DATABASE "{self.db_name}"')
                self.url = with_database(url, self.db_name)
            fb.create(self.sched)
            names = [f"fleet-{k}" for k in range(targets)]
            self.config.write_text("targets:\n" + "".join(
                f"  {n}: {{backend: {fb.NAME}, db: '{self.sched}', latency_ms: {latency_ms}, "
                f"submit_latency_ms: {submit_ms}}}\n" for n in names))
            self._fill(names)
        except BaseException:
            self.close()
            raise

    def _fill(self, names: list) -> None:
        from launcher.backend.protocols import Handle
        from launcher.state.store import StateStore

        sched = fb.connect(self.sched)
        now = time.time()
        sched.execute("BEGIN")
        for i, job in enumerate(self.ids):
            sched.execute("INSERT INTO sjobs(native_id,job_id,attempt,token,target,state,submitted,by_pid) "
                          "VALUES(?,?,?,?,?,?,?,?)", (i + 1, job, 1, fb.token_of(job, 1), names[i % len(names)],
                                                      "RUNNING", now, os.getpid()))
        sched.execute("COMMIT")
        sched.close()
        store = StateStore(self.home, url=self.url)
        with store.batch():
            for i, job in enumerate(self.ids):
                target = names[i % len(names)]
                store.begin_job(job, "fleet", target, fb.NAME, None, SPEC, meta={"seed": i})
                h = Handle(fb.NAME, target, job, str(i + 1), 1)
                store.record_submission(job, 1, target, h.to_json(), h.native_id, state="RUNNING")
        store.close()

    def env(self) -> dict:
        return {**os.environ, "LAUNCHER_HOME": str(self.home), "LAUNCHER_CONFIG": str(self.config),
                "LAUNCHER_STATE_URL": self.url, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PLUGIN)])}

    def watchers(self, n: int, passes: int, interval: float, start_in: float = 3.0,
                 elect: bool = True) -> tuple[list, float]:
        """N watcher processes, P passes each from a common start; (their reports, start time)."""
        start = time.time() + start_in
        procs = []
        for k in range(n):
            err = open(self.dir / f"watcher-{k}.log", "ab")
            procs.append(subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--_watcher",
                                           json.dumps({"passes": passes, "interval": interval, "start": start,
                                                       "elect": elect})],
                                          env=self.env(), stdout=subprocess.PIPE, stderr=err, text=True))
            err.close()
        return procs, start

    def churn(self, fraction: float, rng: random.Random) -> tuple[int, int]:
        """End and preempt a FRACTION of the running scheduler jobs now."""
        db = fb.connect(self.sched)
        try:
            db.execute("BEGIN IMMEDIATE")
            running = [r[0] for r in db.execute("SELECT native_id FROM sjobs WHERE state='RUNNING' ORDER BY native_id")]
            end, preempt = pick_churn(running, fraction, rng)
            now = time.time()
            db.executemany("UPDATE sjobs SET state='COMPLETED', ended=? WHERE native_id=?", [(now, n) for n in end])
            db.executemany("UPDATE sjobs SET state='PREEMPTED', ended=? WHERE native_id=?", [(now, n) for n in preempt])
            db.execute("COMMIT")
            return len(end), len(preempt)
        finally:
            db.close()

    def observations(self, start: float, end: float) -> tuple[dict, int, list]:
        """({job: times observed}, status calls in [START, END], stand-in CPU per call)."""
        db = fb.connect(self.sched)
        seen: dict = {}
        calls, cpu = 0, []
        for t_read, jobs, c in db.execute("SELECT t_read, jobs, cpu_s FROM calls WHERE t_read>=? AND t_read<=?",
                                          (start, end)):
            calls += 1
            cpu.append(c)
            for j in jobs.split(",") if jobs else ():
                seen.setdefault(j, []).append(t_read)
        db.close()
        return seen, calls, cpu

    def completed_at(self) -> dict:
        db = fb.connect(self.sched)
        out = {j: e for j, e in db.execute("SELECT job_id, ended FROM sjobs WHERE state='COMPLETED'")}
        db.close()
        return out

    def verdict(self) -> tuple[int, int]:
        """(double submits, lost jobs), scheduler against store."""
        from launcher.backend.protocols import Handle
        from launcher.state.store import StateStore

        db = fb.connect(self.sched)
        doubles = double_submits(t for (t,) in db.execute("SELECT token FROM sjobs"))
        latest = {}
        for job, native, state in db.execute("SELECT job_id, native_id, state FROM sjobs WHERE state<>'CANCELLED' "
                                             "ORDER BY attempt, native_id"):
            latest[job] = (native, state)
        db.close()
        store = StateStore(self.home, url=self.url)
        rows = {}
        for r in store.list_jobs(limit=10 * len(self.ids) + 1000):
            native = Handle.from_json(r.handle).native_id if r.handle else None
            rows[r.job_id] = (r.state, native, r.reason or "")
        store.close()
        self.gave_up = gave_up_jobs(rows)
        return doubles, len(lost_jobs(rows, latest))

    def close(self, keep: bool = False) -> None:
        if self.db_name:
            try:
                _pg_admin(self._admin, f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
            except Exception as e:  # noqa: BLE001 - a leftover database is reported, never fatal
                print(f"fleet: could not drop database {self.db_name}: {e}", file=sys.stderr)
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def with_database(url: str, name: str) -> str:
    """URL with its database (the path) replaced by NAME, its query kept."""
    parts = urlsplit(url)  # urlunsplit would drop the empty host of postgresql:///db?host=/socket/dir
    return f"{parts.scheme}://{parts.netloc}/{name}" + (f"?{parts.query}" if parts.query else "")


def _pg_admin(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        c.execute(statement)


def _collect(procs: list) -> list:
    """Each watcher's report; when one fails, the others are stopped (by their own handles)."""
    out = []
    try:
        for p in procs:
            stdout, _ = p.communicate()
            if p.returncode != 0:
                raise SystemExit(f"a watcher failed (exit {p.returncode}); see its log in the run's folder (--keep)")
            out.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def measure(jobs: int, targets: int, watchers: int, url: str, latency_ms: float, churn: float, passes: int,
            interval: float, seed: int, work: Path, keep: bool = False, elect: bool = True,
            submit_ms: float = 0.0, once: bool = False) -> dict:
    """One watcher count on a fresh fleet: its JSON line. ELECT: the watchers elect one poller
    per target (as `launcher watch` does); False: each asks every target (the plain baseline)."""
    run = Run(jobs, targets, url, latency_ms, work, submit_ms)
    done = threading.Event()
    try:
        rng = random.Random(seed)
        churned = [0, 0]
        if once:  # one change of F of the jobs, before the watchers start: they drain it
            churned[0], churned[1] = run.churn(churn, rng)
        procs, start = run.watchers(watchers, passes, interval, elect=elect)

        def driver() -> None:  # the scheduler's own life: every INTERVAL, F of the running jobs change
            t = start
            while not once and not done.wait(max(0.0, t + interval - time.time())):
                t += interval
                e, p = run.churn(churn, rng) if churn > 0 else (0, 0)
                churned[0] += e
                churned[1] += p

        th = threading.Thread(target=driver, daemon=True)
        th.start()
        reports = _collect(procs)
        end = time.time()
        done.set()
        th.join()
        settle, _ = run.watchers(1, 1, 0.0, start_in=0.0, elect=False)  # what the last churn did
        _collect(settle)
        seen, calls, standin = run.observations(start, end)
        gaps = max_gaps(seen, run.ids, start, end, run.completed_at())
        doubles, lost = run.verdict()
        all_passes = [(w, c) for r in reports for w, c in r["passes"]]
        standin_pass = sum(standin) / max(1, len(all_passes))  # the stand-in's CPU in a pass's status calls
        line = result_line(watchers, jobs, targets, all_passes, gaps, calls, passes,
                           sum(r["claims"] for r in reports), claim_span(reports, start, end, once), doubles, lost,
                           standin_pass)
        line.update({"gave_up": run.gave_up, "churned_completed": churned[0], "churned_preempted": churned[1],
                     "status_latency_ms": latency_ms, "submit_latency_ms": submit_ms, "churn": churn,
                     "interval_s": interval, "churn_once": once,
                     "start_late_s": round(max(r["late_s"] for r in reports), 3), "election": elect,
                     "store": "postgresql" if url else "sqlite"})
        return line
    finally:
        done.set()  # the driver stops (when a watcher failed, too)
        run.close(keep)


def measure_slope(jobs: int, targets: int, url: str, latency_ms: float, passes: int, interval: float, seed: int,
                  work: Path) -> dict:
    """Pass CPU per unchanged job: one watcher, no churn, at JOBS/2 and JOBS."""
    small = max(1, jobs // 2)
    a = measure(small, targets, 1, url, latency_ms, 0.0, passes, interval, seed, work)
    b = measure(jobs, targets, 1, url, latency_ms, 0.0, passes, interval, seed, work)
    total = slope_us(small, a["pass_cpu_s_p50"], jobs, b["pass_cpu_s_p50"])
    standin = slope_us(small, a["standin_cpu_s_per_pass"], jobs, b["standin_cpu_s_per_pass"])
    return {"slope": True, "sizes": [small, jobs], "targets": targets, "passes": passes,
            "pass_cpu_s_p50": [a["pass_cpu_s_p50"], b["pass_cpu_s_p50"]],
            "cpu_us_per_unchanged_job": round(total, 2),
            "launcher_cpu_us_per_unchanged_job": round(total - standin, 2),
            "store": "postgresql" if url else "sqlite"}


# ---- one watcher process
def watcher(conf: dict) -> None:
    """P passes of the real watch pass (``Launcher.watch()``, `launcher watch --once`), S seconds
    apart, from the common start; prints {"passes": [[wall, cpu], ...], "claims": n}. With
    "until" (seconds since the epoch), no pass starts after it ("until_file": a file the driver
    writes that time into later, read before each pass); with "log" (a file), each pass
    appends {"pid", "end", "wall", "cpu", "claims"} to it as it ends, so a watcher killed with -9
    (bench/fleet_slurm.py) leaves its passes behind."""
    from launcher.api import Launcher
    from launcher.recovery.watch import pause_after
    import launcher.recovery.watch  # noqa: F401  (imported before the clock starts, as a running watch has)

    claims, taken = [0, 0], []
    with Launcher() as lx:
        store = lx.app.store  # opened before the start, as in a running `launcher watch`
        for name in lx.app.config.file.targets:
            lx.app.backend(name)
        take = store.claim

        def counting(*a, **k):
            c = take(*a, **k)
            claims[c is None] += 1
            if c is not None:
                taken.append(time.time())
            return c

        store.claim = counting
        late = time.time() - conf["start"]  # > 0: this watcher was not ready at the common start
        time.sleep(max(0.0, -late))
        passes = []
        for k in range(conf["passes"]):
            until = _until(conf)
            if until is not None and time.time() >= until:
                break
            w, c = time.perf_counter(), time.process_time()
            lx.watch(interval=conf["interval"]) if conf.get("elect", True) else lx.watch()
            passes.append((time.perf_counter() - w, time.process_time() - c))
            if conf.get("log"):
                with open(conf["log"], "a") as f:
                    f.write(json.dumps({"pid": os.getpid(), "end": time.time(), "wall": passes[-1][0],
                                        "cpu": passes[-1][1], "claims": claims[0]}) + "\n")
            if k < conf["passes"] - 1:  # the pause `launcher watch` makes: a pass starts every interval
                pause = pause_after(conf["interval"], passes[-1][0])
                time.sleep(pause if until is None else max(0.0, min(pause, until - time.time())))
    print(json.dumps({"passes": passes, "claims": claims[0], "claims_refused": claims[1], "late_s": max(0.0, late),
                      "last_claim": taken[-1] if taken else None,
                      "pid": os.getpid()}))


def _until(conf: dict):
    """When no pass may start any more: the time in conf's "until_file" once it exists (the
    driver sets the end when it knows it), else conf's "until" (None: run every pass)."""
    path = conf.get("until_file")
    if path and os.path.exists(path):
        try:
            return float(Path(path).read_text())
        except ValueError:  # half written: the fixed end for now
            pass
    return conf.get("until")


def _ints(text: str) -> list:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--targets", type=int, default=2)
    ap.add_argument("--watchers", type=_ints, default=[1, 3], help="watcher counts, comma-separated")
    ap.add_argument("--url", default="", help="a PostgreSQL server (each run makes its own database there)")
    ap.add_argument("--status-latency-ms", type=float, default=0.0)
    ap.add_argument("--churn", type=float, default=0.01, help="fraction of running jobs changing state each tick")
    ap.add_argument("--passes", type=int, default=3, help="passes of each watcher")
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between passes (launcher watch's default)")
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--election", choices=("on", "off"), default="on",
                    help="on: the watchers elect one poller per target (launcher watch); off: each asks every target")
    ap.add_argument("--submit-latency-ms", type=float, default=0.0,
                    help="how long a call about one job takes to answer (a submission; a lookup of its dedupe token)")
    ap.add_argument("--churn-once", action="store_true",
                    help="F of the jobs change once, before the watchers start, and they drain it: claims_per_s "
                         "is then the claims over the time from the start to the last claim taken")
    ap.add_argument("--slope", action="store_true", help="also the CPU per unchanged job (1 watcher at N/2 and N)")
    ap.add_argument("--work", default="", help="where the runs' folders go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the runs' folders")
    ap.add_argument("--json", action="store_true", help="one JSON line per watcher count")
    ap.add_argument("--_watcher", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._watcher:
        watcher(json.loads(a._watcher))
        return 0
    if a.jobs < 1 or a.targets < 1 or a.passes < 1 or not a.watchers or min(a.watchers) < 1:
        ap.error("--jobs, --targets, --passes and every --watchers count must be at least 1")
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="launcher-fleet-"))
    work.mkdir(parents=True, exist_ok=True)
    lines = []
    try:
        for w in a.watchers:
            line = measure(a.jobs, a.targets, w, a.url, a.status_latency_ms, a.churn, a.passes, a.interval, a.seed,
                           work, a.keep, elect=a.election == "on", submit_ms=a.submit_latency_ms, once=a.churn_once)
            lines.append(line)
            _emit(line, a.json)
        if a.slope:
            _emit(measure_slope(a.jobs, a.targets, a.url, a.status_latency_ms, a.passes, a.interval, a.seed, work),
                  a.json)
    finally:
        if not a.work and not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _emit(line: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(line), flush=True)
    else:
        print("  ".join(f"{k}={v}" for k, v in line.items()), flush=True)


if __name__ == "__main__":
    sys.exit(main())
