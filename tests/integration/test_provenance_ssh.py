"""A cluster reached over SSH (a real sshd on 127.0.0.1 in front of the test cluster): the
checkpoint root is a path on the cluster's file system, so RUN.json is written there
through the target's SSH runner, and the job's commits name the run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.sshd]

ROOT = Path(__file__).resolve().parents[2]


def test_run_json_is_written_on_the_cluster_through_ssh(cli, clean_queue, sshd_server):
    root = clean_queue.shared_dir / f"ckpt-ssh-{time.time_ns()}"
    spec = cli.spec("provssh", {"run": f"python3 {ROOT / 'examples' / 'train.py'} --steps 6 --every 3 "
                                       f"--result {root}.result.json",
                                "checkpoint": {"root": str(root)}, "resources": {"time_limit": "5m"}})
    job = cli.launch(spec, "remote")
    st = cli.wait_state(job, "COMPLETED", timeout=180, interval=1)
    ev = [e for e in st["events"] if e["kind"] == "provenance"]
    # written through the runner: the location names the login host, not a local path
    assert len(ev) == 1 and ev[0]["run_json"].endswith(f":{root}/.launcher/runs/{job}/RUN.json")
    assert not ev[0]["run_json"].startswith("/")
    rec = json.loads((root / ".launcher" / "runs" / job / "RUN.json").read_text())
    assert rec["run"] == job and rec["target"] == "remote" and rec["versions"]["backend"]["name"] == "slurm"
    assert rec["versions"]["backend"]["version"]
    d = json.loads(cli.run("lineage", root / "step-000000006.g1", "--json").stdout)
    assert d["run_id"] == job and d["run"] == rec
