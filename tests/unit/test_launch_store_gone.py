"""A state store that fails between the scheduler's accept and the record (issue 28 MEDIUM 7):
the launch says the job was submitted, with its id, and that status/watch settle it by its
dedupe token; the rows stay SUBMITTING. Never "(nothing was written)"."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from launcher.backend.protocols import Handle
from launcher.core.errors import SubmitOutcomeUnknown
from launcher.launching.submit import NewSubmission, not_recorded
from launcher.state.db import StoreUnreachable
from launcher.state.store import StateStore

GONE = StoreUnreachable("the state store postgresql://db/launcher cannot be reached (connection refused); check "
                        "that the server runs and the host and port in $LAUNCHER_STATE_URL or state_url "
                        "(nothing was written)")


def test_the_message_names_the_submitted_id_and_the_settling():
    text = not_recorded("job j-1", "slurm", Handle("slurm", "cl", "j-1", "4242", 1), GONE)
    assert "job j-1 was submitted to cl (slurm id 4242)" in text
    assert "stays SUBMITTING" in text and "dedupe token" in text and "Do not launch it again" in text
    assert "nothing was written" not in text


def test_a_store_failing_at_the_record_leaves_the_rows_submitting(tmp_path):
    store = StateStore(tmp_path / "home")
    try:
        store.begin_job("j-1", "j", "cl", "slurm", None, "name: j\n")
        sub = NewSubmission(store, SimpleNamespace(name="slurm"), None, ["j-1"], lambda: store.forget_job("j-1"))
        handle = Handle("slurm", "cl", "j-1", "4242", 1)

        def record():
            raise GONE

        with pytest.raises(SubmitOutcomeUnknown, match=r"slurm id 4242\).*settles it by its dedupe token"):
            sub.recorded(handle, record)
        row = store.get_job("j-1")
        assert row.state == "SUBMITTING" and not row.handle
        assert "4242" in row.meta["submit_unknown"]["reason"]  # noted when the store answered again
    finally:
        store.close()
