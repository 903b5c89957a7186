"""Status.to_dict is written out field by field (a watch pass writes one per open job); the
plain dataclasses.asdict is its oracle."""

from __future__ import annotations

from dataclasses import asdict, fields

import pytest

from launcher.core.status import JobState, Status


def oracle(st: Status) -> dict:
    d = asdict(st)
    d["state"] = st.state.value
    return d


@pytest.mark.parametrize("st", [
    Status(JobState.RUNNING),
    Status(JobState.FAILED, native_state="FAILED", reason="exit 3", exit_code=3, nodes="n[1-2]", restarts=2,
           start_time=1.5, end_time=9.25, extra={"job_id": 7, "cloud": "aws", "nested": {"a": [1, {"b": 2}]}}),
    *[Status(s) for s in JobState],
])
def test_to_dict_equals_the_dataclass_oracle_and_reads_back(st):
    assert st.to_dict() == oracle(st)
    assert Status.from_dict(st.to_dict()) == st


def test_to_dict_names_every_field_and_copies_extra_deeply():
    st = Status(JobState.RUNNING, extra={"nested": {"a": [1]}})
    d = st.to_dict()
    assert set(d) == {f.name for f in fields(Status)}  # a field added to Status must be added to to_dict
    d["extra"]["nested"]["a"].append(2)
    assert st.extra == {"nested": {"a": [1]}}
