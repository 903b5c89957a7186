"""The fault-injection harness (issue 20 §10): randomized schedules of faults on the submit and
record path, run against real `launcher` processes, each checked against four invariants.

A schedule (``Schedule``) is drawn from its own seeded stream (``draw``: schedule I of base
seed S is ``random.Random(f"{S}:{I}")``, so any one replays alone):

- a backend: ``local``, or ``slurm`` (the real test cluster);
- a scenario: ``launch`` (a plain launch), ``fail_first`` (the job's first attempt fails,
  so a watcher resubmits it) or ``sweep`` (a sweep of three elements, two at a time, whose
  element 0 fails its first attempt);
- a fault point of ``launcher.core.faults`` (or, on local, the backend's ``local_before_start``) and an action there: ``pause`` (SIGSTOP; the
  harness sends SIGCONT after longer than the claim TTL), ``kill`` (-9), ``interrupt``
  (Ctrl-C) or ``sleep``;
- the process that gets it: the launch, or one of 2-3 concurrent watchers (or as many as
  asked: ``draw``'s CROWD, $LAUNCHER_FAULT_WATCHERS), each a ``launcher watch`` loop, or
  back-to-back ``launcher watch --once`` runs;
- timing jitter (when each watcher starts, how long a pause or sleep lasts), and sometimes a
  concurrent ``launcher cancel``;
- on Slurm, sometimes slurmctld paused (SIGSTOP) when the fault point is reached, for
  longer than sbatch's MessageTimeout, so the scheduler calls time out.

``run_schedule`` runs one in a folder of its own (its own LAUNCHER_HOME: schedules may run
side by side), heals it (every paused process continued, every process of the schedule
ended), runs ``launcher watch --once`` until quiet, reads ``launcher status --json`` and
checks (``Result.violations``):

1. no (job, attempt) ran user code twice (every start appends "JOB ATTEMPT PID SELF_ID" to
   a lines file; the jobs have no checkpoint root, so LAUNCHER_ATTEMPT is the launcher's
   attempt);
2. no job the scheduler has is unknown to ``status``: every start that ran user code is
   an attempt of a job ``status`` lists, recorded with the id that ran it; local: every
   live job process group and every start marker; Slurm: every job in ``squeue -t all``
   whose comment is one of this schedule's dedupe tokens;
3. no command reports an action it did not take: a launch that exited 0 printed a job
   ``status`` has, with that id; one that said "rejected" left nothing running; a
   ``cancel`` that said "cancelled attempt N (… id X)" left X gone, one that said "closed
   as CANCELLED" left the job CANCELLED with nothing running; a watcher that said
   "resubmitted/adopted/started (… id X)" left X recorded, or replaced (event ``adopted``) by a
   second submission of the same attempt that started first;
4. nothing is cancelled that nobody cancelled: without a ``cancel`` in the schedule no job or
   attempt ends CANCELLED, and an attempt that ran user code and ended is recorded as its
   program ended (a duplicate's cancel never reaches the real attempt).

On local, 3 in 10 schedules are the frozen duplicate (``DUPLICATE_POINT``): a watcher
paused inside the backend's submit, after the claim's fence passed and before the attempt's
process starts, for longer than the claim TTL, so another watcher submits the same attempt;
continued, it starts a duplicate, cannot record it, and cancels it.

Replay a failing schedule with the line its report prints, e.g.
``LAUNCHER_FAULT_SEED=123 LAUNCHER_FAULT_ONLY=17 pytest tests/integration/test_fault_schedules.py``
(or ``bench/fault_schedules.py --seed 123 --only 17``).
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
import secrets
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from launcher.core.faults import POINTS

LAUNCHER = str(Path(sys.executable).parent / "launcher")
ACTIONS = ("pause", "kill", "interrupt", "sleep")
SCENARIOS = ("launch", "fail_first", "sweep")
CLAIM_TTL_S = 2.0  # $LAUNCHER_CLAIM_TTL of every schedule: a pause "longer than the TTL" costs ~3 s
WATCH_INTERVAL_S = 0.5
ONCE_GAP_S = 2.0  # between two runs of a watcher (its `watch --once` runs, or a loop that ended)
HOLD_S = 1.0  # how long each start of the user program runs
SLURM_TARGET = "testcl"
DUPLICATE_POINT = "local_before_start"  # the local backend's fault point inside submit (no process yet)
DUPLICATE_SHARE = 0.3  # of the local schedules: the frozen duplicate, then its cancel
DUPLICATE_HOLD_S = 3.0  # there, each start runs this much longer than the pause


# ---- schedules
@dataclass(frozen=True)
class Schedule:
    seed: int  # the base seed
    index: int  # this schedule's place in the base seed's stream
    backend: str  # "local" | "slurm"
    scenario: str  # one of SCENARIOS
    point: str  # one of launcher.core.faults.POINTS
    action: str  # one of ACTIONS
    victim: str  # "launch" or "watch<i>"
    watchers: tuple  # the mode of each watcher: "loop" or "once"
    starts: tuple  # seconds after the launch started when each watcher starts
    hold_s: float  # pause: seconds from SIGSTOP to SIGCONT; sleep: the sleep's length
    cancel_at: Optional[float] = None  # seconds after the launch started when `cancel` runs (None: no cancel)
    stall_s: Optional[float] = None  # Slurm: slurmctld is stopped this long when the fault point is reached,
    stall_at: Optional[float] = None  # or this many seconds after the launch started, whichever comes first
    sbatch: Optional[str] = None  # Slurm: a wrapper sbatch first on PATH, "kind:mode[:signal]" (sbatch_wrappers)
    crowd: Optional[int] = None  # the watcher count asked for (draw's CROWD); None: drawn, 2 or 3

    def fault(self) -> str:
        """$LAUNCHER_FAULTS of the victim."""
        action = {"pause": "pause", "kill": "kill", "interrupt": "interrupt"}.get(self.action)
        return f"{self.point}={action or f'sleep:{self.hold_s:g}'}"

    def describe(self) -> str:
        who = ", ".join(f"watch{i}:{m}@{s:.2f}s" for i, (m, s) in enumerate(zip(self.watchers, self.starts)))
        out = (f"schedule {self.index} of seed {self.seed}: {self.backend} {self.scenario}; {self.victim} gets "
               f"{self.point}={self.action} (hold {self.hold_s:.2f}s); watchers {who}")
        if self.cancel_at is not None:
            out += f"; cancel at {self.cancel_at:.2f}s"
        if self.stall_s is not None:
            out += f"; slurmctld stopped {self.stall_s:.1f}s at the fault point or at {self.stall_at:.2f}s"
        if self.sbatch:
            out += f"; sbatch wrapper {self.sbatch}"
        return out

    def replay(self) -> str:
        out = f"LAUNCHER_FAULT_SEED={self.seed} LAUNCHER_FAULT_ONLY={self.index}"
        return out + (f" LAUNCHER_FAULT_WATCHERS={self.crowd}" if self.crowd else "")


def draw(seed: int, index: int, backends=("local",), crowd: Optional[int] = None) -> Schedule:
    """Schedule INDEX of base seed SEED (its own stream: it replays alone). CROWD: that many
    concurrent watchers in every schedule (issue 29's acceptance: 3); None: 2 or 3, drawn."""
    rng = random.Random(f"{seed}:{index}")
    backend = rng.choice(list(backends))
    scenario = rng.choice(SCENARIOS)
    point = rng.choice(POINTS)
    action = rng.choice(ACTIONS)
    n = rng.choice((2, 3))  # drawn even when CROWD is given: the rest of the stream stays as it was
    if crowd:
        n = crowd
    # a plain launch's watchers only reconcile: its faults mostly go to the launch
    victim = "launch" if rng.random() < (0.8 if scenario == "launch" else 0.3) else f"watch{rng.randrange(n)}"
    if victim == "launch" and point == "before_lookup":  # a new launch looks nothing up: it never passes there
        point = rng.choice(POINTS[1:])
    # the victim watcher is mostly a loop (it acts first more often than back-to-back --once runs)
    watchers = tuple(rng.choice(("loop",) * 4 + ("once",) if victim == f"watch{i}" else ("loop", "once"))
                     for i in range(n))
    # the victim watcher tends to start first (it is the one that acts more often)
    starts = tuple(round(rng.uniform(0.0, 0.5) if victim == f"watch{i}" else rng.uniform(0.2, 1.5), 2)
                   for i in range(n))
    if action == "pause":
        hold = round(CLAIM_TTL_S + rng.uniform(0.5, 1.5), 2)  # longer than the claim's TTL
    elif action == "sleep":
        hold = rng.choice((0.2, round(CLAIM_TTL_S + 1.0, 2)))
    else:
        hold = 0.0
    cancel_at = round(rng.uniform(0.0, 4.0), 2) if rng.random() < 0.2 else None
    stall = stall_at = None
    if backend == "slurm" and rng.random() < 0.4:
        stall = round(rng.uniform(4.0, 8.0), 1)  # longer than the test cluster's MessageTimeout (3 s)
        stall_at = round(rng.uniform(0.2, 3.0), 2)
    # drawn last, on local only: the Slurm schedules of a seed stay what they were
    if backend == "local" and rng.random() < DUPLICATE_SHARE:
        # the frozen duplicate: a watcher frozen inside the backend's submit (the fence passed,
        # no process started) past its claim; another watcher submits the same attempt, and the
        # frozen one, continued, starts its duplicate and cancels it (it cannot record it)
        scenario, point, action = rng.choice(("fail_first", "sweep")), DUPLICATE_POINT, "pause"
        victim = f"watch{rng.randrange(n)}"
        watchers = tuple("loop" if victim == f"watch{i}" else m for i, m in enumerate(watchers))
        starts = tuple(round(rng.uniform(0.0, 0.5), 2) if victim == f"watch{i}" else s for i, s in enumerate(starts))
        hold = round(CLAIM_TTL_S + rng.uniform(1.0, 2.5), 2)
    return Schedule(seed, index, backend, scenario, point, action, victim, watchers, starts, hold, cancel_at, stall,
                    stall_at, crowd=crowd or None)


def job_name(s: Schedule) -> str:
    """The spec's name: unique per (seed, index), so a schedule's Slurm jobs are told from others'."""
    return f"f{s.seed % 100000}i{s.index}"


def base_seed() -> int:
    """$LAUNCHER_FAULT_SEED, else a fresh one (printed with every failure)."""
    v = os.environ.get("LAUNCHER_FAULT_SEED")
    return int(v) if v else random.SystemRandom().randrange(1, 2**31)


def chosen(seed: int, count: int, backends=("local",)) -> list:
    """The schedules to run: $LAUNCHER_FAULT_ONLY (comma-separated indices) alone, else COUNT;
    each with $LAUNCHER_FAULT_WATCHERS concurrent watchers when set (else 2 or 3, drawn)."""
    only = os.environ.get("LAUNCHER_FAULT_ONLY")
    idx = [int(i) for i in only.split(",")] if only else range(count)
    crowd = int(os.environ.get("LAUNCHER_FAULT_WATCHERS") or 0) or None
    return [draw(seed, i, backends, crowd) for i in idx]


# ---- what a schedule left
@dataclass
class Result:
    schedule: Schedule
    violations: list = field(default_factory=list)
    fired: list = field(default_factory=list)  # "point pid action" lines of the faults log
    notes: list = field(default_factory=list)  # what happened that is not a violation
    duplicates: int = 0  # duplicate submissions its watchers cancelled (event duplicate_cancelled)
    seconds: float = 0.0
    folder: str = ""

    def report(self) -> str:
        lines = [self.schedule.describe(), f"  replay: {self.schedule.replay()}", f"  folder: {self.folder}",
                 f"  fault fired: {self.fired or 'no'}"]
        lines += [f"  VIOLATION: {v}" for v in self.violations]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


PROGRAM = textwrap.dedent("""
    import os, sys, time
    job, index = os.environ["LAUNCHER_JOB_ID"], os.environ.get("LAUNCHER_SWEEP_INDEX")
    if index is not None and not job.endswith("-e" + index):  # an array's element: its row is SWEEP-eINDEX
        job = job + "-e" + index
    with open(os.environ["FAULT_LINES"], "a") as f:
        f.write("%s %s %d %s\\n" % (job, os.environ["LAUNCHER_ATTEMPT"], os.getpid(),
                                   os.environ.get("LAUNCHER_SELF_ID", "?")))
    time.sleep(float(os.environ.get("FAULT_HOLD", "1")))
    first = os.environ["LAUNCHER_ATTEMPT"] == "1"
    fail = os.environ.get("FAULT_FAIL_FIRST", "")  # "all", or the sweep element that fails its attempt 1
    sys.exit(1 if first and fail and fail in ("all", index) else 0)
""")


class Run:
    """One schedule's processes and what they said."""

    def __init__(self, s: Schedule, folder: Path, env: dict, cluster=None):
        self.s, self.dir, self.cluster = s, Path(folder), cluster
        self.dir.mkdir(parents=True, exist_ok=True)
        self.home = self.dir / "home"
        self.lines = self.dir / "lines"
        self.lines.touch()
        self.faults_log = self.dir / "faults.log"
        self.faults_log.touch()
        targets = {}
        if cluster is not None and getattr(cluster, "kind", "") == "docker":  # over SSH to its login node
            targets[SLURM_TARGET] = {**cluster.target, "facts_ttl": 0, "command_timeout": 20}
        elif cluster is not None:
            targets[SLURM_TARGET] = {"backend": "slurm", "slurm_conf": str(cluster.conf), "partition": "batch",
                                     "facts_ttl": 0, "command_timeout": 20}
        (self.dir / "config.yaml").write_text(yaml.safe_dump({"targets": targets}))
        self.env = {**env, "LAUNCHER_HOME": str(self.home), "LAUNCHER_CONFIG": str(self.dir / "config.yaml"),
                    "LAUNCHER_CLAIM_TTL": f"{CLAIM_TTL_S:g}", "LAUNCHER_FAULTS_LOG": str(self.faults_log)}
        self.env.pop("LAUNCHER_FAULTS", None)
        from .sbatch_wrappers import install_for  # a schedule's wrapper sbatch (issue 28)

        self.env = install_for(s, self.dir, self.env, cluster)
        self.procs: list = []  # every Popen this run started: (name, Popen)
        self.lock = threading.Lock()
        self.said: list = []  # (name, returncode, stdout, stderr, ended at)
        self.stop = threading.Event()
        self.continued: set = set()
        self.cancel_proc = None
        self.cancel_target = None

    @property
    def target(self) -> str:
        return SLURM_TARGET if self.s.backend == "slurm" else "local"

    # ---- processes
    def popen(self, name: str, args: list, faulty: bool) -> subprocess.Popen:
        env = dict(self.env)
        if faulty:
            env["LAUNCHER_FAULTS"] = self.s.fault()
        out = open(self.dir / f"{name}.out", "wb")
        err = open(self.dir / f"{name}.err", "wb")
        try:
            p = subprocess.Popen([LAUNCHER, *args], env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                 cwd=str(self.dir), start_new_session=True)
        finally:
            out.close()
            err.close()
        with self.lock:
            self.procs.append((name, p))
        return p

    def collect(self, name: str, p: subprocess.Popen) -> None:
        with self.lock:
            self.said.append((name, p.returncode, (self.dir / f"{name}.out").read_text(errors="replace"),
                              (self.dir / f"{name}.err").read_text(errors="replace"), time.time()))

    def fired(self) -> list:
        return [ln.split() for ln in self.faults_log.read_text().splitlines() if ln.strip()]

    def on_nodes(self, path: Path) -> str:
        """PATH (of this machine) as the job sees it: on a dockerized cluster the schedule's
        folder lies on the shared home volume, which the nodes mount at /home."""
        if getattr(self.cluster, "kind", "") != "docker":
            return str(path)
        return "/home/" + str(Path(path).relative_to(self.cluster.home_on_host))

    def spec(self) -> Path:
        prog = self.dir / "prog.py"
        prog.write_text(PROGRAM)
        docker = getattr(self.cluster, "kind", "") == "docker"
        python = "python3" if docker else sys.executable  # the nodes' own Python in a container
        if docker:  # the job runs as alice: she appends to the lines file
            self.lines.chmod(0o666)
        body = {"name": job_name(self.s), "run": f"{python} {self.on_nodes(prog)}",
                "env": {"FAULT_LINES": self.on_nodes(self.lines), "FAULT_HOLD": f"{HOLD_S:g}"},
                "recovery": {"app_error": 2}}
        if self.s.point == DUPLICATE_POINT:  # the real attempt still runs when the duplicate is cancelled
            body["env"]["FAULT_HOLD"] = f"{self.s.hold_s + DUPLICATE_HOLD_S:g}"
        if self.s.scenario == "fail_first":
            body["env"]["FAULT_FAIL_FIRST"] = "all"
        if self.s.scenario == "sweep":  # element 0's first attempt fails: a watcher resubmits that element
            body["env"]["FAULT_FAIL_FIRST"] = "0"
            body["sweep"] = {"grid": {"lr": [1, 2, 3]}, "max_parallel": 2}
        if self.s.backend == "slurm":
            body["resources"] = {"time_limit": "5m"}
        f = self.dir / "spec.yaml"
        f.write_text(yaml.safe_dump(body, sort_keys=False))
        return f

    def watcher(self, i: int, mode: str) -> None:
        """Watcher I until the stop event: a `watch` loop (started again when it ends by itself:
        it does once no job is open, e.g. before the launch wrote its row), or back-to-back
        `watch --once` runs."""
        faulty = self.s.victim == f"watch{i}"
        if self.stop.wait(self.s.starts[i]):
            return
        n = 0
        while not self.stop.is_set():
            name = f"watch{i}-{n}"
            args = ["watch", "--exit-when-idle", "--interval", f"{WATCH_INTERVAL_S:g}"] if mode == "loop" else ["watch", "--once"]
            # the fault goes to this watcher's runs until one of them reached it
            p = self.popen(name, args, faulty and not self.fired())
            while p.poll() is None:
                if self.stop.wait(0.1):
                    self.end(p)
            p.wait()
            self.collect(name, p)
            n += 1
            self.stop.wait(ONCE_GAP_S)

    def end(self, p: subprocess.Popen) -> None:
        """End P's session (it is ours: started with start_new_session), continued first if paused."""
        if p.poll() is not None:
            return
        for sig in (signal.SIGCONT, signal.SIGTERM):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                return

    @property
    def url(self) -> str:
        """The schedule's PostgreSQL store ("": its SQLite file under its home)."""
        return self.env.get("LAUNCHER_STATE_URL", "")

    def rows(self) -> list:
        return store_query(self.home, self.url, "SELECT job_id, state FROM jobs")


def ctld_pid(cluster) -> Optional[int]:
    """slurmctld's pid on this machine: of a netns test cluster (cluster.sh writes it to
    run/slurmctld.pid.sh), or of a dockerized one (its controller container's process, as
    `docker top` lists it: a container's processes are this machine's, SIGSTOP reaches them)."""
    if getattr(cluster, "kind", "") == "docker":
        p = subprocess.run(["docker", "top", cluster.container("slurmctld"), "-eo", "pid,comm"],
                           capture_output=True, text=True, timeout=30)
        pids = [int(ln.split()[0]) for ln in p.stdout.splitlines()[1:]
                if ln.split()[1:] == ["slurmctld"]]
        return pids[0] if len(pids) == 1 else None
    f = Path(cluster.state) / "run" / "slurmctld.pid.sh"
    try:
        return int(f.read_text().split()[0])
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def run_schedule(s: Schedule, folder: Path, env: Optional[dict] = None, cluster=None,
                 ctld_lock: Optional[threading.Lock] = None) -> Result:
    """Run schedule S in FOLDER (its own LAUNCHER_HOME), heal it, check the invariants."""
    t0 = time.monotonic()
    r = Run(s, folder, dict(env if env is not None else os.environ), cluster)
    res = Result(s, folder=str(folder))
    threads = [threading.Thread(target=r.watcher, args=(i, m), daemon=True) for i, m in enumerate(s.watchers)]
    spec = r.spec()
    launch = r.popen("launch", ["launch", str(spec), "--target", r.target], s.victim == "launch")
    start = time.monotonic()
    for t in threads:
        t.start()
    paused: dict = {}  # pid -> when to continue it
    stalled_until = None  # while slurmctld is stopped: when to continue it
    stall_pid = ctld_pid(cluster) if (cluster is not None and s.stall_s) else None
    seen = 0
    launch_done = None
    quiet_next = 0.0
    deadline = start + 90.0
    try:
        while True:
            now = time.monotonic()
            fired = r.fired()
            for f in fired[seen:]:
                if len(f) >= 3 and f[2] == "pause":
                    paused[int(f[1])] = now + s.hold_s
            if stall_pid and stalled_until is None and (len(fired) > seen or now - start >= s.stall_at):
                if ctld_lock is None or ctld_lock.acquire(blocking=False):  # else another schedule's stall: later
                    os.kill(stall_pid, signal.SIGSTOP)
                    stalled_until = now + s.stall_s
            seen = len(fired)
            for pid, when in list(paused.items()):
                if now >= when:
                    _signal(pid, signal.SIGCONT)
                    r.continued.add(pid)
                    del paused[pid]
            if stalled_until is not None and now >= stalled_until and stall_pid:
                os.kill(stall_pid, signal.SIGCONT)
                stall_pid = None
                if ctld_lock is not None:
                    ctld_lock.release()
                res.notes.append(f"slurmctld was stopped for {s.stall_s:g}s")
            if s.cancel_at is not None and r.cancel_proc is None and now - start >= s.cancel_at:
                r.cancel_target = _cancel_target(r)
                if r.cancel_target:
                    r.cancel_proc = r.popen("cancel", ["cancel", r.cancel_target], False)
            if r.cancel_proc is not None and r.cancel_proc.poll() is not None and not any(
                    n == "cancel" for n, *_ in r.said):
                r.collect("cancel", r.cancel_proc)
                res.notes += _check_cancel_now(r)
            if launch_done is None and launch.poll() is not None:
                launch_done = now
                r.collect("launch", launch)
            settled = (launch_done is not None and not paused and stall_pid is None
                       and (r.cancel_proc is None or r.cancel_proc.poll() is not None)
                       and (s.cancel_at is None or r.cancel_proc is not None or now - start > s.cancel_at + 2))
            if settled and (now - launch_done > 12.0 or (now - launch_done > 1.0 and now >= quiet_next and quiet(r))):
                break
            if settled and now - launch_done > 1.0 and now >= quiet_next:
                quiet_next = now + 0.5  # quiet() may ask squeue: twice a second is enough
            if now > deadline:
                res.notes.append("the active phase hit its 90 s deadline")
                break
            time.sleep(0.05)
    finally:
        # heal: continue whatever is paused, stop the watchers and anything still running
        for pid in list(paused):
            _signal(pid, signal.SIGCONT)
        if stall_pid and stalled_until is not None:
            os.kill(stall_pid, signal.SIGCONT)
            if ctld_lock is not None:
                ctld_lock.release()
        r.stop.set()
        for t in threads:
            t.join(timeout=60)
        for name, p in list(r.procs):
            if p.poll() is None:
                r.end(p)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        if launch_done is None:
            r.collect("launch", launch)
        if r.cancel_proc is not None and not any(n == "cancel" for n, *_ in r.said):
            r.collect("cancel", r.cancel_proc)
    res.fired = [" ".join(f) for f in r.fired()]
    for name, rc, out, err, _ in r.said:
        if name == "launch":
            last = (err.strip().splitlines() or out.strip().splitlines() or [""])[-1]
            res.notes.append(f"launch exited {rc}: {last[:200]}")
    try:
        heal(r, res=res)
        res.violations += check(r, res)
        res.duplicates = duplicates_cancelled(r)
    finally:
        stop_jobs(r)
    res.seconds = time.monotonic() - t0
    return res


def _signal(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _cancel_target(r: Run) -> Optional[str]:
    """What `cancel` is run on: the launch's job (a sweep's id, else its row), once it has a row."""
    rows = r.rows()
    if not rows:
        return None
    ids = sorted(x["job_id"] for x in rows)
    if r.s.scenario == "sweep":
        return re.sub(r"-e\d+$", "", ids[0])
    return ids[0]


CLOSED = ("COMPLETED", "FAILED", "CANCELLED", "STOPPED")


def quiet(r: Run, slurm: bool = True) -> bool:
    """Every job closed, or what is left open is a SUBMITTING row with no job process alive
    (nothing was found for it: it is settled after the launcher's quiet period) and, on Slurm
    (unless not SLURM), no Slurm job holding its dedupe token that the store has not adopted
    (``unadopted``: a failed squeue is not quiet either)."""
    open_ = [x for x in r.rows() if x["state"] not in CLOSED]
    if not open_:
        return True
    if not all(x["state"] == "SUBMITTING" for x in open_) or _live_supervisors(r) or started_unrecorded(r):
        return False
    return r.cluster is None or not slurm or unadopted(r) == []


def started_unrecorded(r: Run) -> list:
    """The SUBMITTING rows whose attempt's start was claimed in its job folder (``attempt-N.start``,
    the local target's create-only start record) though no attempt N is recorded: the program ran
    and `watch` adopts it by that trace, once the claim the launch held (it may have died holding
    it) has expired. Not quiet until then: a seed 7212 schedule's launch was interrupted while
    recording, and heal read the invariants within the claim TTL, before any watch could adopt."""
    from launcher.jobside.startclaim import holder  # the record's one reader

    out = []
    for x in store_rows(r.home, r.url):
        if x["state"] != "SUBMITTING" or x["attempt"] is None or x["natives"]:
            continue
        if holder(str(r.home / "jobs" / x["job_id"]), x["attempt"]):
            out.append(x["job_id"])
    return out


def cli(r: Run, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([LAUNCHER, *args], env=r.env, capture_output=True, text=True, timeout=timeout,
                          cwd=str(r.dir))


def heal(r: Run, limit_s: float = 45.0, res: Optional[Result] = None) -> None:
    """`launcher watch --once` until quiet: every job closed, or what is left open is a
    SUBMITTING row nothing was found for (it is settled after the launcher's quiet period).
    On Slurm, quiet also means no SUBMITTING row's dedupe token is held by a Slurm job the
    store has not adopted (``unadopted``): while the controller is slow, sbatch's answer may
    have been lost and watch's token lookups time out, so watch has not adopted the job yet;
    the passes go on (LIMIT_S in all) and RES gets a note of what they waited for."""
    t0 = time.monotonic()
    deadline = t0 + limit_s
    waited: dict = {}  # row -> the Slurm ids holding its token ("(squeue)": it did not answer)
    while True:
        p = cli(r, "watch", "--once")
        with r.lock:
            r.said.append(("heal", p.returncode, p.stdout, p.stderr, time.time()))
        pending = [] if r.cluster is None else unadopted(r)
        if pending is None:
            waited.setdefault("(squeue)", "")
        for row in pending or ():
            waited.setdefault(row["job_id"], ", ".join(row["held_by"]))
        if (pending == [] and quiet(r, slurm=False)) or time.monotonic() > deadline:
            break
        time.sleep(WATCH_INTERVAL_S)
    if waited and res is not None:
        left = unadopted(r, tries=3)
        what = "; ".join("squeue to answer" if j == "(squeue)" else f"{j} (its token held by Slurm job {ids})"
                         for j, ids in waited.items())
        res.notes.append(f"heal waited {time.monotonic() - t0:.1f}s for watch to adopt: {what}"
                         + ("" if left == [] else "; still unadopted: "
                            + ("squeue failed" if left is None else ", ".join(x["job_id"] for x in left))))


def _live_supervisors(r: Run) -> dict:
    """{pgid: (job id, attempt)} of the local job process groups of this run still alive."""
    jobs = str(r.home / "jobs") + "/"
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
            cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        pid, pgid = int(entry.name), int(fields[2])
        for arg in cmd:
            a = arg.decode(errors="replace")
            m = re.match(re.escape(jobs) + r"([^/]+)/attempt-(\d+)\.sh$", a)
            if m and pid == pgid:
                out[pgid] = (m.group(1), int(m.group(2)))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop_jobs(r: Run) -> None:
    """End every job process group this schedule's launches started (ours), and on Slurm
    cancel the schedule's jobs by their ids."""
    for pgid in _live_supervisors(r):
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
    if r.cluster is not None:
        try:
            ids = [j for j, *_ in _slurm_jobs(r, tries=3) if j]
        except SqueueFailed:
            ids = []  # the test's clean_queue (the bench's scancel -u) cancels what is left
        if ids:
            r.cluster.run("scancel", *sorted({i.split("_")[0] for i in ids}), check=False)


# ---- the invariants
def store_query(home: Path, url: str, *queries: str, strict: bool = False):
    """The rows (dicts) of each of QUERIES on the state store of LAUNCHER_HOME HOME, or of the
    PostgreSQL store URL, read-only and outside the launcher; one list for one query, a tuple of
    lists for several. A store not there yet, or unreadable, reads as empty unless STRICT."""
    if url:
        import psycopg
        from psycopg.rows import dict_row

        try:
            with psycopg.connect(url, autocommit=True, row_factory=dict_row) as con:
                out = [con.execute(q).fetchall() for q in queries]
        except psycopg.Error:
            if strict:
                raise
            out = [[] for _ in queries]
    else:
        db = Path(home) / "state.db"
        if not db.exists():
            out = [[] for _ in queries]
        else:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
            con.row_factory = sqlite3.Row
            try:
                out = [[dict(x) for x in con.execute(q)] for q in queries]
            except sqlite3.Error:
                if strict:
                    raise
                out = [[] for _ in queries]
            finally:
                con.close()
    return out[0] if len(out) == 1 else tuple(out)


def _store(r: Run) -> tuple:
    """(jobs {id: row}, attempts {(job, attempt): row}) of the schedule's state store."""
    jobs, attempts = store_query(r.home, r.url, "SELECT * FROM jobs", "SELECT * FROM attempts", strict=True)
    return {x["job_id"]: x for x in jobs}, {(x["job_id"], x["attempt"]): x for x in attempts}


def duplicates_cancelled(r: Run) -> int:
    """How many duplicate submissions the schedule's watchers cancelled (``duplicate_cancelled`` events)."""
    rows = store_query(r.home, r.url, "SELECT count(*) AS n FROM events WHERE kind = 'duplicate_cancelled'")
    return int(rows[0]["n"]) if rows else 0


def _starts(r: Run) -> list:
    out = []
    for ln in r.lines.read_text().splitlines():
        parts = ln.split()
        if len(parts) == 4:
            out.append((parts[0], int(parts[1]), int(parts[2]), parts[3]))
    return out


class SqueueFailed(RuntimeError):
    """squeue did not answer (the controller is slow or stopped) however often it was asked."""


def _slurm_jobs(r: Run, tries: int = 5, gap_s: float = 2.0) -> list:
    """(job id, comment, state) of every Slurm job carrying one of this schedule's tokens.
    A failed squeue (an exit code, or no answer in 30 s) is asked again, TRIES times in all
    (GAP_S between), then SqueueFailed: an empty answer is never read from a failed query."""
    if r.cluster is None:
        return []
    why = ""
    for n in range(max(1, tries)):
        if n:
            time.sleep(gap_s)
        try:
            p = r.cluster.run("squeue", "-h", "-t", "all", "-o", "%i|%k|%T", check=False, timeout=30)
        except subprocess.TimeoutExpired:
            why = "no answer in 30 s"
            continue
        if p.returncode == 0:
            return parse_squeue(p.stdout, job_name(r.s))
        why = f"exit {p.returncode}: {(p.stderr or '').strip()[-200:]}"
    raise SqueueFailed(f"squeue failed {max(1, tries)} times ({why})")


def parse_squeue(text: str, name: str) -> list:
    """Pure: (job id, comment, state) of the lines of `squeue -o %i|%k|%T` whose comment is a
    dedupe token of a job named NAME (its ids are NAME-xxxxxx)."""
    prefix = f"launcher:{name}-"
    out = []
    for ln in text.splitlines():
        jid, _, rest = ln.partition("|")
        comment, _, state = rest.rpartition("|")
        if comment.startswith(prefix):
            out.append((jid.strip(), comment.strip(), state.strip()))
    return out


def unadopted_rows(rows: list, slurm_jobs: list) -> list:
    """Pure: the SUBMITTING rows whose dedupe token a Slurm job holds under an id the store has
    not recorded: `watch` has yet to adopt that job (its token lookups may still be timing out,
    e.g. sbatch's answer was lost to a slow controller), so the invariants are not to be read yet.

    ROWS: every job row of the store, as dicts with ``job_id``, ``state``, ``attempt`` (the
    attempt a SUBMITTING row submits: its token names it), optionally ``sweep_id`` and
    ``natives`` (the ids recorded for its attempts). SLURM_JOBS: (id, comment, state) as
    ``_slurm_jobs`` reads them. A token ``launcher:JOB:N`` is a row's when JOB is the row's id,
    its sweep's id or the prefix of its ``JOB-eI`` id, and N its attempt; a Slurm job is adopted
    when its id, or its array's (``5_1`` -> ``5``), is recorded for any row. Returns those rows,
    each with ``held_by``: the ids of the unadopted Slurm jobs holding its token."""
    recorded = set()
    for row in rows:
        for n in row.get("natives") or ():
            recorded.update({str(n), str(n).split("_")[0]})
    out = []
    for row in rows:
        if row.get("state") != "SUBMITTING":
            continue
        job, attempt = row["job_id"], row.get("attempt")
        held = []
        for jid, token, _ in slurm_jobs:
            kind, _, rest = token.partition(":")
            owner, _, n = rest.rpartition(":")
            if kind != "launcher" or not owner:
                continue
            mine = owner == job or owner == row.get("sweep_id") or job.startswith(owner + "-e")
            if mine and (attempt is None or str(attempt) == n) and jid not in recorded and \
                    jid.split("_")[0] not in recorded:
                held.append(jid)
        if held:
            out.append({**row, "held_by": held})
    return out


def store_rows(home: Path, url: str = "") -> list:
    """The rows ``unadopted_rows`` reads: every job of the state store of LAUNCHER_HOME HOME (or
    URL's) with the attempt a SUBMITTING row submits (its meta's, as ``watch`` reads it) and the
    ids recorded for it."""
    from launcher.recovery.state import RecoveryState

    attempts, jobs = store_query(home, url, "SELECT job_id, native_id FROM attempts WHERE native_id IS NOT NULL",
                                 "SELECT job_id, state, sweep_id, meta FROM jobs")
    natives = collections.defaultdict(list)
    for a in attempts:
        natives[a["job_id"]].append(str(a["native_id"]))
    out = []
    for x in jobs:
        try:
            attempt = RecoveryState.load(json.loads(x["meta"] or "{}")).attempt
        except (ValueError, TypeError):
            attempt = None
        out.append({"job_id": x["job_id"], "state": x["state"], "sweep_id": x["sweep_id"], "attempt": attempt,
                    "natives": natives.get(x["job_id"], [])})
    return out


def unadopted(r: Run, tries: int = 1) -> Optional[list]:
    """``unadopted_rows`` of the schedule now; None when squeue did not answer (TRIES times)."""
    rows = store_rows(r.home, r.url)
    if not any(x["state"] == "SUBMITTING" for x in rows):
        return []
    try:
        return unadopted_rows(rows, _slurm_jobs(r, tries=tries))
    except SqueueFailed:
        return None


def check(r: Run, res: Result) -> list:
    v = []
    p = cli(r, "status", "--json")
    if p.returncode != 0:
        return [f"`launcher status --json` exited {p.returncode}: {p.stderr.strip()[-500:]}"]
    listed = {x["job_id"]: x for x in json.loads(p.stdout)}
    jobs, attempts = _store(r)
    for j in jobs:
        if j not in listed:
            v.append(f"(2) job {j} is in the state store but `status --json` does not list it")
    by_native = {(a["job_id"], a["attempt"]): a["native_id"] for a in attempts.values()}
    starts = _starts(r)
    v += start_violations(starts, listed, by_native)
    if r.s.backend == "local":
        for pgid, (job, attempt) in _live_supervisors(r).items():
            row = jobs.get(job)
            if row is None or str(by_native.get((job, attempt))) != str(pgid):
                v.append(f"(2) local process group {pgid} (job {job} attempt {attempt}) is alive but status "
                         f"records {by_native.get((job, attempt))} for that attempt (job state "
                         f"{row and row['state']})")
            elif row["state"] in CLOSED:
                v.append(f"(2) local process group {pgid} (job {job} attempt {attempt}) is alive behind a "
                         f"{row['state']} row")
        for marker in sorted((r.home / "jobs").glob("*/attempt-*.started")):
            job, attempt = marker.parent.name, int(marker.name.split("-")[1].split(".")[0])
            if (job, attempt) not in by_native and not (job in jobs and jobs[job]["state"] == "SUBMITTING"
                                                       and not _ran(starts, job, attempt)):
                v.append(f"(2) job {job} attempt {attempt} has a start marker ({marker.read_text().strip()}) but "
                         f"status has no such attempt (job {'state ' + jobs[job]['state'] if job in jobs else 'unknown'})")
    else:
        try:
            held = _slurm_jobs(r)  # a failed squeue is asked again, never read as "no job"
        except SqueueFailed as e:
            held = []
            v.append(f"(2) not checked: {e}")
        for jid, token, state in held:
            _, job, attempt = token.split(":")
            attempt = int(attempt)
            known = {str(n) for (j, a), n in by_native.items() if j == job or j.startswith(job + "-e")}
            if job not in jobs and not any(j.startswith(job + "-e") for j in jobs):
                v.append(f"(2) Slurm job {jid} ({token}, {state}) belongs to no job status lists")
            elif state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED") and \
                    not any(k == jid or k.split("_")[0] == jid.split("_")[0] for k in known):
                v.append(f"(2) Slurm job {jid} ({token}) is {state} but status records no attempt with its id")
    adopted = store_query(r.home, r.url, "SELECT job_id, detail FROM events WHERE kind = 'adopted'", strict=True)
    v += _check_said(r, listed, jobs, accepted_ids(attempts, adopted), starts)
    # (4), on local (measured there; the Slurm tiers keep invariants 1-3 until it is measured on them)
    if r.s.backend == "local" and not any(n == "cancel" for n, *_ in r.said) and r.cancel_proc is None:
        v += uncalled_cancels(r.s.scenario, jobs, attempts, starts)
    return v


def exits_nonzero(scenario: str, job: str, attempt: int) -> bool:
    """Pure: whether PROGRAM fails that start (FAULT_FAIL_FIRST: every job's attempt 1, or sweep element 0's)."""
    return attempt == 1 and (scenario == "fail_first" or (scenario == "sweep" and job.endswith("-e0")))


def uncalled_cancels(scenario: str, jobs: dict, attempts: dict, starts: list) -> list:
    """Pure: invariant 4, for a schedule where nobody ran `cancel`: no job or attempt ended
    CANCELLED, and every attempt that ran user code and ended is recorded as its program
    ended (exit 0: COMPLETED; exit 1: FAILED), whatever duplicates of it were cancelled."""
    v = []
    for j, row in jobs.items():
        if row["state"] == "CANCELLED":
            v.append(f"(4) job {j} is CANCELLED ({row.get('reason')!r}) though nobody ran `cancel`")
    for (j, a), row in attempts.items():
        if row["state"] == "CANCELLED":
            v.append(f"(4) job {j} attempt {a} (id {row['native_id']}) is CANCELLED ({row.get('reason')!r}) though "
                     "nobody ran `cancel`")
    for job, attempt, _, self_id in starts:
        row = attempts.get((job, attempt))
        if row is None or str(row["native_id"]) != self_id or row["state"] not in ("COMPLETED", "FAILED"):
            continue
        want = "FAILED" if exits_nonzero(scenario, job, attempt) else "COMPLETED"
        if row["state"] != want:
            v.append(f"(4) job {job} attempt {attempt} (id {self_id}) is {row['state']} ({row.get('reason')!r}); "
                     f"its program exited {1 if want == 'FAILED' else 0}")
    return v


def start_violations(starts: list, listed: dict, by_native: dict) -> list:
    """Pure: invariants 1 and 2 over the starts that ran user code (STARTS: (job, attempt, pid,
    self id)), the jobs `status --json` listed (LISTED: {job id: row}) and the attempts the
    store recorded (BY_NATIVE: {(job, attempt): native id})."""
    v = []
    # (1) no (job, attempt) ran user code twice
    for (job, attempt), n in collections.Counter((j, a) for j, a, _, _ in starts).items():
        if n > 1:
            ids = [s for j, a, _, s in starts if (j, a) == (job, attempt)]
            v.append(f"(1) job {job} attempt {attempt} ran user code {n} times (ids {ids})")
    # (2) every start that ran user code is an attempt status has, with the id that ran it
    for job, attempt, pid, self_id in starts:
        if job not in listed:
            v.append(f"(2) job {job} ran user code (attempt {attempt}, id {self_id}) but `status` does not list it")
        elif (job, attempt) not in by_native:
            v.append(f"(2) job {job} attempt {attempt} ran user code as id {self_id}; status has no such attempt "
                     f"(state {listed[job]['state']})")
        elif str(by_native[(job, attempt)]) != self_id:
            v.append(f"(2) job {job} attempt {attempt} ran user code as id {self_id}; status records it as id "
                     f"{by_native[(job, attempt)]}")
    return v


def _ran(starts, job, attempt) -> bool:
    return any(j == job and a == attempt for j, a, _, _ in starts)


SUBMITTED = re.compile(r"^(\S+): submitted to (\S+) \((\S+) id (\S+)\)", re.M)
CLOSED_CANCELLED = re.compile(r"^(\S+): closed as CANCELLED", re.M)
CANCELLED = re.compile(r"^(\S+): cancelled attempt (\d+) \((\S+) id (\S+)\)", re.M)
WATCH_ID = re.compile(r"^(\S+): (resubmitted|adopted|started) \(.*?(?:->\s*)?\S+ id (\S+)\)\s*$", re.M)


def accepted_ids(attempts: dict, adopted: list) -> set:
    """Pure: the (job, native id) a command may truthfully have named as what it submitted: every
    recorded attempt's, and one an ``adopted`` event says was replaced: a submission recorded
    first that stood down for a second submission of the same attempt that started first
    (``watch.started_first``, event ``adopted`` with ``replaces``; the adopted id recorded). The
    command that made the replaced one did submit it and record it (a loaded CI run: a watcher
    said "resubmitted -> id 13464", and 13453, whose submitter's claim had lapsed, started first)."""
    natives = {(j, str(a["native_id"])) for (j, _), a in attempts.items()}
    replaced = set()
    for e in adopted:
        d = json.loads(e["detail"]) if isinstance(e["detail"], str) else (e["detail"] or {})
        if d.get("replaces") and (e["job_id"], str(d.get("native_id"))) in natives:
            replaced.add((e["job_id"], str(d["replaces"])))
    return natives | replaced


def _check_said(r: Run, listed: dict, jobs: dict, natives: set, starts: list) -> list:
    """Invariant 3 over what each command printed; NATIVES: ``accepted_ids``."""
    v = []
    live = _live_supervisors(r) if r.s.backend == "local" else {}
    for name, rc, out, err, _ in r.said:
        text = out + "\n" + err
        if name == "launch":
            m = SUBMITTED.search(text)
            if rc == 0:
                if m is None:
                    v.append(f"(3) launch exited 0 without naming the job it submitted: {text.strip()[-300:]}")
                    continue
                job, native = m.group(1), m.group(4)
                ids = [j for j in jobs if j == job or j.startswith(job + "-e")]
                if not ids:
                    v.append(f"(3) launch exited 0 and printed job {job}, which status does not have")
                elif not any((j, native) in natives or (j, f"{native}_0") in natives for j in ids):
                    v.append(f"(3) launch printed {job} ({m.group(3)} id {native}); status records no attempt "
                             f"with that id")
            elif "rejected" in text:
                own = [x for x in starts]
                if own or live:
                    v.append(f"(3) launch exited {rc} saying the scheduler rejected it, but user code ran "
                             f"({own}) or jobs live ({live})")
        elif name == "cancel":
            for m in CANCELLED.finditer(text):
                native = m.group(4)
                if r.s.backend == "local" and native.isdigit() and int(native) in live:
                    v.append(f"(3) cancel said it cancelled {m.group(0).split(': ', 1)[1]} but it still runs")
            for m in CLOSED_CANCELLED.finditer(text):
                job = m.group(1)
                if job not in jobs:
                    v.append(f"(3) cancel said {job} is closed as CANCELLED; status does not have it")
                elif jobs[job]["state"] != "CANCELLED":
                    v.append(f"(3) cancel said {job} is closed as CANCELLED; status says {jobs[job]['state']}")
                for pgid, (j, a) in live.items():
                    if j == job:
                        v.append(f"(3) cancel closed {job} as CANCELLED but its attempt {a} runs (group {pgid})")
        elif name.startswith("watch") or name == "heal":
            for m in WATCH_ID.finditer(text):
                job, native = m.group(1), m.group(3)
                if (job, native) not in natives:
                    v.append(f"(3) {name} said `{m.group(0).strip()}`; status records no attempt of {job} with "
                             f"id {native}")
    return v


def _check_cancel_now(r: Run) -> list:
    """Right after `cancel` returned: every id it said it cancelled is gone (local)."""
    notes = []
    name, rc, out, err, _ = [x for x in r.said if x[0] == "cancel"][-1]
    for m in CANCELLED.finditer(out):
        native = m.group(4)
        if r.s.backend == "local" and native.isdigit() and _alive(int(native)):
            notes.append(f"cancel said it cancelled local id {native}, which still ran when it returned")
    return notes


def summary(results: list) -> str:
    """Counts: schedules run, per fault point and action (run / fired), violations."""
    by = collections.Counter()
    fired = collections.Counter()
    for x in results:
        for key in (("scenario", x.schedule.scenario), ("point", x.schedule.point), ("action", x.schedule.action),
                    ("victim", "launch" if x.schedule.victim == "launch" else "watcher"),
                    ("backend", x.schedule.backend)):
            by[key] += 1
            if x.fired:
                fired[key] += 1
    bad = [x for x in results if x.violations]
    out = [f"schedules run: {len(results)}; a fault fired in {sum(1 for x in results if x.fired)}; "
           f"violations: {sum(len(x.violations) for x in bad)} in {len(bad)} schedules"]
    for kind in ("backend", "scenario", "point", "action", "victim"):
        out.append(f"  {kind:8} " + ", ".join(f"{k}={by[(kind, k)]} (fired {fired[(kind, k)]})"
                                            for (kd, k) in sorted(by) if kd == kind))
    dup = [x for x in results if x.schedule.point == DUPLICATE_POINT]
    out.append(f"  frozen duplicate schedules: {len(dup)}, a duplicate cancelled in "
               f"{sum(1 for x in dup if x.duplicates)} (in all schedules: {sum(1 for x in results if x.duplicates)})")
    cancels = sum(1 for x in results if x.schedule.cancel_at is not None)
    stalls = sum(1 for x in results if x.schedule.stall_s is not None)
    out.append(f"  with a concurrent cancel: {cancels}; with slurmctld stopped: {stalls}")
    return "\n".join(out)


def loop_timeout(count: int, parallel: int, round_s: int) -> int:
    """A fault loop's pytest timeout: ROUND_S for each round of PARALLEL schedules, at least the
    suite's 600 s. Each schedule has deadlines of its own (a hung one fails by itself), so the
    loop's timeout only has to outlast COUNT healthy schedules on a loaded CI machine, where the
    tiers share 2 cores and a schedule takes 2-4 times what it takes alone."""
    return max(600, -(-count // parallel) * round_s)


def run_many(schedules: list, root: Path, parallel: int = 4, env: Optional[dict] = None, cluster=None,
             echo=None, keep: bool = False, url: str = "") -> list:
    """Run SCHEDULES, PARALLEL at a time (each in ROOT/s<index>: its own LAUNCHER_HOME); ECHO gets
    each one's one-line outcome (and the report of a schedule with a violation). The folder of a
    schedule without violations is removed unless KEEP. URL: a PostgreSQL server on which each
    schedule's store is a fresh database of its own (dropped with its folder), its launches and
    watchers a team's on one server; "": each schedule's SQLite file."""
    import shutil
    from concurrent.futures import ThreadPoolExecutor

    env = dict(env if env is not None else os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # its CLI runs compile the launcher once, not every time
    env.setdefault("PYTHONPYCACHEPREFIX", str(Path(root) / "pycache"))
    ctld_lock = threading.Lock()  # one schedule at a time stops slurmctld

    def one(s: Schedule) -> Result:
        folder = Path(root) / f"s{s.index}"
        database = f"faults_{s.index}_{secrets.token_hex(3)}" if url else ""
        try:
            own = env
            if database:
                _pg_admin(url, f'CREATE DATABASE "{database}"')
                own = {**env, "LAUNCHER_STATE_URL": _with_database(url, database)}
            res = run_schedule(s, folder, own, cluster, ctld_lock)
        except Exception as e:  # noqa: BLE001 - a harness failure is reported as the schedule's
            res = Result(s, violations=[f"the harness failed: {type(e).__name__}: {e}"], folder=str(folder))
        if database and not res.violations and not keep:
            _pg_admin(url, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        if echo is not None:
            mark = "VIOLATION" if res.violations else "ok"
            echo(f"[{mark}] {s.describe()} (fired: {len(res.fired)}, duplicates cancelled: {res.duplicates}, "
                 f"{res.seconds:.1f}s)"
                 + "".join(f"\n    {n}" for n in res.notes))
            if res.violations:
                echo(res.report())
        if not res.violations and not keep:
            shutil.rmtree(folder, ignore_errors=True)
        return res

    with ThreadPoolExecutor(max(1, parallel)) as ex:
        return list(ex.map(one, schedules))


def _pg_admin(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        c.execute(statement)


def _with_database(url: str, name: str) -> str:
    """URL with its database (the path) replaced by NAME, its query kept."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/{name}" + (f"?{parts.query}" if parts.query else "")


def as_dict(res: Result) -> dict:
    return {**asdict(res), "schedule": asdict(res.schedule)}
