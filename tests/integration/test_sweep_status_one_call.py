"""`launcher status SWEEP` of a 1,000-element sweep asks Slurm ONCE (issue 13: one status
call covers every element), on the real test cluster. Every Slurm command the status
process runs is counted by wrappers put first on its PATH, which log the command and then
run the real one."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI

pytestmark = pytest.mark.slurm

SIZE = 1000
SLURM_COMMANDS = ("sbatch", "squeue", "scontrol", "sacct", "sinfo", "scancel", "srun", "sprio", "sshare")
STATUS_QUERIES = ("squeue", "scontrol", "sacct")


def _wrappers(cluster, folder: Path, log: Path) -> str:
    """A PATH whose Slurm commands log "NAME ARGS" to LOG, then run the real command."""
    folder.mkdir()
    for name in SLURM_COMMANDS:
        real = shutil.which(name, path=cluster.env["PATH"])
        if real is None:
            continue
        w = folder / name
        w.write_text(f"#!/bin/sh\necho \"{name} $*\" >> {shlex.quote(str(log))}\n"
                     f"exec {shlex.quote(real)} \"$@\"\n")
        w.chmod(0o755)
    return f"{folder}:{cluster.env['PATH']}"


def test_status_of_a_1000_element_sweep_is_one_scheduler_call(clean_queue, tmp_path):
    cluster = clean_queue
    tmp = cluster.shared_dir / f"sweep1k-{tmp_path.name}"  # seen by every node
    tmp.mkdir()
    cli = LauncherCLI(tmp, cluster)
    spec = cli.spec("sw1k", {"run": ["sleep", "600"], "workdir": str(tmp), "resources": {"time_limit": "15m"},
                             "sweep": {"grid": {"i": list(range(SIZE))}, "max_parallel": 2}})
    sweep_id = cli.run("launch", spec, "--target", "testcl").stdout.split(":")[0].strip()
    assert sweep_id
    # two elements run (max_parallel), the other 998 wait in the array's one pending record
    s = poll("two elements running", lambda: (lambda s: s if s["counts"].get("RUNNING") == 2 else None)(
        cli.status(sweep_id)), timeout=120, interval=1)
    assert s["size"] == SIZE and s["counts"] == {"RUNNING": 2, "PENDING": SIZE - 2}, s["counts"]

    log = tmp / "slurm-calls.log"
    path = _wrappers(cluster, tmp / "wrappers", log)
    p = cli.run("status", sweep_id, "--json", env={"PATH": path})
    calls = log.read_text().splitlines() if log.exists() else []
    assert len(calls) == 1 and calls[0].split()[0] in STATUS_QUERIES, calls  # ONE scheduler call, nothing else

    s = json.loads(p.stdout)
    assert s["size"] == SIZE and len(s["elements"]) == SIZE
    assert [e["index"] for e in s["elements"]] == list(range(SIZE))
    assert sum(s["counts"].values()) == SIZE and s["counts"].get("RUNNING") == 2, s["counts"]
    assert {e["params"]["i"] for e in s["elements"]} == set(range(SIZE))

    log.unlink()  # the text view asks no more than the JSON one
    text = cli.run("status", sweep_id, env={"PATH": path}).stdout
    assert f"sweep {sweep_id}: {SIZE} elements" in text, text[:500]
    assert len(log.read_text().splitlines()) == 1
    log.unlink()  # cancel of the 1,000 elements: a few scheduler calls in all, not a few per element
    out = cli.run("cancel", sweep_id, env={"PATH": path}).stdout
    names = [c.split()[0] for c in log.read_text().splitlines()]
    assert names.count("scancel") == 1 and names.count("scontrol") == 1 and len(names) <= 4, names
    assert out.splitlines()[-1] == f"sweep {sweep_id}: {SIZE} element(s): {SIZE} cancelled now", out[-300:]
