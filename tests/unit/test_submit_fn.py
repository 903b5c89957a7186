"""The pure parts of ``Launcher.submit``: the spec of a call, the job side's result record and
how the launcher reads it back, and what cannot be pickled."""

from __future__ import annotations

import pickle
import threading

import pytest

from launcher.api.functions import (FunctionFailed, NotPicklable, RemoteTraceback, function_spec, pickled_payload,
                                    read_outcome)
from launcher.jobside.call import failure_record, run_call
from launcher.spec.model import JobSpec


def test_a_call_spec_runs_jobside_call_with_its_own_root_and_keeps_the_base_fields():
    base = JobSpec(name="b", run="x", env={"A": "1"}, setup="echo hi", resources={"gpus_per_node": 2})
    s = function_spec(base, "fn-add", "/r/c1", "/usr/bin/py thon", {"time_limit": "1h"}, "/w")
    assert s.name == "fn-add" and s.checkpoint.root == "/r/c1" and s.env == {"A": "1"} and s.setup == "echo hi"
    assert s.run.endswith("exec '/usr/bin/py thon' -m launcher.jobside.call")  # the interpreter quoted
    assert s.resources.gpus_per_node == 2 and s.resources.time_limit == 3600
    assert s.workdir == "/w" and s.sweep is None


def test_a_map_spec_is_a_sweep_of_one_point_per_item():
    s = function_spec(None, "fn-sq", "/r/c2", "python3", None, None, size=5, max_parallel=2)
    assert s.sweep.size == 5 and s.sweep.max_parallel == 2 and s.workdir is None


def test_a_returned_value_and_a_raised_exception_come_back_as_they_were():
    ok, status = run_call(lambda a, b: a + b, (2, 3), {})
    assert status == 0 and read_outcome("j1", pickle.dumps(ok)) == (True, 5)
    rec, status = run_call(int, ("nope",), {})
    assert status == 1 and rec["type"] == "builtins.ValueError" and "Traceback" in rec["traceback"]
    good, exc = read_outcome("j2", pickle.dumps(rec))
    assert not good and isinstance(exc, ValueError) and isinstance(exc.__cause__, RemoteTraceback)
    assert "invalid literal" in exc.__cause__.tb and "j2" in exc.__notes__[0]


class _Odd(Exception):
    def __init__(self, a, b):  # pickles, but cannot be rebuilt from its args
        super().__init__(a)


def test_an_exception_that_cannot_be_rebuilt_is_told_by_type_message_and_traceback():
    rec = failure_record(_Odd("x", 1), "TB text\n")
    assert rec["exception"] is None
    _, exc = read_outcome("j3", pickle.dumps(rec))
    assert isinstance(exc, FunctionFailed) and "j3 raised" in str(exc) and "_Odd" in str(exc)
    assert exc.traceback_text == "TB text\n"


def test_what_cannot_be_pickled_is_named():
    lock = threading.Lock()
    with pytest.raises(NotPicklable, match=r"item 1 of the map, argument 1 of len \(lock\)"):
        pickled_payload(len, [(([1],), {}), ((lock,), {})])
    with pytest.raises(NotPicklable, match="keyword argument 'k' of len"):
        pickled_payload(len, [((), {"k": lock})])
