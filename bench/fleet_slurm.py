"""The fleet on the netns Slurm test cluster (issue 29 item 7): N held jobs, W watchers on one
PostgreSQL store, one watcher killed with -9 and one frozen (SIGSTOP) past its lease.

    .venv/bin/python bench/fleet_slurm.py [--jobs 2000] [--watchers 3] [--interval 5] [--churn 0.01]
        [--url postgresql://...] [--json] [--keep]

Starts a throw-away netns Slurm cluster (tests/fixtures/slurm.py, MinJobAge 1 h so no finished
job leaves ``squeue`` during the run) and, unless --url is given, a throw-away PostgreSQL server
on 127.0.0.1 (tests/fixtures/postgres.py); both are always stopped. The launcher runs on this
machine, as on a login node: its store is a fresh database on that server, its target ``testcl``
the cluster. Then:

1. **N held jobs**, launched through the launcher (``Launcher.launch``, the real sbatch with
   ``slurm.extra: [--hold]``), in four launching processes. Every second job's program fails on
   its first attempt, so a watcher resubmits it (as a held job again); the others exit 0.
2. **W watcher processes** (the real watch pass with the election, as `launcher watch` runs it:
   ``bench/fleet.py``'s watcher, one pass every S seconds), started together. Each status poll
   they make (``scontrol -o show job``) goes through a logging wrapper first on their PATH: when
   it ran, which watcher ran it, and every job (by its dedupe token) and state it answered.
3. **Churn**: every S seconds the bench releases (``scontrol release``) a fraction F of the held
   jobs: half of those complete, half fail and are resubmitted by a watcher.
4. **Faults**: once every watcher has made two passes (warm: a watcher's first pass over jobs no
   watcher has marked decides every one of them; ``warm``, ``warm_at_s``; at least 3 S, at most
   600 s), the watcher that made the last status poll (the target's poller) is killed with -9.
   At lease + S later, the watcher that polls now (its successor) is frozen with SIGSTOP for
   lease + 2 S (past its lease), then continued. The lease is 3 S
   (``launcher.launching.polling.Poller``). The watchers stop passing 4 S after that.
5. **Settling**: once no released job is still running (``busy_left``: how many still ran when
   that wait gave up), `launcher watch --once` passes until the store agrees with ``squeue -t all``
   or 240 s passed, longer than a claim's TTL (a claim the killed watcher held runs out);
   ``settle_passes``, ``settle_s``. A job still disagreeing is ``lost``, and ``lost_jobs`` says
   for each what the store and Slurm hold and who holds its claim.

One JSON line (``--json``; else ``key=value``): the keys of ``bench/fleet.py`` (``pass_s_p50``,
``pass_cpu_s_p50``, ``observe_gap_s_p99``: per job, the longest time no status poll answered for
it, from the watchers' start to their end, or to the poll that saw it COMPLETED;
``status_calls_per_target_per_tick``: polls / (targets x the most passes any watcher made);
``claims_per_s``, ``double_submits``: Slurm jobs beyond the first per dedupe token, cancelled
ones included; ``lost``: jobs the store and Slurm disagree on after settling), plus ``kill`` and
``freeze``: when, which pid, and ``max_gap_s``: the longest a job went unobserved across that
moment (from its last poll before it to the next one after); ``bound_s`` = lease + S (issue 29:
a watcher killed with -9 leaves no job unobserved for longer); ``over_bound``: the jobs that
were. Figures are printed, never asserted; a slurm-tier test on branch h29fleet runs it small
and asserts the invariants (no double submit, no lost job, every job observed again after each
fault).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
for _p in (str(ROOT), str(BENCH)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from fleet import (_pg_admin, double_submits, gave_up_jobs, lost_jobs, max_gaps, percentile,  # noqa: E402
                   with_database)

TARGET = "testcl"
WARM_PASSES = 2  # passes every watcher makes before the kill (the first ones decide every job)
LEASE_INTERVALS = 3  # launcher.launching.polling.Poller.lease_s: three intervals (1 s at least)
SPEC = """name: {name}
run: {run}
resources: {{time_limit: 5m}}
recovery: {{app_error: 2}}
slurm: {{extra: ['--hold']}}
"""
RUN_OK = "'true'"
RUN_FAIL_FIRST = "'test \"$LAUNCHER_ATTEMPT\" != 1'"  # exits 1 on attempt 1: a watcher resubmits it
LIVE_SLURM = {"PENDING": "PENDING", "RUNNING": "RUNNING", "CONFIGURING": "RUNNING", "COMPLETING": "RUNNING",
              "REQUEUED": "PENDING", "SUSPENDED": "RUNNING"}
BUSY = ("RUNNING", "CONFIGURING", "COMPLETING")

# scontrol first on the watchers' PATH: a status poll (`scontrol -o show job`) is run, timed and
# logged to one file per call in $FLEET_CALLS ("t0 t1 ppid rc", then "token=state" per job);
# every other scontrol call is the real one at once
WRAPPER = """#!/bin/sh
if [ "$#" -eq 3 ] && [ "$1" = "-o" ] && [ "$2" = "show" ] && [ "$3" = "job" ]; then
  t0=$(date +%s.%N)
  out=$(mktemp "$FLEET_CALLS/.out.XXXXXX") || exec {real} "$@"
  {real} "$@" >"$out"
  rc=$?
  t1=$(date +%s.%N)
  rec="$FLEET_CALLS/call.$t1.$$"
  {{ echo "$t0 $t1 $PPID $rc"
    awk '{{st=""; c=""; for (i = 1; i <= NF; i++) {{ if ($i ~ /^JobState=/) st = substr($i, 10);
         else if ($i ~ /^Comment=/) c = substr($i, 9) }} if (c != "") print c "=" st}}' "$out"
  }} >"$rec.tmp" && mv "$rec.tmp" "$rec"
  cat "$out"
  rm -f "$out"
  exit $rc
fi
exec {real} "$@"
"""


# ---- the pure pieces (tests/unit/test_fleet_slurm.py)
def parse_call(text: str) -> Optional[dict]:
    """One record the wrapper wrote: {"t0", "t1", "pid" (the watcher that polled), "rc", "jobs":
    {job id: [states of its attempts]}}; None for a record cut short."""
    lines = text.splitlines()
    try:
        t0, t1, pid, rc = lines[0].split()
        out = {"t0": float(t0), "t1": float(t1), "pid": int(pid), "rc": int(rc), "jobs": {}}
    except (IndexError, ValueError):
        return None
    for ln in lines[1:]:
        token, _, state = ln.rpartition("=")
        kind, _, rest = token.partition(":")
        job, _, _attempt = rest.rpartition(":")
        if kind == "launcher" and job:
            out["jobs"].setdefault(job, []).append(state)
    return out


def observations(calls: list, start: float, end: float) -> tuple[dict, dict]:
    """({job: times a poll answered for it}, {job: when a poll first saw it COMPLETED}) from
    CALLS (``parse_call``), over the answered polls (rc 0) that ended within [START, END]."""
    seen: dict = {}
    done: dict = {}
    for c in sorted(calls, key=lambda c: c["t1"]):
        if c["rc"] != 0 or not start <= c["t1"] <= end:
            continue
        for job, states in c["jobs"].items():
            seen.setdefault(job, []).append(c["t1"])
            if "COMPLETED" in states:
                done.setdefault(job, c["t1"])
    return seen, done


def gap_across(times: list, moment: float, start: float, end: float, finish: Optional[float] = None) -> float:
    """The longest a job went unobserved across MOMENT: from its last observation at or before
    MOMENT (START if none) through its observations after it, up to END, or up to the first
    observation at or after FINISH (when it was seen COMPLETED: nothing to observe after that)."""
    ts = sorted(t for t in times if start <= t <= end)
    before = [t for t in ts if t <= moment]
    after = [t for t in ts if t > moment]
    if finish is not None and before and before[-1] >= finish:
        return 0.0  # seen completed before the moment
    points = [before[-1] if before else start]
    for t in after:
        points.append(t)
        if finish is not None and t >= finish:
            break
    else:
        points.append(end)
    return max(b - a for a, b in zip(points, points[1:]))


def poller_at(calls: list, moment: float, pids: set) -> Optional[int]:
    """The watcher (of PIDS) whose status poll ended last at or before MOMENT: the target's poller."""
    mine = [c for c in calls if c["pid"] in pids and c["t1"] <= moment]
    return max(mine, key=lambda c: c["t1"])["pid"] if mine else None


def latest_in_slurm(squeue_text: str) -> tuple[dict, list]:
    """From ``squeue -h -t all -o %i|%k|%T``: ({job: (Slurm id, state)} of its newest attempt that
    was not cancelled, the state as bench/fleet.py's ``lost_jobs`` reads it), [every dedupe token]."""
    rows = []
    for ln in squeue_text.splitlines():
        parts = ln.strip().split("|")
        if len(parts) != 3 or not parts[1].startswith("launcher:"):
            continue
        jid, token, state = parts
        job, _, attempt = token[len("launcher:"):].rpartition(":")
        rows.append((job, int(attempt) if attempt.isdigit() else 0, int(jid.split("_")[0]), jid, token, state))
    latest = {}
    for job, attempt, _n, jid, _token, state in sorted(rows):
        if state != "CANCELLED":
            latest[job] = (jid, LIVE_SLURM.get(state, state))
    return latest, [r[4] for r in rows]


# ---- a run
class Fleet:
    """One run's folder, store, config and the wrapper; the cluster and server are the caller's."""

    def __init__(self, cluster, url: str, work: Path, keep: bool = False):
        self.cluster, self.keep = cluster, keep
        self.dir = Path(tempfile.mkdtemp(prefix="fleet-slurm-", dir=work))
        self.home = self.dir / "home"
        self.calls = self.dir / "calls"
        self.calls.mkdir()
        self.bin = self.dir / "bin"
        self.bin.mkdir()
        self.db_name = f"fleet_slurm_{secrets.token_hex(4)}"
        self._admin = url
        _pg_admin(url, f'CREATE DATABASE "{self.db_name}"')
        self.url = with_database(url, self.db_name)
        real = shutil.which("scontrol", path=cluster.env.get("PATH"))
        if real is None:
            raise RuntimeError("scontrol is not on the cluster's PATH")
        wrapper = self.bin / "scontrol"
        wrapper.write_text(WRAPPER.format(real=real))
        wrapper.chmod(0o755)
        self.config = self.dir / "config.yaml"
        self.config.write_text(f"targets:\n  {TARGET}: {{backend: slurm, slurm_conf: '{cluster.conf}', "
                               "partition: batch}\n")
        self.specs = []
        for name, run in (("fleet-ok", RUN_OK), ("fleet-fail-first", RUN_FAIL_FIRST)):
            f = self.dir / f"{name}.yaml"
            f.write_text(SPEC.format(name=name, run=run))
            self.specs.append(str(f))

    def env(self, polls_logged: bool = False) -> dict:
        env = {**self.cluster.env, "LAUNCHER_HOME": str(self.home), "LAUNCHER_CONFIG": str(self.config),
               "LAUNCHER_STATE_URL": self.url}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        if polls_logged:
            env["PATH"] = f"{self.bin}{os.pathsep}{env['PATH']}"
            env["FLEET_CALLS"] = str(self.calls)
        return env

    def launch(self, jobs: int, processes: int = 4) -> tuple[list, float]:
        """JOBS held jobs through Launcher.launch, in PROCESSES processes: (job ids, seconds)."""
        t0 = time.monotonic()
        share = [list(range(k, jobs, processes)) for k in range(processes)]
        procs = [subprocess.Popen([sys.executable, __file__, "--_launch", json.dumps({"specs": self.specs,
                                                                                       "indices": idx})],
                                  env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for idx in share if idx]
        ids = []
        for p in procs:
            out, err = p.communicate()
            if p.returncode != 0:
                raise RuntimeError(f"launching failed (exit {p.returncode}): {err.strip()[-2000:]}")
            ids += json.loads(out.strip().splitlines()[-1])
        return ids, time.monotonic() - t0

    def watchers(self, n: int, interval: float, start: float, until: float) -> list:
        """N watcher processes from START; none passes after UNTIL, or after the time ``set_until``
        writes later."""
        procs = []
        for k in range(n):
            conf = {"passes": 10**6, "interval": interval, "start": start, "elect": True, "until": until,
                    "until_file": str(self.dir / "until"), "log": str(self.dir / "passes.jsonl")}
            err = open(self.dir / f"watcher-{k}.log", "ab")
            procs.append(subprocess.Popen([sys.executable, str(BENCH / "fleet.py"), "--_watcher", json.dumps(conf)],
                                          env=self.env(polls_logged=True), stdout=subprocess.DEVNULL, stderr=err))
            err.close()
        return procs

    def set_until(self, until: float) -> None:
        tmp = self.dir / "until.tmp"
        tmp.write_text(repr(until))
        os.replace(tmp, self.dir / "until")

    def passes_by_pid(self) -> Counter:
        log = self.dir / "passes.jsonl"
        if not log.exists():
            return Counter()
        return Counter(json.loads(ln)["pid"] for ln in log.read_text().splitlines() if ln.strip())

    def wait_warm(self, pids: set, passes: int, limit_s: float) -> bool:
        """Until every watcher in PIDS made PASSES passes (a watcher's first pass over jobs no
        watcher has marked decides every one of them: the faults come after); False at LIMIT_S."""
        deadline = time.time() + limit_s
        while time.time() < deadline:
            done = self.passes_by_pid()
            if all(done[pid] >= passes for pid in pids):
                return True
            time.sleep(0.5)
        return False

    def read_calls(self) -> list:
        out = []
        for f in self.calls.glob("call.*"):
            if f.name.endswith(".tmp"):
                continue
            c = parse_call(f.read_text(errors="replace"))
            if c is not None:
                out.append(c)
        return out

    def squeue(self, states: str = "all") -> str:
        p = self.cluster.run("squeue", "-h", "-t", states, "-o", "%i|%k|%T", check=False, timeout=60)
        if p.returncode != 0:
            raise RuntimeError(f"squeue failed: {p.stderr.strip()}")
        return p.stdout

    def held(self, released: set) -> list:
        """Slurm ids of this fleet's PENDING jobs not released yet."""
        out = []
        for ln in self.squeue("PENDING").splitlines():
            jid, token, _ = (ln.split("|") + ["", ""])[:3]
            if token.startswith("launcher:") and jid not in released:
                out.append(jid)
        return out

    def settle(self, busy_wait_s: float = 120.0, settle_s: float = 240.0) -> dict:
        """Wait (up to BUSY_WAIT_S) until no released job still runs, then `launcher watch --once`
        passes until the store agrees with Slurm (no job ``lost``) or SETTLE_S passed (longer than
        a claim's TTL, so a claim the killed watcher held has run out): {"busy_left": Slurm jobs
        still running when the wait ended, "settle_passes", "settle_s"}."""
        end = time.monotonic() + busy_wait_s
        busy = 0
        while True:
            busy = sum(1 for ln in self.squeue().splitlines() if ln.split("|")[-1].strip() in BUSY)
            if not busy or time.monotonic() > end:
                break
            time.sleep(1.0)
        launcher = str(Path(sys.executable).parent / "launcher")
        t0, passes = time.monotonic(), 0
        while True:
            subprocess.run([launcher, "watch", "--once"], env=self.env(), capture_output=True, text=True, timeout=600)
            passes += 1
            if passes >= 2 and (not self.disagreeing() or time.monotonic() - t0 > settle_s):
                break
            time.sleep(2.0)
        return {"busy_left": busy, "settle_passes": passes, "settle_s": round(time.monotonic() - t0, 1)}

    def _store_rows(self) -> dict:
        from tests.integration.fault_harness import store_query

        jobs, attempts = store_query(self.home, self.url, "SELECT job_id, state, reason FROM jobs",
                                     "SELECT job_id, attempt, native_id FROM attempts", strict=True)
        newest: dict = {}
        for a in sorted(attempts, key=lambda a: a["attempt"]):
            if a["native_id"] is not None:
                newest[a["job_id"]] = str(a["native_id"])
        return {j["job_id"]: (j["state"], newest.get(j["job_id"]), j["reason"] or "") for j in jobs}

    def disagreeing(self) -> list:
        """The jobs the store and Slurm disagree on now (``lost_jobs``)."""
        latest, _ = latest_in_slurm(self.squeue())
        return lost_jobs(self._store_rows(), latest)

    def explain(self, jobs: list) -> list:
        """For each of JOBS (disagreeing after settling): what the store and Slurm say, and who
        holds its claim, so that a disagreement is diagnosed from the JSON line alone."""
        from tests.integration.fault_harness import store_query

        rows = self._store_rows()
        latest, _ = latest_in_slurm(self.squeue())
        claims = {c["job_id"]: c for c in store_query(self.home, self.url, "SELECT job_id, owner, expires FROM claims",
                                                      strict=True)}
        out = []
        for j in jobs:
            state, native, reason = rows.get(j, (None, None, ""))
            c = claims.get(j)
            out.append({"job": j, "store": [state, native, reason[:200]], "slurm": list(latest.get(j) or ()),
                        "claim": [c["owner"], round(float(c["expires"]) - time.time(), 1)] if c else None})
        return out

    def verdict(self) -> dict:
        rows = self._store_rows()
        latest, tokens = latest_in_slurm(self.squeue())
        lost = lost_jobs(rows, latest)
        states: dict = {}
        for state, *_ in rows.values():
            states[state] = states.get(state, 0) + 1
        return {"double_submits": double_submits(tokens), "lost": len(lost), "lost_jobs": self.explain(lost[:20]),
                "gave_up": gave_up_jobs(rows), "store_states": states, "slurm_jobs": len(tokens)}

    def close(self) -> None:
        try:
            _pg_admin(self._admin, f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
        except Exception as e:  # noqa: BLE001 - a leftover database is reported, never fatal
            print(f"fleet_slurm: could not drop database {self.db_name}: {e}", file=sys.stderr)
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def run_fleet(cluster, url: str, jobs: int, watchers: int = 3, interval: float = 5.0, churn: float = 0.01,
              work: Optional[Path] = None, keep: bool = False, echo=None, start_in: float = 8.0,
              warm_limit_s: float = 600.0) -> dict:
    """One run (see the module's docstring) on CLUSTER with its store on the PostgreSQL server URL;
    its JSON line. ECHO gets a line at each step."""
    if watchers < 3:
        raise ValueError("the run kills one watcher and freezes another: it needs at least 3")
    say = echo or (lambda line: None)
    work = Path(work or tempfile.gettempdir())
    fleet = Fleet(cluster, url, work, keep)
    procs: list = []
    stop = threading.Event()
    try:
        ids, launch_s = fleet.launch(jobs)
        say(f"launched {len(ids)} held jobs in {launch_s:.1f}s")
        lease = max(LEASE_INTERVALS * interval, 1.0)
        start = time.time() + start_in
        # a fixed end far off until the watchers are warm; then the faults and the real end
        procs = fleet.watchers(watchers, interval, start, start + warm_limit_s + 60 * interval)
        pids = {p.pid for p in procs}
        released: set = set()
        end_at = [float("inf")]

        def churner() -> None:  # every INTERVAL, F of the held jobs are released
            t = start
            while not stop.wait(max(0.0, t + interval - time.time())) and time.time() < end_at[0]:
                t += interval
                held = fleet.held(released)
                pick = held[:max(1, round(churn * jobs))] if churn > 0 else []
                if pick:
                    fleet.cluster.run("scontrol", "release", ",".join(pick), check=False)
                    released.update(pick)

        th = threading.Thread(target=churner, daemon=True)
        th.start()
        time.sleep(max(0.0, start + 3 * interval - time.time()))
        warm = fleet.wait_warm(pids, WARM_PASSES, max(0.0, start + warm_limit_s - time.time()))
        say(f"watchers {'warm' if warm else 'NOT warm'} at {time.time() - start:.1f}s: passes "
            f"{dict(fleet.passes_by_pid())}")
        t_kill = time.time()
        t_freeze = t_kill + lease + interval
        t_thaw = t_freeze + lease + 2 * interval
        until = end_at[0] = t_thaw + 4 * interval
        fleet.set_until(until)
        calls = fleet.read_calls()
        killed = poller_at(calls, time.time(), pids) or procs[0].pid
        os.kill(killed, signal.SIGKILL)
        t_kill = time.time()
        say(f"killed watcher {killed} (-9) at {t_kill - start:.1f}s")
        time.sleep(max(0.0, t_freeze - time.time()))
        alive = pids - {killed}
        frozen = poller_at(fleet.read_calls(), time.time(), alive) or min(alive)
        os.kill(frozen, signal.SIGSTOP)
        t_freeze = time.time()
        say(f"froze watcher {frozen} at {t_freeze - start:.1f}s for {t_thaw - t_freeze:.1f}s")
        time.sleep(max(0.0, t_thaw - time.time()))
        os.kill(frozen, signal.SIGCONT)
        t_thaw = time.time()
        for p in procs:
            try:
                p.wait(timeout=max(60.0, until - time.time() + 120))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        end = min(until, time.time())
        stop.set()
        th.join()
        say(f"watchers done at {end - start:.1f}s; {len(released)} jobs released; settling")
        settled = fleet.settle()
        calls = fleet.read_calls()
        line = summarize(calls, fleet.dir / "passes.jsonl", ids, start, end, interval, lease,
                         {"at_s": t_kill - start, "pid": killed}, {"at_s": t_freeze - start, "pid": frozen,
                                                                   "for_s": t_thaw - t_freeze}, pids)
        line.update(fleet.verdict())
        line.update(settled)
        line.update({"warm": warm, "warm_at_s": round(t_kill - start, 1)})
        line.update({"launch_s": round(launch_s, 1), "released": len(released), "churn": churn,
                     "interval_s": interval, "store": "postgresql", "run_s": round(end - start, 1)})
        return line
    finally:
        stop.set()
        for p in procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                p.kill()
                p.wait()
        fleet.close()


def summarize(calls: list, passes_log: Path, ids: list, start: float, end: float, interval: float, lease: float,
              kill: dict, freeze: dict, pids: set) -> dict:
    """The JSON line's figures from the polls (CALLS) and the watchers' passes."""
    seen, done = observations([c for c in calls if c["pid"] in pids], start, end)
    gaps = max_gaps(seen, ids, start, end, done)
    passes = []
    if passes_log.exists():
        passes = [json.loads(ln) for ln in passes_log.read_text().splitlines() if ln.strip()]
    passes = [p for p in passes if p["end"] <= end + 1.0]
    per_pid: dict = {}
    for p in passes:
        per_pid[p["pid"]] = per_pid.get(p["pid"], 0) + 1
    ticks = max(per_pid.values()) if per_pid else 1
    polls = [c for c in calls if c["pid"] in pids and start <= c["t1"] <= end]
    claims = sum(max((p["claims"] for p in passes if p["pid"] == pid), default=0) for pid in per_pid)
    bound = lease + interval
    out = {"watchers": len(pids), "jobs": len(ids), "targets": 1,
           "pass_s_p50": _r(percentile([p["wall"] for p in passes], 50)),
           "pass_cpu_s_p50": _r(percentile([p["cpu"] for p in passes], 50)),
           "observe_gap_s_p99": _r(percentile(gaps.values(), 99)),
           "status_calls_per_target_per_tick": round(len(polls) / float(ticks), 3),
           "claims_per_s": round(claims / (end - start), 3) if end > start else 0.0,
           "observe_gap_s_max": _r(max(gaps.values()) if gaps else None), "bound_s": bound,
           "status_calls": len(polls), "ticks": ticks, "passes": len(passes),
           "polls_by_watcher": {str(pid): sum(1 for c in polls if c["pid"] == pid) for pid in sorted(pids)}}
    for name, event in (("kill", kill), ("freeze", freeze)):
        moment = start + event["at_s"]
        across = {j: gap_across(seen.get(j, []), moment, start, end, done.get(j)) for j in ids}
        after = [c["pid"] for c in polls if c["t1"] > moment and c["pid"] != event["pid"]]
        out[name] = {**{k: _r(v, 2) if isinstance(v, float) else v for k, v in event.items()},
                     "max_gap_s": _r(max(across.values()) if across else None, 2),
                     "gap_s_p99": _r(percentile(across.values(), 99), 2),
                     "over_bound": sum(1 for g in across.values() if g > bound),
                     "unobserved_after": sum(1 for j in ids if not (j in done and done[j] <= moment)
                                             and not any(t > moment for t in seen.get(j, []))),
                     "next_poller": after[0] if after else None}
    return out


def _r(v, nd: int = 4):
    return None if v is None else round(float(v), nd)


def _launch(conf: dict) -> None:
    """A launching process: job I of CONF's indices from spec I % 2; prints the job ids."""
    from launcher.api import Launcher

    ids = []
    with Launcher() as lx:
        for i in conf["indices"]:
            ids.append(lx.launch(conf["specs"][i % len(conf["specs"])], target=TARGET).job_id)
    print(json.dumps(ids))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--watchers", type=int, default=3)
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between a watcher's passes")
    ap.add_argument("--churn", type=float, default=0.01, help="fraction of the jobs released each interval")
    ap.add_argument("--url", default="", help="a PostgreSQL server (default: one this script starts and stops)")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--keep", action="store_true", help="keep the run's folder (polls, passes, logs)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--_launch", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._launch:
        _launch(json.loads(a._launch))
        return 0
    if a.jobs < 1 or a.watchers < 3 or a.interval <= 0:
        ap.error("--jobs must be at least 1, --watchers at least 3 (one is killed, one frozen), --interval > 0")
    from tests.fixtures.slurm import preflight, start_cluster, stop_cluster

    problem = preflight()
    if problem:
        print(f"fleet_slurm: no Slurm test cluster here ({problem})", file=sys.stderr)
        return 2
    server = None
    work = Path(tempfile.mkdtemp(prefix="launcher-fleet-slurm-"))
    cluster = start_cluster(a.nodes, extra_env={"SLURM_TEST_MIN_JOB_AGE": "3600"})
    try:
        url = a.url
        if not url:
            from tests.fixtures.postgres import start_postgres

            server = start_postgres(durable=True)
            url = server.url()
            print(f"fleet_slurm: PostgreSQL on 127.0.0.1:{server.port} (postmaster {server.pid})", file=sys.stderr)
        line = run_fleet(cluster, url, a.jobs, a.watchers, a.interval, a.churn, work, a.keep,
                         echo=lambda s: print(f"fleet_slurm: {s}", file=sys.stderr, flush=True))
        line["slurm"] = cluster.run("sinfo", "--version", check=False).stdout.strip()
        print(json.dumps(line) if a.json else "  ".join(f"{k}={v}" for k, v in line.items()), flush=True)
    finally:
        if server is not None:
            server.destroy()
        cluster.run("scancel", "-u", str(os.getuid()), check=False)
        stop_cluster(cluster, keep=a.keep)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
