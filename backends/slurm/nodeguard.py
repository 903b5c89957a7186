"""Node guard: keeps a requeued Slurm job away from nodes that keep failing it.

Stdlib only: runs inside the job. The Slurm backend stages the job-side zipapp with this
module as a job-side command (``launcher.jobside.zipapp``), and at every start the batch
script calls ``launcher_job.pyz node-guard --job-dir DIR``: it reads the job's per-run
history from Slurm (``sacct``, or ``sacct -c`` where only jobcomp/filetxt exists),
and for every run that ended NODE_FAIL it blames the nodes that run had and this
one does not (the failed node is DOWN, so Slurm moved us away from it). A node
blamed ``LAUNCHER_NODE_FAIL_EXCLUDE`` times (default 2) is added to the job's
ExcNodeList, so later requeues avoid it; if this very allocation holds such a
node, the job requeues itself at once (exit status 1 tells the script to stop).
State lives in ``DIR/node-guard.json``; nothing runs on the login node.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

STATE = "node-guard.json"
COMMAND = "node-guard"  # the job-side command (launcher.jobside.cli)
HELP = "Slurm: steer requeues away from nodes that keep failing this job"


def _run(argv):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout if p.returncode == 0 else None


def expand_hostlist(nodelist: str) -> list:
    if not nodelist or nodelist in ("None", "(null)"):
        return []
    out = _run(["scontrol", "show", "hostnames", nodelist])
    if out is not None:
        return [h for h in out.split() if h]
    return [nodelist]


def run_history(job_id: str) -> list:
    """[(state, nodelist)] for every finished run of this job, oldest first."""
    fields = "State,NodeList"
    out = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", fields])
    if not out:
        out = _run(["sacct", "-c", "-n", "-P", "-j", job_id, "-o", fields]) or ""
    runs = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) >= 2 and parts[0]:
            runs.append((parts[0].split()[0].rstrip("+"), parts[1]))
    return runs


def blame(runs: list, current: list, already: int) -> tuple:
    """Pure: nodes to blame for NODE_FAIL runs not yet counted -> (blamed nodes, runs now counted)."""
    blamed = []
    for state, nodes in runs[already:]:
        if state == "NODE_FAIL":
            suspects = [n for n in nodes if n not in current] or []
            blamed.extend(suspects)
    return blamed, len(runs)


def load(job_dir: str) -> dict:
    try:
        with open(os.path.join(job_dir, STATE)) as f:
            doc = json.load(f)
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def save(job_dir: str, doc: dict) -> None:
    from launcher.checkpoint.posix_io import write_atomic  # packed in the job-side helper too

    write_atomic(os.path.join(job_dir, STATE), json.dumps(doc, indent=1, sort_keys=True))


def guard(job_dir: str, env=None) -> int:
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        return 0
    threshold = int(env.get("LAUNCHER_NODE_FAIL_EXCLUDE", "2") or 2)
    current = expand_hostlist(env.get("SLURM_JOB_NODELIST", ""))
    doc = load(job_dir)
    counts = doc.get("failures", {})
    runs = [(s, expand_hostlist(n)) for s, n in run_history(job_id)]
    blamed, counted = blame(runs, current, int(doc.get("runs_counted", 0)))
    for n in blamed:
        counts[n] = counts.get(n, 0) + 1
    bad = sorted(n for n, c in counts.items() if c >= threshold)
    doc.update(failures=counts, runs_counted=counted, excluded=bad)
    save(job_dir, doc)
    if blamed:
        print(f"launcher: node failures so far: {counts}", file=sys.stderr)
    if bad:
        _run(["scontrol", "update", f"JobId={job_id}", f"ExcNodeList={','.join(bad)}"])
        here = [n for n in current if n in bad]
        if here:
            print(f"launcher: nodes {here} failed this job {threshold}+ times; excluded them and requeueing",
                  file=sys.stderr)
            _run(["scontrol", "requeue", job_id])
            return 1
    return 0


def add_arguments(parser) -> None:
    parser.add_argument("--job-dir", required=True)


def run(args) -> int:
    return guard(args.job_dir)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description=HELP)
    add_arguments(ap)
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
