"""Early stops of one watch pass: how long `launcher watch --once` takes to stop K elements of a
local sweep at once. Every element reports its loss at step 10 and then runs on; on its notice
(SIGTERM) it takes EXIT_S to stop, as a checkpoint save does (--ignore-term: it never stops on
its own, so the local backend's 10 s grace runs out and SIGKILL ends it). With keep 0.5, a
sweep of 2K elements stops K of them in the first pass.

Each round launches a fresh sweep (the real `launcher` command, local target), waits until every
element has reported, then times one `launcher watch --once`. Prints each round and the median.

    TMPDIR=/var/tmp .venv/bin/python bench/sweep_early_stops.py [--stops 4] [--rounds 3] [--exit-s 2]
        [--ignore-term] [--code DIR]

--code DIR runs the launcher from another checkout (e.g. `git archive main | tar -x -C DIR`),
to compare before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

PROGRAM = textwrap.dedent("""
    import os, signal, sys, time
    from launcher import jobside
    exit_s, ignore = float(sys.argv[1]), sys.argv[2] == "1"
    def on_term(*_):
        if ignore:
            return
        time.sleep(exit_s)  # "saving a checkpoint"
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    i = int(os.environ["LAUNCHER_SWEEP_INDEX"])
    jobside.report(10, loss=float(i))
    open(os.path.join(sys.argv[3], "reported-%d" % i), "w").close()
    while True:
        time.sleep(0.1)
""")


def run(env, *args, timeout=600) -> subprocess.CompletedProcess:
    # cwd: not this checkout (python -c puts the working directory first on sys.path)
    p = subprocess.run([sys.executable, "-c", "import sys; from launcher.cli import main; sys.exit(main())", *args],
                       env=env, capture_output=True, text=True, timeout=timeout,
                       cwd=os.path.dirname(env["LAUNCHER_HOME"]))
    if p.returncode != 0:
        raise SystemExit(f"launcher {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def one_round(a, r: int) -> tuple[float, int]:
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-stops-{r}-"))
    env = dict(os.environ, LAUNCHER_HOME=str(tmp / "home"), LAUNCHER_CONFIG=str(tmp / "config.yaml"))
    if a.code:
        env["PYTHONPATH"] = os.pathsep.join([a.code, *filter(None, [env.get("PYTHONPATH")])])
    (tmp / "config.yaml").write_text("targets: {}\n")
    (tmp / "element.py").write_text(PROGRAM)
    marks = tmp / "marks"
    marks.mkdir()
    n = 2 * a.stops
    spec = tmp / "stops.yaml"
    spec.write_text(json.dumps({
        "name": "stops", "run": f"{sys.executable} {tmp / 'element.py'} {a.exit_s} {int(a.ignore_term)} {marks}",
        "checkpoint": {"root": str(tmp / "ck")},
        "sweep": {"grid": {"x": list(range(n))}, "max_parallel": n,
                  "early_stop": {"metric": "loss", "mode": "min", "keep": 0.5, "rungs": [10]}}}))
    p = run(env, "launch", str(spec), "--target", "local")
    sweep = next(w.rstrip(":") for line in (p.stdout + p.stderr).splitlines() for w in line.split()[:1]
                 if ": submitted to " in line)
    deadline = time.monotonic() + 120
    while len(list(marks.iterdir())) < n:
        if time.monotonic() > deadline:
            raise SystemExit("the elements did not all report within 120 s")
        time.sleep(0.05)
    t = time.perf_counter()
    out = run(env, "watch", "--once").stdout
    took = time.perf_counter() - t
    stopped = sum(1 for line in out.splitlines() if ": stopped (" in line)
    run(env, "cancel", sweep)  # the survivors
    return took, stopped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stops", type=int, default=4, help="elements stopped in the pass (the sweep has twice as many)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--exit-s", type=float, default=2.0, help="seconds an element takes to stop on its notice")
    ap.add_argument("--ignore-term", action="store_true", help="elements ignore the notice: the grace runs out")
    ap.add_argument("--code", help="run the launcher from this checkout instead")
    a = ap.parse_args()
    times = []
    for r in range(a.rounds):
        took, stopped = one_round(a, r)
        times.append(took)
        print(f"round {r}: watch --once stopped {stopped} of {2 * a.stops} elements in {took:.2f} s", flush=True)
    how = "ignoring the notice" if a.ignore_term else f"{a.exit_s:g} s to stop on the notice"
    print(f"median {statistics.median(times):.2f} s for {a.stops} stops in one pass ({how})"
          + (f" [code: {a.code}]" if a.code else ""))


if __name__ == "__main__":
    main()
