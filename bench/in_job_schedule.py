"""In-job recovery against a schedule of process kills (issue 31's targets), on a throw-away netns
Slurm test cluster (tests/cluster, 4 nodes) that this script starts and always stops.

    .venv/bin/python bench/in_job_schedule.py [--kills 10] [--seed 7] [--variants torchft,allocation,requeue]
                                              [--extras hang,preempt] [--hang 10] [--step-time 0.1] [--spread 6]
                                              [--watch-interval 1] [--json FILE]

The same training (bench/in_job_program.py: a torch Linear model on the CPU with gloo, one task per
node on 4 nodes, a committed checkpoint every 4 steps, a timestamped step log) is launched through
the real `launcher` CLI three times, each with `launcher watch` running beside it:

  torchft     recovery.in_job {kind: torchft}: 2 replica groups x 2 nodes (the cluster's two leaf
              switches), torchft's lighthouse; a failed group is restarted alone and heals from the
              live one while it trains on
  allocation  recovery.in_job {kind: allocation}: one gloo world of 4; the job script reruns the
              failed srun step in the same allocation, from the last commit
  requeue     no in_job (the baseline): the failed attempt ends and the launcher's own recovery
              (recovery.app_error) resubmits it, from the last commit

Each variant gets the same schedule of KILLS process kills (SIGKILL of one task's process: the
nodes are network namespaces of this host), drawn from --seed: before each kill the job is back to
full strength and has made a few steps since (so a commit past the last resume), then a random
wait of up to --spread seconds, then a random task's process is killed.

After the kills (--extras): a hang, in allocation and requeue (recovery.hang: --hang s): a random
task stops at its next step and sleeps for ever (rank 0 reports every step; the others block in the
allreduce), to be found by the watch, its stacks stored and the run killed and recovered (rerun in
the allocation, or resubmitted on recovery.hang_restarts); then a preemption notice in every variant
(`scancel --signal=USR1 --batch`): the program saves and exits 75, the job script requeues the job in
place: exactly 1 Slurm requeue, no resubmission or in-job restart. The hang is left out of the
torchft variant unless --hang-torchft (group 0's rank 0 reports for the job; the watch then kills
every process of the run, both groups, and both restart from the newest commit).

Printed per variant, side by side: Slurm requeues (``scontrol`` Restarts of every attempt) and
launcher resubmissions (``resubmitted`` events of `launcher status JOB --json`) for the kills, the
in-job restarts recorded; median and max time from a kill to the first step past the resume point
(from the program's own step log: torchft, the killed group's first step again, healed; the others,
the rerun's or the new attempt's first step, resume step + 1); the ratio of the baseline's median to
each in-job variant's; goodput from `launcher report JOB --json`; and for torchft, from the
lighthouse's log (job folder, lighthouse-<attempt>.log), that no quorum held two copies of one
replica group. Timings depend on the machine: run it on an idle one for figures to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fixtures.slurm import preflight, start_cluster, stop_cluster  # noqa: E402
from tests.integration.launcher_cli import LauncherCLI, start_watcher, stop_watchers  # noqa: E402

PROGRAM = ROOT / "bench" / "in_job_program.py"
VARIANTS = ("torchft", "allocation", "requeue")
QUORUM_RE = re.compile(r"Quorum! Quorum \{ quorum_id: (\d+), participants: \[(.*?)\], created")


class VariantFailed(RuntimeError):
    pass


def steps(out: Path, tag: str) -> list[tuple[int, int, float, int, int]]:
    """(step, participants, time, pid, generation) lines the program appended after each step."""
    try:
        text = (out / f"steps-{tag}").read_text()
    except OSError:
        return []
    rows = []
    for ln in text.splitlines():
        try:
            a, b, c, d, e = ln.split()
            rows.append((int(a), int(b), float(c), int(d), int(e)))
        except ValueError:  # a line being written
            continue
    return rows


def started(out: Path, tag: str) -> tuple[int | None, float | None]:
    """(pid, start time) of TAG's current process, from OUT/pid-<tag>."""
    try:
        pid, t0 = (out / f"pid-{tag}").read_text().split()
        return int(pid), float(t0)
    except (OSError, ValueError):
        return None, None


def current_pid(out: Path, tag: str) -> int | None:
    return started(out, tag)[0]


def iso_time(s) -> float | None:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(s).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def wait_for(what: str, fn, timeout: float, cli=None, job=None, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    last_check = 0.0
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise VariantFailed(f"timed out ({timeout:.0f} s) waiting for {what}")
        if cli is not None and time.monotonic() - last_check > 5:  # a job that ended stops the variant
            last_check = time.monotonic()
            st = cli.status(job)
            if st.get("open") is False or st["state"] in ("GAVE_UP", "CANCELLED", "COMPLETED"):
                log = cli.run("logs", job, check=False).stdout.splitlines()
                said = "\n".join([ln for ln in log if ln.startswith(("launcher", "Traceback")) or "Error" in ln][-40:])
                raise VariantFailed(f"{job} ended ({st['state']}: {st.get('reason')}) while waiting for {what}; "
                                    f"its job script and errors said:\n{said}")
        time.sleep(interval)


def spec_body(variant: str, base: Path, out: Path, a) -> dict:
    budget = a.kills + 2
    recovery: dict = {"app_error": 0}
    if "hang" in a.extras and (variant != "torchft" or a.hang_torchft):
        recovery.update(hang=f"{a.hang:g}s", hang_restarts=1)
    if variant == "torchft":
        recovery["in_job"] = {"kind": "torchft", "max_restarts": budget, "window": "1h", "min_replicas": 1}
    elif variant == "allocation":
        recovery["in_job"] = {"kind": "allocation", "max_restarts": budget, "window": "1h"}
    else:
        recovery["app_error"] = budget
    return {"run": [sys.executable, "-u", str(base / "prog.py"), str(out), str(a.step_time)],
            "checkpoint": {"root": str(base / "ckpt")},
            "resources": {"nodes": 4, "time_limit": "60m"},
            "recovery": recovery}


def run_variant(cluster, cli, variant: str, a, rng: random.Random) -> dict:
    base = cluster.shared_dir / f"injob-{variant}"
    out = base / "out"
    out.mkdir(parents=True)
    shutil.copy(PROGRAM, base / "prog.py")
    tags = ["g0r0", "g0r1", "g1r0", "g1r1"] if variant == "torchft" else ["r0", "r1", "r2", "r3"]
    job = cli.launch(cli.spec(f"ij-{variant}", spec_body(variant, base, out, a)))
    t_launch = time.time()
    watcher = start_watcher(cli, len(list(cli.tmp.glob("watch*.log"))), interval=a.watch_interval)
    natives: dict[str, int] = {}  # every attempt's Slurm job id -> the most Restarts seen
    kills = []
    res = {"variant": variant, "job": job, "kills": kills}

    def note_restarts():
        for att in cli.status(job)["attempts"]:
            n = str(att.get("native_id") or "")
            if n:
                r = cluster.job(n).get("Restarts")
                natives[n] = max(natives.get(n, 0), int(r) if r and r.isdigit() else 0)

    def full_strength():
        """Every task's current process has made a.min_steps steps (torchft: both groups in the
        quorum at the last step of each)."""
        for tag in tags:
            pid = current_pid(out, tag)
            mine = [r for r in steps(out, tag) if r[3] == pid]
            if pid is None or len(mine) < a.min_steps:
                return False
            if variant == "torchft" and mine[-1][1] != 2:
                return False
        return True

    try:
        wait_for(f"{job}: every task at {a.min_steps} steps", full_strength, 600, cli, job)
        t_first = min(steps(out, t)[0][2] for t in tags)
        for k in range(a.kills):
            wait_for(f"{job}: full strength before kill {k + 1}", full_strength, 300, cli, job)
            note_restarts()
            delay = rng.uniform(0, a.spread)
            victim = rng.choice(tags)
            time.sleep(delay)
            pids = {t: current_pid(out, t) for t in tags}
            last_step = max(r[0] for t in tags for r in steps(out, t))
            t_kill = time.time()
            os.kill(pids[victim], signal.SIGKILL)  # the nodes are this host's network namespaces

            def back():
                """(time, step) of the first step past the resume point after the kill."""
                if variant == "torchft":  # the killed group's process again, healed from the live one
                    new = [r for r in steps(out, victim) if r[3] != pids[victim] and r[2] > t_kill]
                    return (new[0][2], new[0][0]) if new else None
                new = [r for t in tags for r in steps(out, t) if r[3] != pids[t] and r[2] > t_kill]
                return min((r[2], r[0]) for r in new) if new else None

            t_back, step_back = wait_for(f"{job}: back after kill {k + 1} ({victim})", back, 300, cli, job,
                                         interval=0.05)
            kill = {"k": k + 1, "victim": victim, "delay": round(delay, 2), "t_kill": t_kill, "last_step": last_step,
                    "back_step": step_back, "seconds": t_back - t_kill}
            if variant == "torchft":  # the other group trained on meanwhile: the job's training never stopped
                other = "g1r0" if victim.startswith("g0") else "g0r0"
                kill["alone_steps"] = len([r for r in steps(out, other) if t_kill < r[2] < t_back])
                # the other group's stall: its first step after the kill that ended a gap of over 1 s
                # (waiting out torchft's timeout on the allreduce the killed group left), else none
                rows = [r for r in steps(out, other) if r[2] <= t_back + 1]
                prev = max((r[2] for r in rows if r[2] <= t_kill), default=t_kill)
                kill["again_s"] = 0.0
                for r in (r for r in rows if r[2] > t_kill):
                    if r[2] - prev > 1.0:
                        kill["again_s"] = r[2] - t_kill
                        break
                    prev = r[2]
                pid, t0 = started(out, victim)
                kill["started_s"] = t0 - t_kill if pid != pids[victim] and t0 else None
            else:
                kill["lost_steps"] = last_step - (step_back - 1)
                kill["again_s"] = kill["seconds"]  # the whole run restarted: training again = back
                t0s = [t0 for t in tags for pid, t0 in [started(out, t)] if pid != pids[t] and t0]
                kill["started_s"] = min(t0s) - t_kill if t0s else None
            kills.append(kill)
            print(f"  [{variant} {k + 1}/{a.kills}] killed {victim} after {delay:.1f} s at step {last_step}: "
                  f"first step past the resume point ({step_back}) {kill['seconds']:.1f} s later"
                  + (f", the other group trained {kill['alone_steps']} steps alone" if "alone_steps" in kill
                     else f", {kill['lost_steps']} steps lost"), flush=True)
        wait_for(f"{job}: full strength after the last kill", full_strength, 300, cli, job)
        note_restarts()
        kill_requeues, t_extras = sum(natives.values()), time.time()
        if "hang" in a.extras and (variant != "torchft" or a.hang_torchft):
            res["hang"] = hang(out, tags, rng, cli, job)
            wait_for(f"{job}: full strength after the hang", full_strength, 300, cli, job)
        if "preempt" in a.extras:
            note_restarts()
            res["preempt"] = preempt(cluster, cli, job, out, tags, natives)
            wait_for(f"{job}: full strength after the preemption", full_strength, 300, cli, job)
        stop = max(r[0] for t in tags for r in steps(out, t)) + a.tail_steps
        (out / "stop.tmp").write_text(str(stop))
        (out / "stop.tmp").rename(out / "stop")
        st = cli.wait_state(job, ("COMPLETED", "FAILED", "GAVE_UP", "CANCELLED"), timeout=300, interval=1)
        note_restarts()
    finally:
        stop_watchers([watcher])
    events = st["events"]

    def count(kind, t0=0.0, t1=float("inf")):
        return len([e for e in events if e["kind"] == kind and t0 <= (e.get("ts") or 0) < t1])

    res.update(
        state=st["state"], reason=st.get("reason"), attempts=[(x["state"], x.get("native_id")) for x in st["attempts"]],
        requeues=kill_requeues, natives=natives, resubmissions=count("resubmitted", 0, t_extras),
        in_job_restarts=count("in_job_restart", 0, t_extras), first_step_s=t_first - t_launch, stop_step=stop)
    for extra in ("hang", "preempt"):  # what the launcher did about each, from its events
        x = res.get(extra)
        if x:
            t1 = res["preempt"]["t"] if extra == "hang" and res.get("preempt") else float("inf")
            x.update(resubmissions=count("resubmitted", x["t"], t1), in_job_restarts=count("in_job_restart", x["t"], t1))
    if res.get("hang"):
        found = [e for e in events if e["kind"] == "hang_detected" and e.get("ts", 0) >= res["hang"]["t"]]
        h = res["hang"]
        h["detections"] = len(found)
        if found:
            ev = found[0]
            stacks = Path(ev.get("stacks") or "/nonexistent")
            h.update(detected_s=ev["ts"] - h["t"], age_s=ev.get("age_s"), limit_s=ev.get("limit_s"),
                     recovery=ev.get("recovery"), stacks=str(stacks),
                     stack_files=len(list(stacks.glob("*"))) if stacks.is_dir() else 0,
                     own_frame=any("hang_here" in f.read_text(errors="replace") for f in stacks.glob("*")
                                   if f.is_file()) if stacks.is_dir() else False)
    # when the launcher's side handled each kill: the job script's in-job restart (its helper's
    # failed_at), or the watch's noticing of the ended attempt and its resubmission
    restarts = sorted((e for e in events if e["kind"] == "in_job_restart"), key=lambda e: e.get("restart") or 0)
    ended = [e for e in events if e["kind"] == "attempt_ended"]
    resub = [e for e in events if e["kind"] == "resubmitted"]
    for i, kill in enumerate(kills):
        t = kill["t_kill"]
        if variant != "requeue" and i < len(restarts):
            fa = iso_time(restarts[i].get("failed_at"))
            kill["handled_s"] = fa - t if fa else None
        elif variant == "requeue":
            kill["handled_s"] = ended[i]["ts"] - t if i < len(ended) and ended[i].get("ts") else None
            kill["resubmitted_s"] = resub[i]["ts"] - t if i < len(resub) and resub[i].get("ts") else None
    rep = json.loads(cli.run("report", job, "--json").stdout)
    res.update(goodput=rep.get("goodput"), wall_s=rep.get("wall_s"), categories=rep.get("categories"))
    if variant == "torchft":
        res["lighthouse"] = lighthouse_check(cli.home / "jobs" / job)
    secs = [x["seconds"] for x in kills]
    if secs:
        res.update(median_s=statistics.median(secs), max_s=max(secs))
    return res


def first_new_step(out: Path, tags, pids: dict, since: float):
    """(time, step) of the first step any task logged from a new process after SINCE, else None."""
    new = [(r[2], r[0]) for t in tags for r in steps(out, t) if r[3] != pids[t] and r[2] > since]
    return min(new) if new else None


def hang(out: Path, tags, rng: random.Random, cli, job) -> dict:
    """A rank that stops reporting (the program sleeps for ever in hang_here at its next step; rank 0
    reports, the others block in the allreduce): found by `launcher watch` after recovery.hang, its
    stacks stored, the run killed and recovered (rerun in the allocation, or resubmitted)."""
    victim = rng.choice(tags)
    pids = {t: current_pid(out, t) for t in tags}
    (out / "hang.tmp").write_text(victim)
    (out / "hang.tmp").rename(out / "hang")
    marks = wait_for(f"{job}: {victim} hung", lambda: sorted(out.glob("hang.at-*")), 60, cli, job)
    t_hung = float(marks[-1].name.split("-", 1)[1])
    t_back, step_back = wait_for(f"{job}: back after the hang", lambda: first_new_step(out, tags, pids, t_hung),
                                 300, cli, job, interval=0.05)
    print(f"  hang: {victim} stopped at step {step_back - 1} or later; first step past the resume point "
          f"({step_back}) {t_back - t_hung:.1f} s later", flush=True)
    return {"t": t_hung, "victim": victim, "seconds": t_back - t_hung, "back_step": step_back}


def preempt(cluster, cli, job, out: Path, tags, natives: dict) -> dict:
    """A preemption notice to the batch shell (`scancel --signal=USR1 --batch`, as Slurm's --signal
    brings it): the program saves and exits 75, the job script requeues the job in place."""
    native = str(cli.status(job)["attempts"][-1]["native_id"])
    before = int(cluster.job(native).get("Restarts") or 0)
    pids = {t: current_pid(out, t) for t in tags}
    t_sig = time.time()
    cluster.run("scancel", "--signal=USR1", "--batch", native)
    t_back, step_back = wait_for(f"{job}: back after the preemption", lambda: first_new_step(out, tags, pids, t_sig),
                                 300, cli, job, interval=0.05)
    after = int(cluster.job(native).get("Restarts") or 0)
    natives[native] = max(natives.get(native, 0), after)
    print(f"  preemption of {native}: {after - before} Slurm requeue(s); first step past the resume point "
          f"({step_back}) {t_back - t_sig:.1f} s later", flush=True)
    return {"t": t_sig, "native": native, "requeues": after - before, "seconds": t_back - t_sig,
            "back_step": step_back}


def lighthouse_check(job_dir: Path) -> dict:
    """Every quorum the lighthouse logged, and those that held one replica group twice."""
    logs = sorted(job_dir.glob("lighthouse-*.log"))
    quorums, doubled, sizes = 0, [], {}
    for p in logs:
        for qid, members in QUORUM_RE.findall(p.read_text(errors="replace")):
            groups = re.findall(r'replica_id: "(group\d+):', members)
            quorums += 1
            sizes[len(groups)] = sizes.get(len(groups), 0) + 1
            if len(groups) != len(set(groups)):
                doubled.append((p.name, qid, groups))
    return {"logs": [p.name for p in logs], "quorums": quorums, "doubled": doubled, "sizes": sizes}


def ratio(a, b) -> str:
    return f"{a / b:.1f}x" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else "-"


def fmt(v, spec=".1f"):
    return format(v, spec) if isinstance(v, (int, float)) else "-"


def report(results: list[dict], a, facts: str) -> None:
    print()
    print(f"cluster: {facts}; {a.kills} process kills per variant, seed {a.seed}, step time {a.step_time} s, "
          f"kill after up to {a.spread} s, watch interval {a.watch_interval} s")
    cols = [r["variant"] for r in results]
    w = max(12, *(len(c) + 2 for c in cols))
    base = next((r for r in results if r["variant"] == "requeue" and r.get("median_s")), None)

    def row(label, vals):
        print(f"{label:<44}" + "".join(f"{v:>{w}}" for v in vals))

    row("", cols)
    row("job state", [r.get("state", "-") for r in results])
    row("kills done", [len(r["kills"]) for r in results])
    row("Slurm requeues (scontrol Restarts)", [r.get("requeues", "-") for r in results])
    row("launcher resubmissions (events)", [r.get("resubmissions", "-") for r in results])
    row("in-job restarts (events)", [r.get("in_job_restarts", "-") for r in results])

    def med(r, key, f=statistics.median):
        vals = [k[key] for k in r["kills"] if isinstance(k.get(key), (int, float))]
        return f(vals) if vals else None

    row("kill -> the job trains again: median s", [fmt(med(r, "again_s")) for r in results])
    row("                        max s", [fmt(med(r, "again_s", max)) for r in results])
    row("  baseline median / this median", [ratio(med(base, "again_s"), med(r, "again_s")) if base else "-"
                                            for r in results])
    row("kill -> the killed task's first step", [""] * len(results))
    row("  past the resume point: median s", [fmt(r.get("median_s")) for r in results])
    row("                        max s", [fmt(r.get("max_s")) for r in results])
    row("  baseline median / this median", [ratio(base["median_s"], r.get("median_s")) if base else "-"
                                            for r in results])
    row("of which (medians from the kill), s:", [""] * len(results))
    row("  failure handled (in-job helper / watch)", [fmt(med(r, "handled_s")) for r in results])
    row("  resubmitted", [fmt(med(r, "resubmitted_s")) for r in results])
    row("  new process started", [fmt(med(r, "started_s")) for r in results])
    row("steps lost per kill (mean)", [fmt(statistics.mean(k["lost_steps"] for k in r["kills"]))
                                       if r["kills"] and "lost_steps" in r["kills"][0] else "0 (alone)"
                                       if r["kills"] else "-" for r in results])
    row("goodput (launcher report)", [fmt(r.get("goodput"), ".3f") for r in results])
    row("wall s (launcher report)", [fmt(r.get("wall_s"), ".0f") for r in results])
    row("launch -> first step s", [fmt(r.get("first_step_s")) for r in results])
    if any(r.get("hang") for r in results):
        print()
        row("hang (a rank stops reporting)", [""] * len(results))
        hg = [r.get("hang") or {} for r in results]
        row(f"  detected after (limit {a.hang:g} s + interval) s", [fmt(h.get("detected_s")) for h in hg])
        row("  last step's age when detected s", [fmt(h.get("age_s")) for h in hg])
        row("  stack files stored (own frame seen)", [f"{h['stack_files']} ({'yes' if h.get('own_frame') else 'no'})"
                                                     if "stack_files" in h else "-" for h in hg])
        row("  recovered by: in-job restarts", [h.get("in_job_restarts", "-") for h in hg])
        row("                resubmissions", [h.get("resubmissions", "-") for h in hg])
        row("  hang -> first step past resume s", [fmt(h.get("seconds")) for h in hg])
    if any(r.get("preempt") for r in results):
        print()
        pr = [r.get("preempt") or {} for r in results]
        row("preemption (scancel --signal=USR1 --batch)", [""] * len(results))
        row("  Slurm requeues (want 1)", [p.get("requeues", "-") for p in pr])
        row("  resubmissions / in-job restarts", [f"{p['resubmissions']} / {p['in_job_restarts']}"
                                                 if "resubmissions" in p else "-" for p in pr])
        row("  notice -> first step past resume s", [fmt(p.get("seconds")) for p in pr])
    for r in results:
        if r.get("lighthouse"):
            lh = r["lighthouse"]
            print(f"\ntorchft lighthouse ({', '.join(lh['logs'])}): {lh['quorums']} quorums "
                  f"(by size {dict(sorted(lh['sizes'].items()))}), {len(lh['doubled'])} with a replica group twice"
                  + (f": {lh['doubled'][:3]}" if lh["doubled"] else ""))
        if r.get("error"):
            print(f"\n{r['variant']}: FAILED: {r['error']}")


def _sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=10, help="process kills per variant (10)")
    ap.add_argument("--seed", type=int, default=7, help="seed of the kill moments and victims (7)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
    ap.add_argument("--step-time", type=float, default=0.1, help="sleep per training step, s (0.1)")
    ap.add_argument("--spread", type=float, default=6.0, help="a kill lands up to this many s after full strength (6)")
    ap.add_argument("--min-steps", type=int, default=6,
                    help="steps each process makes before the next kill may land (6: a commit past the resume point)")
    ap.add_argument("--tail-steps", type=int, default=10, help="steps after the last recovery before the job ends")
    ap.add_argument("--watch-interval", type=float, default=1.0, help="launcher watch --interval, s (1)")
    ap.add_argument("--extras", default="hang,preempt",
                    help="after the kills (comma-separated, '' for none): hang (a rank that stops reporting, "
                         "recovery.hang; not with torchft), preempt (a preemption notice: 1 Slurm requeue)")
    ap.add_argument("--hang", type=float, default=10.0, help="recovery.hang, s (10)")
    ap.add_argument("--hang-torchft", action="store_true",
                    help="the hang in the torchft variant too (group 0's rank 0 reports for the job; a hang in "
                         "another group's process is not seen by recovery.hang)")
    ap.add_argument("--json", help="also write every figure to this file")
    a = ap.parse_args()
    variants = [v for v in a.variants.split(",") if v.strip()]
    a.extras = {x.strip() for x in a.extras.split(",") if x.strip()}
    if a.extras - {"hang", "preempt"}:
        ap.error("--extras: of hang, preempt")
    if a.kills < 1 or not variants or set(variants) - set(VARIANTS):
        ap.error(f"--kills >= 1 and --variants of {', '.join(VARIANTS)}")
    if variants.count("requeue") and variants[-1] != "requeue":
        variants = [v for v in variants if v != "requeue"] + ["requeue"]
    lighthouse = Path(sys.executable).parent / "torchft_lighthouse"
    if "torchft" in variants and not lighthouse.exists():
        sys.exit(f"in_job_schedule: torchft is not installed beside {sys.executable} (pip install -e '.[torchtests]')")
    problem = preflight()
    if problem:
        sys.exit(f"in_job_schedule: cannot start the test cluster: {problem}")
    signal.signal(signal.SIGTERM, _sigterm)
    t0 = time.monotonic()
    # a variant's attempts must stay known to scontrol (their Restarts) until it is counted
    cluster = start_cluster(4, extra_env={"SLURM_TEST_MIN_JOB_AGE": "3600"})
    results = []
    try:
        tmp = Path(tempfile.mkdtemp(prefix="in-job-schedule-", dir=cluster.state))
        tmp.chmod(0o755)
        cli = LauncherCLI(tmp, cluster)
        # the job's tasks find torchft_lighthouse on the PATH they inherit, as on a site with torchft installed
        cli.env["PATH"] = f"{lighthouse.parent}{os.pathsep}{cli.env.get('PATH', os.defpath)}"
        facts = f"{len(cluster.nodes)} nodes"
        try:
            facts += ", " + cluster.run("sinfo", "--version").stdout.strip()
        except Exception:  # noqa: BLE001 - only a label
            pass
        facts += f", {os.cpu_count()} cores"
        print(f"{facts}; started in {time.monotonic() - t0:.1f} s", flush=True)
        for v in variants:
            rng = random.Random(a.seed)  # every variant gets the same kill moments and victims (by index)
            t1 = time.monotonic()
            try:
                res = run_variant(cluster, cli, v, a, rng)
            except (VariantFailed, AssertionError, TimeoutError) as e:
                res = {"variant": v, "kills": [], "error": str(e)[:3000]}
                print(f"{v}: FAILED: {res['error']}", flush=True)
                cluster.cancel_all()
            results.append(res)
            print(f"{v}: {time.monotonic() - t1:.0f} s", flush=True)
            cluster.wait_nodes_idle()
        report(results, a, facts)
        if a.json:
            Path(a.json).write_text(json.dumps(results, indent=1, default=str))
        print(f"\ntotal {time.monotonic() - t0:.0f} s")
    finally:
        cluster.cancel_all()
        stop_cluster(cluster)
    return 1 if any(r.get("error") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
