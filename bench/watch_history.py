"""What a watch pass pays for the store's closed history (issue 29: a pass costs what changes,
not what exists), side by side in one run: the listings a pass makes, today's and the plain
ones they replaced, on stores with the same open jobs and more and more closed ones.

- ``open_jobs``: the open jobs (the watch loop asks after every pass whether any is left).
  Baseline: every row listed, then filtered in Python (``list_jobs`` + ``is_open``), as before.
- ``watch_rows``: the rows a pass decides on: the open jobs and the cancelled ones whose
  submission was unsettled when cancelled. Baseline: ``state NOT IN (finals) OR (state =
  'CANCELLED' AND meta LIKE '%"launch_overtaken"%')``, as before: every closed row read.

Today's: ``state IN (OPEN_STATES)`` by the jobs_state index, and the jobs_overtaken partial
index (schema 8). SQLite only (a PostgreSQL server's planner has statistics of its own: see
bench/state_engines.py for that engine). Medians of ROUNDS calls, printed, never asserted.

    .venv/bin/python bench/watch_history.py [--open 100] [--history 0,10000,50000] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from launcher.core.status import FINAL_STATES
from launcher.state.rows import is_open
from launcher.state.store import StateStore


def fill(store: StateStore, open_jobs: int, closed: int) -> None:
    """OPEN_JOBS RUNNING rows and CLOSED rows (half CANCELLED, half COMPLETED), with metas of a
    typical size (a sweep element's, its closing record); one marked cancelled row."""
    now = time.time()
    meta = {"seed": 1, "sweep": {"id": "s", "index": 0, "params": {"lr": 0.1}}, "closing": {"by": "u", "at": now}}
    rows = [(f"c{i}", "CANCELLED" if i % 2 else "COMPLETED", meta) for i in range(closed)]
    rows += [(f"o{i}", "RUNNING", {"seed": i}) for i in range(open_jobs)]
    rows.append(("marked", "CANCELLED", {"launch_overtaken": {"at": now, "attempt": 1}}))
    with store.tx(jobs=()) as db:
        db.executemany(
            "INSERT INTO jobs(job_id,name,target,backend,spec_path,spec_yaml,created,updated,state,ckpt_root,meta,"
            "sweep_id) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
            [(j, "n", "t", "local", None, "name: n\nrun: python train.py\n", now + i * 1e-6, now, state, None,
              json.dumps(m), None) for i, (j, state, m) in enumerate(rows)])


def baseline_open_jobs(store: StateStore) -> list:
    return [j for j in store.list_jobs(limit=100000) if is_open(j) and store.may_act(j)]


def baseline_watch_rows(store: StateStore) -> list:
    finals = sorted(FINAL_STATES)
    q = (f"SELECT * FROM jobs WHERE state NOT IN ({','.join('?' * len(finals))}) "
         "OR (state = 'CANCELLED' AND meta LIKE ?) ORDER BY created DESC")
    return store.readable_rows(store.db.execute(q, (*finals, '%"launch_overtaken"%')).fetchall())


def median_ms(fn, rounds: int) -> tuple:
    times, n = [], None
    for _ in range(rounds):
        t = time.perf_counter()
        n = len(fn())
        times.append(time.perf_counter() - t)
    return round(statistics.median(times) * 1000, 2), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--open", type=int, default=100)
    ap.add_argument("--history", default="0,10000,50000", help="closed rows, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    for closed in [int(x) for x in a.history.split(",")]:
        with tempfile.TemporaryDirectory() as d:
            store = StateStore(Path(d) / "home")
            fill(store, a.open, closed)
            out = {"open": a.open, "closed": closed}
            for name, base, now in (("open_jobs", baseline_open_jobs, store.open_jobs),
                                    ("watch_rows", baseline_watch_rows, store.watch_rows)):
                # interleaved, so both see the same machine
                (b_ms, b_n), (t_ms, t_n) = median_ms(lambda: base(store), a.rounds), median_ms(now, a.rounds)
                assert b_n == t_n, (name, b_n, t_n)  # the same rows either way
                out[name] = {"rows": t_n, "baseline_ms": b_ms, "today_ms": t_ms}
            store.close()
        if a.json:
            print(json.dumps(out))
        else:
            print(f"{closed:>7} closed, {a.open} open: " + "; ".join(
                f"{k} {v['rows']} rows: baseline {v['baseline_ms']} ms, today {v['today_ms']} ms"
                for k, v in out.items() if isinstance(v, dict)))


if __name__ == "__main__":
    main()
