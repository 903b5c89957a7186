"""The web view's jobs page over a store of 10,000 jobs (issue 24: pages of 10,000 jobs render
in under 1 s), measured end to end over HTTP against a running `launcher serve` server in this
process, and its parts (the read, the HTML) alone.

    .venv/bin/python bench/serve_pages.py [--jobs 10000] [--rounds 5]

The store is built in a temporary LAUNCHER_HOME (each job with 1-3 attempts and a recorded
cost; one in ten jobs an element of a sweep). Rows: the default page (500 jobs), one page
holding all 10,000 (?per=10000), the JSON of that page, and one job's page. Figures are
printed (wall time: median and worst of the rounds; CPU time: median), never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HANDLE = json.dumps({"backend": "local", "native_id": "n", "extra": {}})


def build(home: Path, n: int) -> None:
    """N jobs written in one transaction (the store's own methods, inside one batch)."""
    from launcher.state.store import StateStore

    s = StateStore(home)
    states = ["COMPLETED", "RUNNING", "PENDING", "FAILED", "PREEMPTED"]
    with s.batch():
        for i in range(n):
            jid = f"bench-{i:06d}"
            meta = {"sweep": {"id": f"sw-{i // 100}", "index": i % 100, "size": 100, "params": {"lr": 0.001}}} \
                if i % 10 == 0 else None
            s.begin_job(jid, f"train-{i % 37}", "local", "local", None, "name: x\nrun: 'true'\n", meta=meta)
            for a in range(1, 2 + i % 3):
                s.record_submission(jid, a, "local", HANDLE, f"{i}-{a}", state=states[(i + a) % len(states)],
                                    reason="preempted by the scheduler" if a > 1 else "")
                s.update_attempt(jid, a, cost_usd=0.01 * a, started=time.time() - 100, ended=time.time() - 10)
    s.close()


def timed(fn, rounds: int) -> tuple[float, float, float]:
    """(median wall, worst wall, median CPU) seconds of FN over ROUNDS (after one warm-up call). CPU
    is this process's (the server runs in it: its threads and the client's), which a loaded
    machine does not inflate the way it does wall time."""
    fn()  # warm: the connection of the serving thread, imports
    xs, cpu = [], []
    for _ in range(rounds):
        t, c = time.perf_counter(), time.process_time()
        fn()
        xs.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(xs), max(xs), statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    from launcher.api.readview import ReadView
    from launcher.serve import pages
    from tests.fixtures.serving import get, served

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        t = time.perf_counter()
        build(home, a.jobs)
        print(f"store of {a.jobs} jobs built in {time.perf_counter() - t:.1f} s "
              f"({(home / 'state.db').stat().st_size / 1e6:.1f} MB)")
        view = ReadView(home=home)
        rows = []
        rows.append(("read a page of 500 (ReadView.jobs)", timed(lambda: view.jobs(1, 500), a.rounds)))
        d = view.jobs(1, a.jobs)
        rows.append((f"read all {a.jobs} (ReadView.jobs)", timed(lambda: view.jobs(1, a.jobs), a.rounds)))
        rows.append((f"HTML of {a.jobs} rows (pages.jobs_page)", timed(lambda: pages.jobs_page(d), a.rounds)))
        view.close()
        with served(home) as (url, _):
            def page(path):
                def go():
                    status, _, body = get(url + path)
                    assert status == 200, (status, body[:200])
                return go

            rows.append(("GET / (500 jobs a page)", timed(page("/"), a.rounds)))
            rows.append((f"GET /?per={a.jobs} (all on one page)", timed(page(f"/?per={a.jobs}"), a.rounds)))
            rows.append((f"GET /api/jobs?per={a.jobs}", timed(page(f"/api/jobs?per={a.jobs}"), a.rounds)))
            rows.append(("GET /job/bench-000001", timed(page("/job/bench-000001"), a.rounds)))
            rows.append(("GET /sweep/sw-0 (100 elements)", timed(page("/sweep/sw-0"), a.rounds)))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; target: a page of {a.jobs} jobs "
          f"under 1 s")
    print(f"{'':<44} {'wall median':>12} {'wall worst':>11} {'CPU median':>11}")
    for label, (med, worst, cpu) in rows:
        print(f"{label:<44} {med * 1000:9.1f} ms {worst * 1000:8.1f} ms {cpu * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
