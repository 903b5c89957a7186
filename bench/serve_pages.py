"""The web view's jobs page over a store of 10,000 jobs (issue 24: pages of 10,000 jobs render
in under 1 s), measured end to end over HTTP against a running `launcher serve` server in this
process, and its parts (the read, the HTML) alone; then (issue 33: the dashboard's jobs page with
500 jobs renders in under 1 s in Chromium) the jobs page of a 500-job store loaded in a headless
Chromium, side by side with another checkout's `launcher serve` (--baseline, e.g. main's).

    .venv/bin/python bench/serve_pages.py [--jobs 10000] [--rounds 5]
    .venv/bin/python bench/serve_pages.py --browser-only --baseline /work/main [--browser-jobs 500]

In Chromium, "load" is the Navigation Timing from the request's start to the load event's end
(the HTML fetched, parsed, styled and laid out, its script run: the times converted, the sweeps
folded); "ready" adds the wait until the page's first paint is done (two animation frames).
Each server is the real `launcher serve` command, run with PYTHONPATH set to its checkout.

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


def in_chromium(roots: list, n: int, rounds: int) -> list:
    """[(label, (median, worst, median "ready") seconds)] of the jobs page of an N-job store in a
    headless Chromium, served by each ROOT's `launcher serve` (a checkout: its PYTHONPATH)."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from tests.fixtures.serve_store import build as build_dashboard
    from tests.fixtures.serving import served_cli

    launcher = shutil.which("launcher") or str(Path(sys.executable).with_name("launcher"))
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or "chromium"
    for f in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000",
              "--disable-background-networking", "--no-first-run"):
        opts.add_argument(f)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        build_dashboard(home, n)
        drv = webdriver.Chrome(options=opts, service=Service(executable_path=shutil.which("chromedriver")))
        try:
            for i, root in enumerate(roots):
                env = {**os.environ, "PYTHONPATH": str(root), "LAUNCHER_HOME": str(home)}
                with served_cli(launcher, env, "--refresh", "3600", "--quiet", log_path=Path(tmp) / f"serve-{i}.log") \
                        as (url, _):
                    loads, ready = [], []
                    for k in range(rounds + 1):
                        t = time.perf_counter()
                        drv.get(url + "/")
                        drv.execute_async_script("var done = arguments[0]; requestAnimationFrame(function () {"
                                                 " requestAnimationFrame(function () { done(); }); });")
                        wall = time.perf_counter() - t
                        nav = drv.execute_script("var n = performance.getEntriesByType('navigation')[0];"
                                                 " return n.loadEventEnd - n.startTime;") / 1000.0
                        rows_seen = drv.execute_script("return document.querySelectorAll('#jobs tbody tr').length")
                        if k:  # the first is a warm-up (the server's connection, Chromium's cache of the CSS)
                            loads.append(nav)
                            ready.append(wall)
                    label = f"Chromium: / with {n} jobs, {Path(root).name} ({rows_seen} rows)"
                    rows.append((label, (statistics.median(loads), max(loads), statistics.median(ready))))
        finally:
            drv.quit()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--browser-jobs", type=int, default=500)
    ap.add_argument("--baseline", help="another checkout whose `launcher serve` is measured beside this one")
    ap.add_argument("--browser-only", action="store_true", help="only the Chromium rows")
    ap.add_argument("--no-browser", action="store_true", help="no Chromium rows")
    a = ap.parse_args()
    here = Path(__file__).resolve().parents[1]
    if not a.browser_only:
        http_rows(a)
    if not a.no_browser:
        roots = ([Path(a.baseline).resolve()] if a.baseline else []) + [here]
        rows = in_chromium(roots, a.browser_jobs, a.rounds)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; target: the jobs page with "
              f"{a.browser_jobs} jobs rendered in Chromium under 1 s")
        print(f"{'':<60} {'load median':>12} {'load worst':>11} {'ready median':>13}")
        for label, (med, worst, ready) in rows:
            print(f"{label:<60} {med * 1000:9.1f} ms {worst * 1000:8.1f} ms {ready * 1000:10.1f} ms")


def http_rows(a) -> None:
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
