"""bench/fleet.py run small (issue 29 item 7): 50 jobs on 2 targets of the scheduler stand-in,
1 then 2 watcher processes running the real watch pass against one store, on SQLite and on
PostgreSQL, with churn so that jobs end and are preempted (and resubmitted). Asserted: the
JSON lines and their keys, and that no (job, attempt) was submitted twice and no job was lost.
The figures themselves are never asserted (bench/: figures, not tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "fleet.py"
sys.path.insert(0, str(ROOT / "bench"))

from fleet import KEYS  # noqa: E402


def run_bench(tmp_path: Path, url: str = "") -> list[dict]:
    argv = [sys.executable, str(BENCH), "--jobs", "50", "--targets", "2", "--watchers", "1,2", "--passes", "3",
            "--interval", "0.3", "--churn", "0.1", "--status-latency-ms", "5", "--work", str(tmp_path / "work"),
            "--json"]
    if url:
        argv += ["--url", url]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("LAUNCHER_STATE_URL", None)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def check(lines: list[dict], store: str) -> None:
    assert [line["watchers"] for line in lines] == [1, 2]
    for line in lines:
        assert set(KEYS) <= set(line), line
        assert (line["jobs"], line["targets"], line["store"]) == (50, 2, store)
        assert line["double_submits"] == 0, line
        assert line["lost"] == 0, line
        assert line["churned_preempted"] > 0, line  # the watchers had something to resubmit
        assert line["passes"] == 3 * line["watchers"]
        # today every watcher makes one status call per target per pass; the target is 1 a tick
        assert 1 <= line["status_calls_per_target_per_tick"] <= line["watchers"], line
        for k in ("pass_s_p50", "pass_cpu_s_p50", "observe_gap_s_p99", "claims_per_s"):
            assert isinstance(line[k], (int, float)) and line[k] >= 0, (k, line)


def test_fleet_bench_small_on_sqlite(tmp_path):
    check(run_bench(tmp_path), "sqlite")


@pytest.mark.postgres
def test_fleet_bench_small_on_postgres(tmp_path, pg_server):
    # the bench makes (and drops) a database of its own per watcher count on the server
    check(run_bench(tmp_path, pg_server.url("postgres")), "postgresql")
