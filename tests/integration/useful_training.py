"""Issue 30's targets measured on a fault schedule (tests/integration/test_useful_training_*.py):
a training stand-in that checkpoints through the job-side helper, reports its model FLOPs,
and writes its own step log with timestamps; and the test's side: the truth it records
(each fault's moment, when the scheduler could first show the end, the watcher's passes) and
the independent recomputation of effective MFU it checks `launcher report JOB --json` against.

Nothing here reads the product's accounting code: kept steps come from the program's own log,
paid time from the scheduler's start and end of each run, and the arithmetic is written out
below from the issue's definition:

    effective MFU = model FLOPs of the committed steps that later attempts kept
                    / (peak x accelerators x paid wall time of every attempt)
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from tests.fixtures.polling import poll

# FLOPs of step s: BASE x (1 + s % 4). Not constant, so a report that counted the wrong steps
# (lost ones twice, kept ones not at all) cannot agree by accident.
BASE_FLOPS = 1_000_000.0
PEAK_TFLOPS = 0.0001  # resources.peak_tflops: 1e8 FLOP/s, a CPU-sized figure; MFU lands near 20%

PROGRAM = textwrap.dedent('''
    import json, os, sys, time
    sys.path.insert(0, os.environ["LAUNCHER_JOB_PYZ"])
    from launcher import jobside

    log_path, steps, every, step_s, base = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), \\
        float(sys.argv[5])
    # "G:S,...": generation G stops after step S and waits there for the test's fault (a SIGKILL,
    # or a preemption notice it answers with a save and exit 75), so every fault lands on a live
    # run at a chosen step however late a loaded machine lets the test see that step
    holds = dict(tuple(int(x) for x in h.split(":")) for h in (sys.argv[6] if len(sys.argv) > 6 else "").split(",") if h)
    gen = int(os.environ["LAUNCHER_GENERATION"])

    def log(event, **kw):
        with open(log_path, "a") as f:
            f.write(json.dumps(dict(t=time.time(), gen=gen, pid=os.getpid(), event=event, **kw)) + "\\n")

    def flops(s):
        return base * (1 + s % 4)

    def commit(step, **kw):
        with jobside.save(step) as d:
            with open(os.path.join(d, "step"), "w") as f:
                f.write(str(step))
        log("commit", step=step, **kw)

    jobside.install_preemption_handler()
    log("start", slurm_job=os.environ.get("SLURM_JOB_ID"), restart=int(os.environ.get("SLURM_RESTART_COUNT") or 0))
    with jobside.restore() as d:
        done = int(open(os.path.join(d, "step")).read()) if d else 0
    log("restored", step=done)
    while done < steps:
        time.sleep(step_s)  # the step's compute
        done += 1
        jobside.report(done, flops=flops(done))
        log("step", step=done, flops=flops(done))
        if done % every == 0 or done == steps:
            commit(done)
        while holds.get(gen) == done and not jobside.preemption_requested():
            time.sleep(0.01)
        if jobside.preemption_requested():
            if done % every:
                commit(done, preempt=True)
            log("exit", code=75)
            sys.exit(75)
    log("done")
''')


def program_run(path: Path, log: Path, steps: int, every: int, step_s: float, holds) -> list:
    """The spec's `run` for PROGRAM (written to PATH), logging to LOG; HOLDS: [(generation, step)]."""
    import sys

    path.write_text(PROGRAM)
    return [sys.executable, "-I", "-S", str(path), str(log), str(steps), str(every), str(step_s), str(BASE_FLOPS),
            ",".join(f"{g}:{s}" for g, s in holds)]


def read_log(path: Path) -> list:
    try:
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except FileNotFoundError:
        return []


def wait_event(log: Path, what: str, timeout: float = 180, **match) -> dict:
    """The first line of the program's log with all of MATCH's fields (polled)."""
    def found():
        return next((e for e in read_log(log) if all(e.get(k) == v for k, v in match.items())), None)

    return poll(what, found, timeout=timeout, interval=0.02)


@dataclass
class Fault:
    """One fault the test caused, and what it recorded of it."""
    kind: str  # "kill" (SIGKILL of the program) or "preempt" (a notice: it saves, exits 75)
    generation: int
    at: float  # the test's clock when it sent the signal (kill), or the program's exit (preempt)
    # when the scheduler showed the run ended, as the test knows it: no earlier than VISIBLE (an
    # exit file's write; else the start of the test's poll before the one that saw it) and no
    # later than SEEN (the end of the poll that saw it)
    visible: Optional[float] = None
    seen: Optional[float] = None


def kill(log: Path, gen: int, step: int) -> Fault:
    """SIGKILL generation GEN's program once it holds at STEP."""
    e = wait_event(log, f"generation {gen} holding at step {step}", gen=gen, event="step", step=step)
    os.kill(e["pid"], signal.SIGKILL)
    return Fault("kill", gen, time.time())


def preempt(log: Path, gen: int, step: int, notify) -> Fault:
    """A preemption notice to generation GEN once it holds at STEP (NOTIFY(pid) sends it); the
    fault's moment is the program's own exit (it saves first), from its log."""
    e = wait_event(log, f"generation {gen} holding at step {step}", gen=gen, event="step", step=step)
    notify(e["pid"])
    x = wait_event(log, f"generation {gen} exiting 75", gen=gen, event="exit")
    return Fault("preempt", gen, x["t"])


class WatcherPasses:
    """The passes of the `launcher watch` process(es) of a store, sampled from the heartbeat row
    each pass writes (its end and duration, launcher.state.watchers) by a thread of the test:
    the measured time a pass takes on this machine, under whatever load it has right now."""

    def __init__(self, db: Path, every: float = 0.05):
        self.db, self.every = db, every
        self.passes: set = set()  # (watcher, pass end, pass seconds)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(timeout=10)

    def _run(self):
        while not self._stop.wait(self.every):
            try:
                con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=1)
                try:
                    rows = con.execute("SELECT watcher_id, last_pass, pass_s FROM watchers").fetchall()
                finally:
                    con.close()
            except sqlite3.Error:
                continue  # no store or no table yet, or a writer holds it: the next sample
            self.passes.update(rows)

    @property
    def longest_s(self) -> float:
        return max((p[2] for p in self.passes), default=0.0)


@dataclass
class Truth:
    """What the test knows without the report: the program's log, the faults, the runs' times."""
    log: list
    faults: list
    runs: list = field(default_factory=list)  # [(start, end)] of every attempt's allocation, the scheduler's
    submitted: Optional[float] = None  # the job's first submission (the wall time's start)

    def generations(self) -> list:
        return sorted({e["gen"] for e in self.log})

    def resumed_at(self, gen: int) -> int:
        return next(e["step"] for e in self.log if e["gen"] == gen and e["event"] == "restored")

    def kept_flops(self) -> tuple[float, list]:
        """(FLOPs of the steps the job kept, [(generation, first kept step, last kept step)]):
        each generation keeps its steps after the one it resumed from, up to the one the next
        generation resumed from (the rest it computed was lost and computed again); the last
        generation keeps all it computed. Each step's FLOPs are what the program logged for it."""
        gens = self.generations()
        total, spans = 0.0, []
        for i, g in enumerate(gens):
            lo = self.resumed_at(g)
            hi = self.resumed_at(gens[i + 1]) if i + 1 < len(gens) else max(
                e["step"] for e in self.log if e["gen"] == g and e["event"] == "step")
            steps = {e["step"]: e["flops"] for e in self.log if e["gen"] == g and e["event"] == "step"}
            assert all(s in steps for s in range(lo + 1, hi + 1)), (g, lo, hi, sorted(steps))
            total += sum(steps[s] for s in range(lo + 1, hi + 1))
            spans.append((g, lo, hi))
        return total, spans

    def paid_s(self) -> float:
        return sum(end - start for start, end in self.runs)

    def effective_mfu(self, peak_tflops: float, accelerators: int) -> float:
        flops, _ = self.kept_flops()
        return flops / (peak_tflops * 1e12 * accelerators * self.paid_s())

    def commit_end(self, gen: int, step: int) -> float:
        return next(e["t"] for e in self.log if e["gen"] == gen and e["event"] == "commit" and e["step"] == step)


def check_report(rep: dict, truth: Truth, interval: float, slack: float, resolution: float, accelerators: int = 1,
                 echo=print) -> dict:
    """Issue 30's three targets on REP (`launcher report JOB --json`) against TRUTH.

    INTERVAL: the watcher's; SLACK: what a pass may add to it (see the callers); RESOLUTION: of
    the scheduler's times (1 s on Slurm: its end of a run is whole seconds, so the failure it
    dates may be up to that much before the kill). Returns the measured figures."""
    out: dict = {}
    # 1. the categories add up to the wall time within 1 s
    cats = sum(rep["categories"].values())
    out["sum_minus_wall_s"] = cats - rep["wall_s"]
    assert abs(cats - rep["wall_s"]) < 1.0, (rep["categories"], rep["wall_s"])
    assert all(v >= 0 for v in rep["categories"].values()), rep["categories"]
    # and the wall time is the job's: its first submission to the end of its last run
    out["wall_s"] = rep["wall_s"]
    out["wall_truth_s"] = truth.runs[-1][1] - truth.submitted
    assert abs(rep["wall_s"] - out["wall_truth_s"]) < max(resolution, 0.1), (rep["wall_s"], out["wall_truth_s"])

    # 2. one clock per fault, each detection within one watch interval of the truth
    clocks = rep["clocks"]
    assert len(clocks) == len(truth.faults), (clocks, truth.faults)
    out["detection"] = []
    for c, f in zip(clocks, truth.faults):
        assert c["unknown"] == {} and c["unsplit_s"] == 0, c
        # the failure the report dates is the end of the run the fault caused: no earlier than the
        # fault (but for the scheduler's whole seconds), no later than the test saw the run ended
        # (a preempted run ends when the job script's requeue does, after the program's exit)
        visible = max(f.visible if f.visible is not None else f.at, f.at)
        seen = max(f.seen if f.seen is not None else visible, visible)
        assert f.at - resolution - 0.05 <= c["failure_at"] <= seen + 0.05, (c, f)
        # the detection clock is the time from the failure until the watcher recorded the end (the
        # scheduler, for a requeue in place: its own end of the run, in whole seconds). The end
        # cannot be noticed before it could be seen, and must be within one watch interval and
        # one pass after it could (checked against SEEN: the latest it may first have been visible)
        truth_s = c["noticed_at"] - f.at  # the moment the end was recorded minus the fault's
        noticed = c["failure_at"] + c["detection_s"]
        out["detection"].append({"kind": f.kind, "detection_s": round(c["detection_s"], 3),
                                 "noticed_minus_fault_s": round(truth_s, 3),
                                 "visible_after_fault_s": round(visible - f.at, 3),
                                 "noticed_after_seen_s": round(noticed - seen, 3), "noticed_by": c["noticed_by"]})
        assert c["detection_s"] >= 0, c
        assert c["noticed_by"] == "scheduler" or abs(noticed - c["noticed_at"]) < 1e-6, c
        assert abs(c["detection_s"] - truth_s) <= abs(c["failure_at"] - f.at) + resolution + 1e-6, (c, f)
        assert noticed - visible >= -resolution - 0.05, (c, f)
        assert noticed - seen <= interval + slack, (c, f, interval, slack)
        # lost work: from the end of the commit the next generation resumed from to the fault
        nxt = truth.generations()[truth.generations().index(f.generation) + 1]
        lost = f.at - truth.commit_end(f.generation, truth.resumed_at(nxt))
        out["detection"][-1].update(lost_work_s=round(c["lost_work_s"], 3), lost_truth_s=round(lost, 3))
        assert abs(c["lost_work_s"] - lost) <= abs(c["failure_at"] - f.at) + 0.1, (c, f, lost)

    # 3. effective MFU within 1% of the recomputation from the step log and the scheduler's times
    flops, spans = truth.kept_flops()
    eff = truth.effective_mfu(PEAK_TFLOPS, accelerators)
    out.update(kept_flops=flops, kept_spans=spans, paid_s=truth.paid_s(), effective_mfu=rep["effective_mfu"],
               effective_mfu_truth=eff, mfu=rep["mfu"], goodput=rep["goodput"])
    echo(json.dumps(out, indent=1, default=str))
    assert rep["peak"]["tflops"] == PEAK_TFLOPS and rep["compute"]["accelerators"] == accelerators, rep["peak"]
    assert rep["compute"]["model_flops"] == pytest.approx(flops, rel=1e-12), (rep["compute"], spans)
    assert rep["effective_mfu"] == pytest.approx(eff, rel=0.01), (rep["effective_mfu"], eff, rep["compute"])
    return out
