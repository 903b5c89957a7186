"""The state store on SQLite and on PostgreSQL (127.0.0.1), side by side in one run (issue 23, §6):

- per launch: the store's own work of one ``launch()`` (``begin_job`` + ``record_submission``
  with its event and provenance record), each launch its own transactions as a real one;
- ``status`` of 10,000 jobs: reading them (``list_jobs``) and formatting the listing;
- a claim and its release (what a watch pass does per open job), on one thread;
- a ``watch`` pass over 1,000 open jobs (``watch.cycle``, the backend's status call stubbed);
- claim throughput: claims per second with one process, then with three claiming at once.

Medians of ROUNDS rounds, engines interleaved (order alternating). PostgreSQL is a throw-away
Debian PostgreSQL 15 started for the run (tests/fixtures/postgres.py) with fsync on; it is
measured twice: with its default durability (``synchronous_commit=on``: every commit waits
for the WAL flush) and with ``synchronous_commit=off``, SQLite's own (WAL, ``synchronous=NORMAL``:
a commit is not flushed). ``--url`` measures an existing server instead.

    .venv/bin/python bench/state_engines.py [--rounds 5] [--launches 200] [--jobs 10000] [--url URL]
        [--open-jobs 1000] [--watchers 3] [--claim-seconds 5]
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

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def per_launch(store, n: int, tag: str) -> float:
    """ms per launch: the store's writes of one launch, N times."""
    t = time.perf_counter()
    for i in range(n):
        job = f"{tag}-{i}"
        store.begin_job(job, "bench", "local", "local", "/x/bench.yaml", "name: bench\nrun: 'true'\n",
                        ckpt_root=f"/ck/{job}", meta={"seed": i})
        store.record_submission(job, 1, "local", json.dumps({"native_id": str(i)}), str(i),
                                events=[("submitted", {"target": "local", "native_id": str(i), "attempt": 1})],
                                provenance=(f"/ck/{job}/RUN.json", json.dumps({"run": job, "spec": "x" * 400})))
    return (time.perf_counter() - t) * 1000 / n


def fill(store, n: int) -> None:
    with store.batch():
        for i in range(n):
            job = f"done-{i}"
            store.begin_job(job, "bench", "local", "local", None, "name: bench\n", meta={"seed": i})
            store.record_submission(job, 1, "local", "{}", str(i))
            store.update_job(job, state="COMPLETED")


def status_of(store, n: int) -> float:
    """ms to read the N newest jobs and format them as `launcher status` does."""
    from launcher.api.status_view import jobs_lines

    t = time.perf_counter()
    rows = store.list_jobs(limit=n)
    jobs_lines(rows)
    assert len(rows) == n, len(rows)
    return (time.perf_counter() - t) * 1000


def claims(store, n: int) -> float:
    """ms per claim + release of a job (one watcher)."""
    t = time.perf_counter()
    for i in range(n):
        c = store.claim(f"done-{i}", ttl=60)
        store.release(f"done-{i}", c.owner)
    return (time.perf_counter() - t) * 1000 / n


def open_jobs(store, n: int, tag: str) -> list[str]:
    """N open jobs, each RUNNING on the local target (a handle, one attempt): what a watch pass reads."""
    from launcher.backend.protocols import Handle

    ids = [f"{tag}-{i}" for i in range(n)]
    with store.batch():
        for i, job in enumerate(ids):
            store.begin_job(job, "bench", "local", "local", None, "name: bench\nrun: 'true'\n", meta={"seed": i})
            h = Handle("local", "local", job, str(100000 + i), 1, {"job_dir": f"/nonexistent/{job}"})
            store.record_submission(job, 1, "local", h.to_json(), h.native_id, state="RUNNING")
    return ids


def watch_pass(store, home: Path) -> float:
    """ms of one `launcher watch` pass (``launcher.recovery.watch.cycle``) over the store's open jobs,
    every one RUNNING: the real cycle (list, reconcile, status refresh written in one transaction,
    the decisions and their claims), with the local backend's status call answering RUNNING for
    every handle at once (no processes: the store's and the launcher's own work, no scheduler's)."""
    from launcher.api.context import App
    from launcher.core.status import JobState, Status
    from launcher.recovery import watch

    config = home / "config.yaml"
    config.write_text("targets: {}\n")
    app = App(config, home)
    app.use_store(store)
    local = app.registry.load("local")

    class AllRunning(local):
        def status(self, handles):
            return [Status(JobState.RUNNING, native_state="running", start_time=time.time() - 60) for _ in handles]

    app._backends["local"] = AllRunning(app.target("local"), app)
    t = time.perf_counter()
    outcomes = watch.cycle(app)
    took = (time.perf_counter() - t) * 1000
    assert len(outcomes) >= 1 and all(o.action == "running" for o in outcomes), outcomes[:3]
    return took


def _claimer(url: str, home: str, ids: list, seconds: float, start: float, out) -> None:
    """One watcher's process: claim and release jobs IDS round robin for SECONDS; puts its count."""
    from launcher.state.store import StateStore

    s = StateStore(Path(home), url=url)
    time.sleep(max(0.0, start - time.time()))
    n, i, end = 0, 0, start + seconds
    while time.time() < end:
        c = s.claim(ids[i % len(ids)], ttl=60)
        if c is not None:
            s.release(c.job.job_id, c.owner)
            n += 1
        i += 1
    s.close()
    out.put(n)


def claim_throughput(url: str, home: Path, ids: list, watchers: int, seconds: float) -> float:
    """Claims (taken and released) per second by WATCHERS processes at once over the same jobs,
    each starting at its own offset (they contend for the writers' lock, as watchers do)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    start = time.time() + 1.0
    procs = [ctx.Process(target=_claimer, args=(url, str(home), ids[k * len(ids) // watchers:] +
                                                ids[:k * len(ids) // watchers], seconds, start, q))
             for k in range(watchers)]
    for p in procs:
        p.start()
    total = sum(q.get(timeout=seconds + 120) for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--launches", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--url", default="", help="an existing PostgreSQL database (else a throw-away server)")
    ap.add_argument("--open-jobs", type=int, default=1000, help="open jobs of the watch pass")
    ap.add_argument("--watchers", type=int, default=3, help="processes claiming at once")
    ap.add_argument("--claim-seconds", type=float, default=5.0)
    a = ap.parse_args()
    from launcher.state.store import StateStore

    server = None
    if a.url:
        urls = {"postgresql": a.url}
    else:
        from tests.fixtures.postgres import start_postgres

        server = start_postgres(durable=True)
        urls = {}
        for name, opts in (("postgresql", ""), ("postgresql, synchronous_commit=off", "?options=-csynchronous_commit%3Doff")):
            db = server.create_database(f"bench_{len(urls)}")
            urls[name] = server.url(db) + opts
        # a person of the team (launcher_team, not the tables' owner): every statement under the
        # row-level security policies (launcher.state.team), on a store the superuser created
        db = server.create_database("bench_team")
        StateStore(Path(tempfile.mkdtemp(prefix="bench-pg-")), url=server.url(db)).close()
        pw = os.urandom(8).hex()
        server.sql(f"CREATE ROLE bench_person LOGIN PASSWORD '{pw}' IN ROLE launcher_team")
        urls["postgresql, synchronous_commit=off, a person (RLS)"] = server.url(db, "bench_person", pw) + opts
    try:
        stores = {"sqlite": StateStore(Path(tempfile.mkdtemp(prefix="bench-sqlite-")), url="")}
        for name, url in urls.items():
            stores[name] = StateStore(Path(tempfile.mkdtemp(prefix="bench-pg-")), url=url)
        results: dict = {name: {"launch": [], "status": [], "claim": []} for name in stores}
        for name, s in stores.items():
            fill(s, a.jobs)
        order = list(stores)
        for r in range(a.rounds):
            for name in (order if r % 2 == 0 else order[::-1]):
                s = stores[name]
                results[name]["launch"].append(per_launch(s, a.launches, f"r{r}"))
                results[name]["status"].append(status_of(s, a.jobs))
                results[name]["claim"].append(claims(s, 200))
        watch_ms, claims_s = {}, {}
        for name, s in stores.items():
            with s.tx() as db:  # the launches above are done: the pass watches only the jobs below
                db.execute("UPDATE jobs SET state='COMPLETED' WHERE state <> 'COMPLETED'")
            ids = open_jobs(s, a.open_jobs, "open")
            passes = [watch_pass(s, Path(tempfile.mkdtemp(prefix="bench-watch-"))) for _ in range(max(1, a.rounds // 2))]
            watch_ms[name] = statistics.median(passes)
            claims_s[name] = (claim_throughput(s.url, s.home, ids, 1, a.claim_seconds),
                              claim_throughput(s.url, s.home, ids, a.watchers, a.claim_seconds))
        print(f"state store engines: medians of {a.rounds} rounds; {a.launches} launches a round, status of "
              f"{a.jobs:,} jobs, 200 claims a round; PostgreSQL {'at ' + a.url if a.url else 'on 127.0.0.1 (fsync on)'}")
        print(f"{'engine':<52} {'per launch ms':>14} {'status ms':>10} {'claim+release ms':>17}")
        med = {n: {k: statistics.median(v) for k, v in m.items()} for n, m in results.items()}
        for name, m in med.items():
            print(f"{name:<52} {m['launch']:>14.2f} {m['status']:>10.1f} {m['claim']:>17.2f}")
        print(f"\nwatch pass over {a.open_jobs:,} open (RUNNING) jobs, and claims per second (claim + release; "
              f"{a.claim_seconds:g} s; 1 process, then {a.watchers} at once)")
        print(f"{'engine':<52} {'watch pass ms':>13} {'claims/s x1':>12} {f'claims/s x{a.watchers}':>12}")
        for name in stores:
            print(f"{name:<52} {watch_ms[name]:>13.0f} {claims_s[name][0]:>12.0f} {claims_s[name][1]:>12.0f}")
        base = med["sqlite"]["launch"]
        for name in urls:
            print(f"per-launch overhead of {name} over SQLite: {med[name]['launch'] - base:+.2f} ms")
        for s in stores.values():
            s.close()
    finally:
        if server is not None:
            server.destroy()


if __name__ == "__main__":
    main()
