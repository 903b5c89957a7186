"""A sweep launch killed after Slurm accepted its array (issue: exactly-once under pauses and
stalls): its elements are adopted by the ARRAY's dedupe token in one lookup, none is closed
"nothing ran", and `cancel SWEEP` cancels the array itself while no element row is settled."""

from __future__ import annotations

import re
import sqlite3
import subprocess

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LAUNCHER, LauncherCLI

pytestmark = pytest.mark.slurm

SIZE = 6


def killed_sweep_launch(cli, tmp) -> str:
    spec = cli.spec("swk", {"run": ["bash", "-c", f"echo \"$LAUNCHER_SWEEP_INDEX\" >> {tmp}/starts; exec sleep 600"],
                            "workdir": str(tmp), "resources": {"time_limit": "15m"},
                            "sweep": {"grid": {"i": list(range(SIZE))}}})
    # the launch dies (kill -9) right after sbatch accepted the array, before the store records it
    p = subprocess.run([LAUNCHER, "launch", str(spec), "--target", "testcl"], capture_output=True, text=True,
                       env={**cli.env, "LAUNCHER_FAULTS": "between_submit_and_record=kill"}, timeout=120)
    assert p.returncode == -9, (p.returncode, p.stderr)
    # not `status`: it would settle the rows already
    with sqlite3.connect(f"file:{cli.home / 'state.db'}?mode=ro", uri=True) as db:
        (sweep_id,) = [r[0] for r in db.execute("SELECT DISTINCT sweep_id FROM jobs")]
        states = [r[0] for r in db.execute("SELECT state FROM jobs")]
    assert states == ["SUBMITTING"] * SIZE, states
    return sweep_id


def tasks(cluster) -> list:
    return [x for x in cluster.run("squeue", "-h", "-r", "-o", "%i").stdout.split() if x]


def test_a_killed_sweep_launch_is_adopted_by_its_arrays_token_and_runs_once(clean_queue, tmp_path):
    cluster = clean_queue
    tmp = cluster.shared_dir / f"sweepk-{tmp_path.name}"
    tmp.mkdir()
    cli = LauncherCLI(tmp, cluster)
    sweep_id = killed_sweep_launch(cli, tmp)
    assert len(tasks(cluster)) >= 1  # the array is at the scheduler, unknown to the store
    out = cli.run("watch", "--once").stdout
    assert "adopted" in out and "failed" not in out, out
    # named by the array's own id, never by the pending record the lookup found (<id>_[3-5])
    assert re.search(r"the sweep's array \d+,", out), out
    array = None
    for i in range(SIZE):
        a = cli.status(f"{sweep_id}-e{i}")["attempts"]
        assert len(a) == 1 and a[0]["native_id"].endswith(f"_{i}"), a
        array = a[0]["native_id"].split("_")[0]
    poll("every element started once", lambda: (tmp / "starts").exists()
         and sorted((tmp / "starts").read_text().split()) == [str(i) for i in range(SIZE)], timeout=180, interval=1)
    out = cli.run("watch", "--once").stdout
    assert "resubmitted" not in out and "failed" not in out, out
    cli.run("cancel", sweep_id)
    poll("the array gone", lambda: not [t for t in tasks(cluster) if t.split("_")[0] == array], timeout=60)
    assert sorted((tmp / "starts").read_text().split()) == [str(i) for i in range(SIZE)]


def test_cancel_of_a_killed_sweep_launch_cancels_the_array_by_its_token(clean_queue, tmp_path):
    cluster = clean_queue
    tmp = cluster.shared_dir / f"sweepkc-{tmp_path.name}"
    tmp.mkdir()
    cli = LauncherCLI(tmp, cluster)
    sweep_id = killed_sweep_launch(cli, tmp)
    arrays = {t.split("_")[0] for t in tasks(cluster)}
    assert len(arrays) == 1, arrays
    out = cli.run("cancel", sweep_id).stdout  # no element row knows the array yet
    assert f"{SIZE} cancelled now" in out, out
    poll("the array gone", lambda: not tasks(cluster), timeout=60)
    st = cli.status(sweep_id)
    assert st["counts"] == {"CANCELLED": SIZE}, st["counts"]
