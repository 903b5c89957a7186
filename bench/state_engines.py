"""The state store on SQLite and on PostgreSQL (127.0.0.1), side by side in one run (issue 23, §6):

- per launch: the store's own work of one ``launch()`` (``begin_job`` + ``record_submission``
  with its event and provenance record), each launch its own transactions as a real one;
- ``status`` of 10,000 jobs: reading them (``list_jobs``) and formatting the listing;
- a claim and its release (what a watch pass does per open job), on one thread.

Medians of ROUNDS rounds, engines interleaved (order alternating). PostgreSQL is a throw-away
Debian PostgreSQL 15 started for the run (tests/fixtures/postgres.py) with fsync on; it is
measured twice: with its default durability (``synchronous_commit=on``: every commit waits
for the WAL flush) and with ``synchronous_commit=off``, SQLite's own (WAL, ``synchronous=NORMAL``:
a commit is not flushed). ``--url`` measures an existing server instead.

    .venv/bin/python bench/state_engines.py [--rounds 5] [--launches 200] [--jobs 10000] [--url URL]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--launches", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--url", default="", help="an existing PostgreSQL database (else a throw-away server)")
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
        print(f"state store engines: medians of {a.rounds} rounds; {a.launches} launches a round, status of "
              f"{a.jobs:,} jobs, 200 claims a round; PostgreSQL {'at ' + a.url if a.url else 'on 127.0.0.1 (fsync on)'}")
        print(f"{'engine':<38} {'per launch ms':>14} {'status ms':>10} {'claim+release ms':>17}")
        med = {n: {k: statistics.median(v) for k, v in m.items()} for n, m in results.items()}
        for name, m in med.items():
            print(f"{name:<38} {m['launch']:>14.2f} {m['status']:>10.1f} {m['claim']:>17.2f}")
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
