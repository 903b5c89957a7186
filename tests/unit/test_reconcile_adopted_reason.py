"""A SUBMITTING row whose outcome was unknown, once adopted by its dedupe token, no longer
says its outcome is unknown (issue 28: a stale reason after adoption)."""

from __future__ import annotations

from types import SimpleNamespace

from launcher.backend.protocols import Handle
from launcher.recovery.outcome import NO_HOOKS
from launcher.recovery.watch import reconcile_one
from launcher.state.store import StateStore


def test_an_adopted_row_no_longer_says_its_outcome_is_unknown(tmp_path):
    store = StateStore(tmp_path / "home")
    try:
        store.begin_job("j-1", "j", "cl", "slurm", None, "name: j\n")
        store.mark_submit_unknown(["j-1"], "sbatch was killed by signal 11 (exit -11)")
        assert "unknown" in store.get_job("j-1").reason
        found = Handle("slurm", "cl", "j-1", "4242", 1)
        backend = SimpleNamespace(name="slurm", find=lambda job: found)
        app = SimpleNamespace(store=store, backend=lambda name: backend, watch_hooks=NO_HOOKS)
        o = reconcile_one(app, "j-1")
        assert (o.action, o.reason) == ("adopted", "cl id 4242")
        row = store.get_job("j-1")
        assert row.state == "PENDING" and "unknown" not in row.reason and "dedupe token" in row.reason, row.reason
    finally:
        store.close()
