"""Bad nodes remembered on a backend that cannot exclude nodes (``local``): a program that exits
with a code ``recovery.bad_nodes.exit_codes`` names is a node failure (its budget, not app_error's),
and the job's events say that nothing is quarantined there, rather than quarantining silently in vain."""

from __future__ import annotations

import json

from .launcher_cli import start_watcher, stop_watchers


def test_a_node_fault_on_a_backend_that_cannot_exclude_nodes_is_said_and_quarantines_nothing(cli):
    body = {"run": 'if [ "$LAUNCHER_ATTEMPT" -lt 3 ]; then exit 42; fi; echo fine',
            "recovery": {"app_error": 0, "node_failure": 2, "bad_nodes": {"exit_codes": [42], "after": 1}}}
    job = cli.launch(cli.spec("badnodes-local", body), "local")
    watcher = start_watcher(cli, 0, interval=0.2)
    try:
        st = cli.wait_state(job, ["COMPLETED", "FAILED", "GAVE_UP"], timeout=120, interval=0.3)
    finally:
        stop_watchers([watcher])
    # app_error: 0 would have given up at once: the named exit is a node failure, within node_failure: 2
    assert st["state"] == "COMPLETED", json.dumps(st, indent=1)
    assert [(a["state"], a["exit_code"]) for a in st["attempts"]] == [("FAILED", 42), ("FAILED", 42), ("COMPLETED", 0)]
    unplaced = [e for e in st["events"] if e["kind"] == "node_fault_unplaced"]
    assert [e["attempt"] for e in unplaced] == [1, 2], st["events"]
    assert all("backend local cannot exclude nodes" in e["reason"] for e in unplaced), unplaced
    assert not [e for e in st["events"] if e["kind"] in ("node_blamed", "node_quarantined")]
    assert json.loads(cli.run("nodes", "--json").stdout) == []
