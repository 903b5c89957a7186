"""Recovery latency on node death, and work lost per failure against the checkpoint
interval, on a throw-away test cluster (tests/cluster) that this script starts and
always stops (issue 3).

    .venv/bin/python bench/recovery_latency.py [--runs 3] [--intervals 2,5,10] [--step-time 0.3] [--seed 7]

Every run launches the example trainer (examples/train.py, checkpointing every K steps
at a fixed step time, checkpoint root under the cluster's shared dir) through the real
`launcher` CLI, waits until its first checkpoint step, then waits a random time (fixed
seed) of up to two checkpoint intervals and kills the node the job runs on
(SlurmCluster.kill_node: SIGKILL of everything in the node's namespace). Slurm requeues
the job by itself (--requeue; nothing runs on the login node); the requeued run resolves
the latest committed checkpoint with the job-side helper and the trainer resumes.

Timed, from the kill (host wall clock: the nodes share it):
  detect      kill -> node DOWN
  requeue     node DOWN -> job requeued (Slurm does both in one pass: ~0)
  ->start     requeued -> RUNNING again: the hold before a requeued job may start (the
              munge cred_expire: 5 s on the test cluster, 120 s by Slurm's default) plus
              up to one scheduling cycle (bf_interval=2 on the test cluster)
  ->resolv    RUNNING -> the helper resolved the checkpoint ("launcher: attempt G resuming"
              in the job log); `helper` is the helper's own resume_seconds from
              ROOT/.launcher/attempts/g<G>.json (the rest is batch start + interpreter start)
  ->step      resolved -> first new "step N" line (trainer start, restore, one step)
  (a)RUN      kill -> Slurm has the job RUNNING again
  (b)step     kill -> the job printed the first step past the one it resumed from
Slurm's times come from slurmctld.log (to the ms) where it logged them, else from polling
scontrol/sinfo (~0.1 s); log lines are timestamped by tailing the job's output file
(every 20 ms).

Lost work per failure: the last "step N" printed before the kill minus the step resumed
from, and in seconds: kill time minus the time the resumed step was reached. With a kill
at a uniformly random time this averages interval/2 (in whole completed steps,
(interval-1)/2). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.slurm import preflight, start_cluster, stop_cluster  # noqa: E402
from tests.integration.launcher_cli import LauncherCLI  # noqa: E402

TRAIN = ROOT / "examples" / "train.py"
STEP_RE = re.compile(r"^step (\d+) ")
RESUMED_RE = re.compile(r"^train: resumed from \S+ at step (\d+)")
START_RE = re.compile(r"^launcher: start (\d+) of ")
RESOLVED_RE = re.compile(r"^launcher: attempt (\d+) resuming from ")


class Tail(threading.Thread):
    """Timestamps every line appended to a file (polls every `interval` seconds)."""

    def __init__(self, path: Path, interval: float = 0.02):
        super().__init__(daemon=True)
        self.path, self.interval = Path(path), interval
        self.lines: list[tuple[float, str]] = []
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def run(self):
        f, buf = None, ""
        while not self._halt.is_set():
            if f is None:
                try:
                    f = open(self.path, "r", errors="replace")
                except OSError:
                    time.sleep(self.interval)
                    continue
            chunk = f.read()
            if chunk:
                now = time.time()
                buf += chunk
                *done, buf = buf.split("\n")
                with self._lock:
                    self.lines.extend((now, line) for line in done)
            else:
                time.sleep(self.interval)
        if f is not None:
            f.close()

    def snapshot(self) -> list[tuple[float, str]]:
        with self._lock:
            return list(self.lines)

    def stop(self):
        self._halt.set()
        self.join(timeout=2)


def first(lines, regex, after=0):
    """(index, time, match) of the first line at or after `after` matching `regex`, else None."""
    for i in range(after, len(lines)):
        m = regex.match(lines[i][1])
        if m:
            return i, lines[i][0], m
    return None


CTLD_TS = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\] (.*)$")


def ctld_events(log: Path, since: float, node: str, native: str) -> dict:
    """Times (epoch) from slurmctld.log at or after `since`: node set DOWN ("Nodes nodeX not
    responding, setting DOWN"), job requeued ("Requeuing JobId=N"), job started again
    ("Started JobId=N in batch on ..." / "Allocate JobId=N"). Slurm logs local time to the ms."""
    out = {}
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return out
    job = re.compile(rf"JobId={native}\b")
    for line in text.splitlines():
        m = CTLD_TS.match(line)
        if not m:
            continue
        try:
            t = datetime.fromisoformat(m.group(1)).timestamp()
        except ValueError:
            continue
        if t < since - 0.5:
            continue
        msg = m.group(2)
        if "down" not in out and re.search(rf"\b{node}\b.*setting DOWN", msg):
            out["down"] = t
        elif "requeue" not in out and job.search(msg) and re.search(r"[Rr]equeu", msg):
            out["requeue"] = t
        elif "requeue" in out and "start" not in out and job.search(msg) and re.search(r"Started|Allocate", msg):
            out["start"] = t
    return out


def one_run(cluster, cli, every: int, step_time: float, rng: random.Random, tag: str, verbose: bool) -> dict:
    ckpt = cluster.shared_dir / f"ckpt-{tag}"
    result = cluster.shared_dir / f"result-{tag}.json"
    spec = cli.spec(f"rl-{tag}", {
        "run": f"python3 {TRAIN} --steps 100000 --every {every} --sleep {step_time} --result {result}",
        "checkpoint": {"root": str(ckpt)}, "resources": {"nodes": 1, "time_limit": "10m"}})
    job = cli.launch(spec)
    native = str(cli.status(job)["attempts"][-1]["native_id"])
    j = cluster.wait(native, "RUNNING", timeout=60)
    node = j["NodeList"]
    out_path = Path(j.get("StdOut") or "")
    if not out_path.name or "%" in str(out_path):
        out_path = cli.home / "jobs" / job / f"slurm-{native}.out"
    tail = Tail(out_path)
    tail.start()
    try:
        # the first checkpoint step reached, then a random point within two intervals
        cluster.wait_for(f"{job}: step {every}", lambda: any(
            (m := STEP_RE.match(line)) and int(m.group(1)) >= every for _, line in tail.snapshot()), timeout=90,
            interval=0.02)
        delay = rng.uniform(0, 2 * every * step_time)
        time.sleep(delay)
        t_kill = time.time()
        cluster.kill_node(node)
        t_killed = time.time()

        t_down = t_requeued = t_running = None
        new_node = None
        deadline = time.monotonic() + 180
        while True:
            now = time.time()
            if t_down is None:
                st = cluster.node_states().get(node, "")
                if st.startswith("down"):
                    t_down = now
            if t_running is None:
                jj = cluster.job(native)
                restarts = int(jj.get("Restarts", "0") or 0)
                state = jj.get("JobState", "")
                if t_requeued is None and (restarts > 0 or state in ("REQUEUED", "PENDING", "NODE_FAIL")):
                    t_requeued = now
                if restarts > 0 and state == "RUNNING":
                    t_running, new_node = now, jj.get("NodeList")
            lines = tail.snapshot()
            r = first(lines, RESUMED_RE)
            if t_running is not None and r and first(lines, STEP_RE, r[0] + 1):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{job} ({native}) not resumed within 180 s\n"
                                   + "\n".join(x for _, x in lines[-20:]) + "\n" + cluster.diagnostics())
            time.sleep(0.05)
        time.sleep(0.1)
    finally:
        tail.stop()
        cli.run("cancel", job, check=False)

    lines = tail.snapshot()
    start2 = first(lines, START_RE, 1) or first(lines, RESOLVED_RE, 1)
    # the first run's lines: everything before the second "launcher: start"
    starts = [i for i, (_, x) in enumerate(lines) if START_RE.match(x)]
    cut = starts[1] if len(starts) > 1 else (start2[0] if start2 else len(lines))
    first_run = lines[:cut]
    steps1 = [(t, int(m.group(1))) for t, x in first_run if (m := STEP_RE.match(x))]
    steps_before_kill = [(t, s) for t, s in steps1 if t <= t_killed]
    last_step = steps_before_kill[-1][1] if steps_before_kill else 0
    resolved = first(lines, RESOLVED_RE, cut)
    resumed = first(lines, RESUMED_RE, cut)
    first_new = first(lines, STEP_RE, resumed[0] + 1)
    resume_step = int(resumed[2].group(1))
    gen = int(resolved[2].group(1)) if resolved else None
    rec = {}
    if gen is not None:
        try:
            rec = json.loads((ckpt / ".launcher" / "attempts" / f"g{gen}.json").read_text())
        except (OSError, ValueError):
            rec = {}
    t_reached = next((t for t, s in steps1 if s == resume_step), None)
    diffs = [b[0] - a[0] for a, b in zip(steps1, steps1[1:])]
    step_s = statistics.median(diffs) if diffs else step_time
    ctld = ctld_events(cluster.log_dir / "slurmctld.log", t_kill, node, native)
    # slurmctld's own times where it logged them (ms), else what polling saw (~0.1 s)
    down = ctld.get("down") or t_down
    requeued = ctld.get("requeue") or t_requeued
    running = ctld.get("start") or t_running
    run = {
        "interval": every, "tag": tag, "job": job, "native": native, "node": node, "new_node": new_node,
        "delay": delay, "kill_call_s": t_killed - t_kill,
        "detect": down - t_kill if down else None,
        # Slurm requeues a dead node's jobs in the same pass that marks it DOWN
        "requeue": max(0.0, requeued - down) if (requeued and down) else None,
        "to_start": running - requeued if requeued else None,
        "to_resolved": resolved[1] - running if resolved else None,
        "helper": rec.get("resume_seconds"),
        "to_step": first_new[1] - resolved[1] if (resolved and first_new) else None,
        "total_running": running - t_kill,
        "total_step": first_new[1] - t_kill if first_new else None,
        "last_step": last_step, "resume_step": resume_step,
        "resume_step_record": rec.get("resume_step"), "generation": gen,
        "lost_steps": last_step - resume_step,
        "lost_s": (t_kill - t_reached) if t_reached is not None else None,
        "step_s": step_s, "ctld": {k: v - t_kill for k, v in ctld.items()},
        "poll": {"down": t_down and t_down - t_kill, "requeue": t_requeued and t_requeued - t_kill,
                 "running": t_running - t_kill},
    }
    if verbose:
        print(json.dumps(run, default=str), flush=True)
    return run


def fmt(v, w=7, p=2):
    return f"{v:{w}.{p}f}" if isinstance(v, (int, float)) else f"{'-':>{w}}"


def stats_row(label, vals, w=10):
    vals = [v for v in vals if isinstance(v, (int, float))]
    if not vals:
        return f"{label:<34}" + f"{'-':>{w}}" * 4
    return (f"{label:<34}{statistics.median(vals):{w}.2f}{statistics.mean(vals):{w}.2f}"
            f"{min(vals):{w}.2f}{max(vals):{w}.2f}")


def report(runs, a, facts):
    print()
    print(f"cluster: {facts}; runs per interval={a.runs}, intervals={a.intervals}, "
          f"step time={a.step_time}s, seed={a.seed}")
    print()
    print("per run (seconds from the kill; detect = kill -> node DOWN)")
    hdr = (f"{'K':>3} {'node':>12} {'delay':>6} {'detect':>7} {'requeue':>7} {'->start':>7} {'->resolv':>8}"
           f" {'helper':>7} {'->step':>7} {'(a)RUN':>7} {'(b)step':>7} {'last':>5} {'resume':>6}"
           f" {'lost':>5} {'lost s':>7}")
    print(hdr)
    for r in runs:
        print(f"{r['interval']:>3} {r['node'] + '>' + str(r['new_node']):>12} {fmt(r['delay'], 6)}"
              f" {fmt(r['detect'])} {fmt(r['requeue'])} {fmt(r['to_start'])} {fmt(r['to_resolved'], 8)}"
              f" {fmt(r['helper'], 7, 3)} {fmt(r['to_step'])} {fmt(r['total_running'])} {fmt(r['total_step'])}"
              f" {r['last_step']:>5} {r['resume_step']:>6} {r['lost_steps']:>5} {fmt(r['lost_s'])}")
    print()
    print(f"recovery latency on node death, all {len(runs)} runs (s)")
    print(f"{'':<34}{'median':>10}{'mean':>10}{'min':>10}{'max':>10}")
    for label, key in (("detection (kill -> node DOWN)", "detect"),
                       ("DOWN -> job requeued", "requeue"),
                       ("requeued -> RUNNING (hold + sched)", "to_start"),
                       ("RUNNING -> resume resolved", "to_resolved"),
                       ("  of which helper resume_seconds", "helper"),
                       ("resolved -> first new step", "to_step"),
                       ("(a) kill -> RUNNING again", "total_running"),
                       ("(b) kill -> past resumed step", "total_step")):
        print(stats_row(label, [r[key] for r in runs]))
    print()
    print("lost work per failure vs checkpoint interval (kill at a random point)")
    print(f"{'K':>3} {'runs':>5} {'step s':>7} {'lost steps':>11} {'expect K/2':>11} {'(K-1)/2':>8}"
          f" {'lost s':>8} {'expect s':>9} {'max steps':>10}")
    for k in a.intervals:
        rs = [r for r in runs if r["interval"] == k]
        if not rs:
            continue
        step_s = statistics.mean(r["step_s"] for r in rs)
        lost_s = [r["lost_s"] for r in rs if r["lost_s"] is not None]
        print(f"{k:>3} {len(rs):>5} {step_s:7.3f} {statistics.mean(r['lost_steps'] for r in rs):11.2f}"
              f" {k / 2:11.1f} {(k - 1) / 2:8.1f} {fmt(statistics.mean(lost_s) if lost_s else None, 8)}"
              f" {k / 2 * step_s:9.2f}"
              f" {max(r['lost_steps'] for r in rs):>10}")
    print("(lost steps = last step printed before the kill - step resumed from, whole steps: uniform over\n"
          " 0..K-1 when the kill time is, so (K-1)/2; lost s = kill time - time the resumed step was reached,\n"
          " which counts the step in progress too: K/2 x step time. A kill between a step's line and its\n"
          " commit loses the whole interval.)")


def _sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="node kills per checkpoint interval (default 3)")
    ap.add_argument("--intervals", default="2,5,10", help="checkpoint every K steps, comma separated (2,5,10)")
    ap.add_argument("--step-time", type=float, default=0.3, help="seconds per training step (sleep; 0.3)")
    ap.add_argument("--seed", type=int, default=7, help="seed of the kill points (7)")
    ap.add_argument("--json", help="also write every run's figures to this file")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    a.intervals = [int(x) for x in str(a.intervals).split(",") if x.strip()]
    if a.runs < 1 or not a.intervals or min(a.intervals) < 1:
        ap.error("--runs >= 1 and --intervals a list of positive integers")
    problem = preflight()
    if problem:
        sys.exit(f"recovery_latency: cannot start the test cluster: {problem}")
    signal.signal(signal.SIGTERM, _sigterm)
    rng = random.Random(a.seed)
    t0 = time.monotonic()
    cluster = start_cluster(4)
    runs = []
    try:
        tmp = Path(tempfile.mkdtemp(prefix="recovery-latency-", dir=cluster.state))
        tmp.chmod(0o755)
        cli = LauncherCLI(tmp, cluster)
        facts = f"{len(cluster.nodes)} nodes"
        try:
            v = cluster.run("sinfo", "--version").stdout.strip()
            facts += f", {v}"
        except Exception:  # noqa: BLE001 - only a label
            pass
        print(f"{facts}; started in {time.monotonic() - t0:.1f} s", flush=True)
        # alternate the intervals so machine load drifts hit them alike
        plan = [(k, i) for i in range(a.runs) for k in a.intervals]
        for n, (k, i) in enumerate(plan, 1):
            tag = f"k{k}-r{i}-{time.time_ns()}"
            run = None
            try:
                run = one_run(cluster, cli, k, a.step_time, rng, tag, a.verbose)
                runs.append(run)
                print(f"[{n}/{len(plan)}] K={k}: node {run['node']} killed; RUNNING again after "
                      f"{run['total_running']:.2f} s, past step {run['resume_step']} after {run['total_step']:.2f} s; "
                      f"lost {run['lost_steps']} steps", flush=True)
            except (TimeoutError, AssertionError) as e:
                print(f"[{n}/{len(plan)}] K={k}: run failed: {str(e)[:2000]}", flush=True)
            finally:
                cluster.reset()
        report(runs, a, facts)
        if a.json:
            Path(a.json).write_text(json.dumps(runs, indent=1, default=str))
        print(f"\ntotal {time.monotonic() - t0:.0f} s")
    finally:
        cluster.cancel_all()
        stop_cluster(cluster)


if __name__ == "__main__":
    main()
