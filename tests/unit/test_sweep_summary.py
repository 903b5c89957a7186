"""What `launcher status SWEEP` shows: counts by state and one row per element."""

from __future__ import annotations

import json

from launcher.sweep.early_stop import Judgement
from launcher.spec.sweep_elements import Element
from launcher.sweep.summary import STOPPED, format_text, param_text, summarize

ELS = [Element(i, {"lr": lr, "batch": b}) for i, (lr, b) in enumerate([(1.0e-4, 32), (1.0e-4, 64), (3.0e-4, 32),
                                                                        (3.0e-4, 64)])]


def test_counts_in_a_fixed_order_and_elements_without_a_state_are_pending():
    s = summarize("sw-1", ELS, {0: "COMPLETED", 1: "RUNNING", 3: "FAILED"})
    assert s["counts"] == {"PENDING": 1, "RUNNING": 1, "COMPLETED": 1, "FAILED": 1}
    assert list(s["counts"]) == ["PENDING", "RUNNING", "COMPLETED", "FAILED"]
    assert s["size"] == 4 and s["sweep"] == "sw-1"


def test_unknown_states_come_after_the_known_ones_alphabetically():
    s = summarize("sw", ELS, {0: "ZOMBIE", 1: "BOOT_FAIL", 2: "RUNNING"})
    assert list(s["counts"]) == ["PENDING", "RUNNING", "BOOT_FAIL", "ZOMBIE"]


def stop(index: int, rung: int, reason: str) -> Judgement:
    return Judgement(index, rung, 0.9, 4, 4, 2, True, reason)


def test_an_early_stopped_element_is_stopped_whatever_the_scheduler_says():
    s = summarize("sw", ELS, {2: "CANCELLED"}, stopped={2: stop(2, 100, "rung 100: loss 0.9 ranks 4 of 4")})
    row = s["elements"][2]
    assert row["state"] == STOPPED and row["reason"].startswith("rung 100") and row["rung"] == 100
    assert "CANCELLED" not in s["counts"] and s["counts"][STOPPED] == 1


def test_rows_carry_index_params_state_step_metric_and_are_json():
    s = summarize("sw", reversed(ELS), {0: "RUNNING"}, steps={0: 300}, metric="loss",
                  metrics={0: {"loss": 0.25, "acc": 0.5}}, metric_steps={0: 320})
    assert [r["index"] for r in s["elements"]] == [0, 1, 2, 3]
    assert s["elements"][0] == {"index": 0, "params": {"lr": 1.0e-4, "batch": 32}, "state": "RUNNING",
                                "step": 300, "metric": 0.25, "metrics": {"loss": 0.25, "acc": 0.5},
                                "metric_step": 320, "rung": None, "reason": None, "attempts": []}
    assert s["elements"][1]["step"] is None and s["elements"][1]["metric"] is None
    assert s["elements"][1]["metrics"] == {}
    assert json.loads(json.dumps(s)) == s


def test_text_has_a_count_line_a_header_and_one_line_per_element():
    s = summarize("sw-1", ELS, {0: "RUNNING", 1: "COMPLETED"}, steps={0: 300, 1: 900}, metric="loss",
                  metrics={0: {"loss": 0.25}, 1: {"loss": 0.125}}, stopped={3: stop(3, 100, "rung 100: worse")})
    lines = format_text(s).splitlines()
    assert lines[0] == "sweep sw-1: 4 elements: 1 PENDING, 1 RUNNING, 1 COMPLETED, 1 STOPPED"
    assert lines[1].split() == ["index", "state", "step", "loss", "params"]
    assert lines[2].split() == ["0", "RUNNING", "300", "0.25", "lr=0.0001", "batch=32"]
    assert lines[4].split() == ["2", "PENDING", "-", "-", "lr=0.0003", "batch=32"]
    assert lines[-1] == "element 3 stopped: rung 100: worse"
    # the columns line up
    assert len({line.index("params") if i == 0 else None for i, line in enumerate(lines[1:2])}) == 1


def test_hostile_parameter_values_stay_on_their_line():
    els = [Element(0, {"tag": "first\nsecond"}), Element(1, {"tag": "$(rm -rf /) 'q'"}), Element(2, {"tag": "\x1b[31m"})]
    text = format_text(summarize("sw", els, {}))
    assert len(text.splitlines()) == 2 + 3
    assert 'tag="first\\nsecond"' in text and "\x1b" not in text
    assert "tag=\"$(rm -rf /) 'q'\"" in text


def test_param_text():
    assert [param_text(v) for v in (True, 3, 1.0e-5, "adam", "a b", "")] == ["true", "3", "1e-05", "adam",
                                                                           '"a b"', '""']


def test_an_empty_sweep_summary_still_formats():
    assert format_text(summarize("sw", [], {})).startswith("sweep sw: 0 elements: no elements")


def test_without_early_stop_the_table_shows_every_metric_reported():
    s = summarize("sw", ELS[:2], {0: "RUNNING", 1: "PENDING"}, steps={0: 40},
                  metrics={0: {"loss": 0.25, "acc": 0.875}})
    assert s["metric"] is None and s["elements"][0]["metric"] is None
    lines = format_text(s).splitlines()
    assert lines[1].split() == ["index", "state", "step", "metrics", "params"]
    assert lines[2].split() == ["0", "RUNNING", "40", "acc=0.875", "loss=0.25", "lr=0.0001", "batch=32"]
    assert lines[3].split() == ["1", "PENDING", "-", "-", "lr=0.0001", "batch=64"]


def test_an_element_that_ran_more_than_once_lists_its_attempts_with_their_states():
    s = summarize("sw", ELS, {1: "COMPLETED"}, attempts={1: [(1, "NODE_FAIL"), (2, "COMPLETED")]})
    assert s["elements"][1]["attempts"] == [{"attempt": 1, "state": "NODE_FAIL"}, {"attempt": 2, "state": "COMPLETED"}]
    assert s["elements"][0]["attempts"] == []
    assert "element 1 attempts: 1 NODE_FAIL, 2 COMPLETED" in format_text(s).splitlines()
