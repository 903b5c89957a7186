"""Cancelling N local jobs: one ``cancel_many`` (one grace period for all) against ``cancel``
of each in turn (each waits for its own job to stop), interleaved, N jobs that take EXIT_S to
stop on their notice (a checkpoint save). Prints each round and the medians and their ratio.

    TMPDIR=/var/tmp .venv/bin/python bench/local_cancel_many.py [--jobs 8] [--rounds 3] [--exit-s 0.5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def start(app, n: int, exit_s: float, tag: str) -> list:
    from launcher.launching.launch import launch
    from launcher.backend.sections import spec_from_text

    ready = Path(tempfile.mkdtemp(prefix="ready-"))
    run = f"trap 'sleep {exit_s}; exit 0' TERM; touch {ready}/$LAUNCHER_JOB_ID; while true; do sleep 0.05; done"
    handles = []
    for i in range(n):
        text = f"name: {tag}{i}\nrun: {run!r}\n"
        handles.append(launch(app, spec_from_text(text), text, None, "local").handle)
    deadline = time.monotonic() + 60
    while len(list(ready.iterdir())) < n:  # every job's trap is set
        if time.monotonic() > deadline:
            raise SystemExit("the jobs did not start within 60 s")
        time.sleep(0.02)
    return handles


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--exit-s", type=float, default=0.5)
    a = ap.parse_args()
    os.environ["LAUNCHER_HOME"] = tempfile.mkdtemp(prefix="bench-cancel-")
    from launcher.api.context import App

    app = App()
    backend = app.backend("local")
    times: dict = {"cancel each": [], "cancel_many": []}
    for r in range(a.rounds):
        for way in (list(times) if r % 2 == 0 else list(times)[::-1]):  # interleaved, order alternating
            hs = start(app, a.jobs, a.exit_s, f"r{r}{way[7:11]}")
            t = time.perf_counter()
            if way == "cancel_many":
                errs = backend.cancel_many(hs)
            else:
                errs = {}
                for h in hs:
                    backend.cancel(h)
            times[way].append(time.perf_counter() - t)
            assert not errs, errs
            print(f"round {r} {way:>12}: {times[way][-1]:.2f} s for {a.jobs} jobs", flush=True)
    each, many = (statistics.median(times[k]) for k in ("cancel each", "cancel_many"))
    print(f"median: cancel each {each:.2f} s, cancel_many {many:.2f} s, ratio {each / many:.1f}x "
          f"({a.jobs} jobs, {a.exit_s:g} s to stop each)")
    app.close()


if __name__ == "__main__":
    main()
