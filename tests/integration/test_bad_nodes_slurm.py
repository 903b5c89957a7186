"""Bad nodes remembered, on the netns Slurm cluster (docs/bad-nodes.md): a program that exits 42
on one node (the node its first attempt ran on), with ``recovery.bad_nodes.exit_codes: [42]``,
fails there twice; the watch blames that node each time and quarantines it at the second blame;
the next attempt's sbatch script carries ``--exclude`` for it, and it runs elsewhere and completes.
`launcher nodes` lists the quarantine, a new launch excludes the node too, and `nodes release`
lifts it. And a real node crash: Slurm's NODE_FAIL blames the node too."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import start_watcher, stop_watchers

# the first node the job runs on becomes the bad one: the program fails on it, and only on it
PROGRAM = """bad={bad}
node="$SLURMD_NODENAME"
[ -s "$bad" ] || echo "$node" > "$bad"
echo "attempt $LAUNCHER_ATTEMPT on $node"
if [ "$node" = "$(cat "$bad")" ]; then echo "this node is bad"; exit 42; fi
echo "fine on $node"
"""


def _attempt_nodes(cluster, native: str) -> str:
    out = cluster.run("sacct", "-n", "-P", "-X", "-j", native, "-o", "NodeList", check=False).stdout.split()
    if out:
        return out[-1]
    return cluster.job(native).get("NodeList", "")


@pytest.mark.slurm
def test_a_node_that_fails_the_job_twice_is_quarantined_and_the_next_attempt_excludes_it(cli, clean_queue):
    base = clean_queue.shared_dir / f"badnodes-{cli.tmp.name}"
    base.mkdir()
    bad_file = base / "bad-node"
    body = {"run": PROGRAM.format(bad=bad_file), "resources": {"nodes": 1, "time_limit": "5m"},
            "recovery": {"app_error": 0, "node_failure": 3, "bad_nodes": {"exit_codes": [42], "after": 2}}}
    job = cli.launch(cli.spec("badnodes", body))
    watcher = start_watcher(cli, 0, interval=0.5)
    try:
        st = cli.wait_state(job, ["COMPLETED", "FAILED", "GAVE_UP"], timeout=240, interval=0.5)
    finally:
        stop_watchers([watcher])
    bad = bad_file.read_text().strip()
    assert bad in clean_queue.nodes, bad
    assert st["state"] == "COMPLETED", json.dumps(st, indent=1)
    attempts = st["attempts"]
    assert [(a["state"], a["exit_code"]) for a in attempts] == [("FAILED", 42), ("FAILED", 42), ("COMPLETED", 0)]
    ran_on = [_attempt_nodes(clean_queue, a["native_id"]) for a in attempts]
    assert ran_on[:2] == [bad, bad] and ran_on[2] != bad and ran_on[2] in clean_queue.nodes, ran_on
    blamed = [e for e in st["events"] if e["kind"] == "node_blamed"]
    assert [(e["attempt"], e["nodes"]) for e in blamed] == [(1, [bad]), (2, [bad])], st["events"]
    (q,) = [e for e in st["events"] if e["kind"] == "node_quarantined"]
    assert q["node"] == bad and q["target"] == "testcl" and q["blames"] == 2
    # the scripts: the first two attempts excluded nothing, the third excluded the bad node
    job_dir = cli.home / "jobs" / job
    scripts = [(job_dir / f"attempt-{n}.sbatch").read_text() for n in (1, 2, 3)]
    assert not [s for s in scripts[:2] if "--exclude" in s]
    assert f"#SBATCH --exclude={bad}\n" in scripts[2], scripts[2]
    # `launcher nodes`: the quarantine, why and until when
    (listed,) = json.loads(cli.run("nodes", "--json").stdout)
    assert listed["node"] == bad and listed["target"] == "testcl" and listed["blames"] == 2
    assert listed["until"] > listed["since"] and f"job {job} attempt 2" in listed["reason"]
    assert bad in cli.run("nodes").stdout
    # `launcher render` shows what a launch now would submit: the quarantined node excluded
    assert f"#SBATCH --exclude={bad}\n" in cli.run("render", cli.spec("badnodes-r", body), "--target", "testcl").stdout
    # a job that needs every node of the partition is refused, with the counts, not put on the bad node
    whole = cli.spec("badnodes-all", {"run": "true", "resources": {"nodes": len(clean_queue.nodes), "time_limit": "5m"}})
    p = cli.run("launch", whole, "--target", "testcl", check=False)
    n = len(clean_queue.nodes)
    assert p.returncode != 0 and f"asks for {n} node(s), and the quarantined nodes leave {n - 1} of the {n}" in p.stderr
    assert f"quarantined: {bad})" in p.stderr and "launcher nodes release" in p.stderr, p.stderr
    # a new launch on that cluster keeps off it too (its program no longer fails anywhere but there)
    again = cli.launch(cli.spec("badnodes-2", {**body, "recovery": {"app_error": 0}}))
    st2 = cli.wait_state(again, ["COMPLETED", "FAILED", "GAVE_UP"], timeout=120, interval=0.5)
    assert st2["state"] == "COMPLETED", st2
    assert _attempt_nodes(clean_queue, st2["attempts"][0]["native_id"]) != bad
    assert f"#SBATCH --exclude={bad}\n" in (cli.home / "jobs" / again / "attempt-1.sbatch").read_text()
    # released: listed no more, and a launch excludes nothing
    assert f"released {bad} on testcl" in cli.run("nodes", "release", bad, "--target", "testcl").stdout
    assert json.loads(cli.run("nodes", "--json").stdout) == []
    third = cli.launch(cli.spec("badnodes-3", {"run": "true", "resources": {"nodes": 1, "time_limit": "5m"}}))
    assert "--exclude" not in (cli.home / "jobs" / third / "attempt-1.sbatch").read_text()
    cli.wait_state(third, ["COMPLETED", "FAILED"], timeout=120, interval=0.5)


@pytest.mark.slurm
def test_a_node_failure_slurm_requeues_in_place_blames_the_node_and_new_launches_exclude_it(cli, clean_queue):
    """A real node crash (every process of the node's namespace killed): Slurm ends the run NODE_FAIL
    and requeues the job in place; the status refresh that records that restart blames the node
    (after: 1 quarantines it at once), and a new launch on the cluster excludes it."""
    base = clean_queue.shared_dir / f"badnodes-kill-{cli.tmp.name}"
    base.mkdir()
    marker = base / "ran-on"
    body = {"run": f'echo "$SLURMD_NODENAME" >> {marker}; sleep "$([ -s {marker}.2 ] && echo 1 || echo 60)"',
            "resources": {"nodes": 1, "time_limit": "5m"},
            "recovery": {"node_failure": 3, "bad_nodes": {"after": 1, "quarantine": "2h"}}}
    job = cli.launch(cli.spec("badnodes-kill", body))
    cli.wait_state(job, "RUNNING", timeout=60, interval=0.3)
    poll("the first run started", lambda: marker.exists() and marker.read_text().strip(), timeout=60,
                interval=0.2)
    node = marker.read_text().split()[0]
    (base / "ran-on.2").write_text("the next run ends at once")
    clean_queue.kill_node(node)
    st = cli.wait_state(job, "COMPLETED", timeout=240, interval=1)
    assert [a["state"] for a in st["attempts"]][:2] == ["NODE_FAIL", "COMPLETED"], st["attempts"]
    blamed = [e for e in st["events"] if e["kind"] == "node_blamed"]
    assert [(e["attempt"], e["nodes"]) for e in blamed] == [(1, [node])], st["events"]
    (q,) = [e for e in st["events"] if e["kind"] == "node_quarantined"]
    assert q["node"] == node and q["blames"] == 1
    (listed,) = json.loads(cli.run("nodes", "--json").stdout)
    assert listed["node"] == node and 2 * 3600 - 300 < listed["until"] - listed["since"] <= 2 * 3600
    again = cli.launch(cli.spec("badnodes-kill-2", {"run": "true", "resources": {"nodes": 1, "time_limit": "5m"}}))
    assert f"#SBATCH --exclude={node}\n" in (cli.home / "jobs" / again / "attempt-1.sbatch").read_text()
    assert cli.wait_state(again, ["COMPLETED", "FAILED"], timeout=120, interval=0.5)["state"] == "COMPLETED"
