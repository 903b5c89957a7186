"""`launcher cancel SWEEP` of a 20-element sweep on the real Slurm test cluster makes a few
scheduler calls in all, not a few per element: one status call, one dedupe lookup and one
`scancel` naming the array (counted by wrappers first on the command's PATH), and still
tells each element's truth: had already finished, was already cancelled, or cancelled now
(one `cancelled` event each)."""

from __future__ import annotations

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI
from .test_sweep_status_one_call import _wrappers

pytestmark = pytest.mark.slurm

SIZE = 20
QUICK = 2  # elements 0 and 1 end at once (COMPLETED); the others sleep


def test_cancel_of_a_20_element_sweep_is_a_few_scheduler_calls_and_says_what_each_was(clean_queue, tmp_path):
    cluster = clean_queue
    tmp = cluster.shared_dir / f"sweepc-{tmp_path.name}"  # seen by every node
    tmp.mkdir()
    cli = LauncherCLI(tmp, cluster)
    body = f'if [ "$LAUNCHER_SWEEP_INDEX" -lt {QUICK} ]; then exit 0; fi; exec sleep 600'
    spec = cli.spec("swc", {"run": ["bash", "-c", body], "workdir": str(tmp), "resources": {"time_limit": "15m"},
                            "sweep": {"grid": {"i": list(range(SIZE))}, "max_parallel": 4}})
    sweep_id = cli.run("launch", spec, "--target", "testcl").stdout.split(":")[0].strip()
    e = [f"{sweep_id}-e{i}" for i in range(SIZE)]
    poll("elements 0 and 1 completed, four running", lambda: (lambda c: c.get("COMPLETED") == QUICK and
                                                              c.get("RUNNING") == 4)(cli.status(sweep_id)["counts"]),
         timeout=180, interval=1)
    array = cli.status(e[0])["attempts"][0]["native_id"].split("_")[0]
    assert "closed as CANCELLED" in cli.run("cancel", sweep_id, "--element", 2).stdout
    poll("element 2's task gone",
         lambda: f"{array}_2" not in cluster.run("squeue", "-h", "-r", "-o", "%i").stdout.split(), timeout=30)

    log = tmp / "slurm-calls.log"
    p = cli.run("cancel", sweep_id, env={"PATH": _wrappers(cluster, tmp / "wrappers", log)})
    calls = [c.split() for c in log.read_text().splitlines()]
    names = [c[0] for c in calls]
    assert names.count("scancel") <= 2, calls
    assert names.count("scontrol") == 1, calls  # the one batched status call
    assert len(calls) <= 5, calls  # + one dedupe listing (squeue, sacct where it is not found)
    (scancel,) = [c for c in calls if c[0] == "scancel"]
    assert scancel[1:] == [array], scancel  # the array's id covers every task

    out = p.stdout.splitlines()
    for i in range(QUICK):
        assert f"{e[i]}: had already finished: COMPLETED; nothing to cancel" in out, p.stdout
    assert any(line.startswith(f"{e[2]}: was already cancelled") for line in out), p.stdout
    for i in range(3, SIZE):
        assert f"{e[i]}: closed as CANCELLED; `launcher watch` will not resume it" in out, p.stdout
    assert out[-1] == (f"sweep {sweep_id}: {SIZE} element(s): {SIZE - 3} cancelled now, 1 already cancelled, "
                       f"{QUICK} had already finished"), p.stdout

    s = cli.status(sweep_id)
    assert s["counts"] == {"COMPLETED": QUICK, "CANCELLED": SIZE - QUICK}, s["counts"]
    for i in range(SIZE):
        kinds = [ev["kind"] for ev in cli.status(e[i])["events"]]
        assert kinds.count("cancelled") == (0 if i < QUICK else 1), (i, kinds)
    poll("nothing of the sweep left in the queue", lambda: not cluster.run("squeue", "-h", "-t", "PD,R,CG",
                                                                           check=False).stdout.strip(), timeout=60)
    assert "nothing to cancel" in cli.run("cancel", sweep_id).stdout  # again: idempotent, no new event
    assert [ev["kind"] for ev in cli.status(e[5])["events"]].count("cancelled") == 1
