"""Reading the elements' reports for early stopping is bounded: one hung root never blocks
`launcher watch`, and is not read again while its earlier read hangs."""

from __future__ import annotations

import threading
import time

import launcher.jobside as jobside
from launcher.sweep.reports import latest, read_element_reports


def test_reports_written_with_jobside_report_are_read_per_element(tmp_path, monkeypatch):
    for i, loss in enumerate([0.5, 0.25]):
        root = tmp_path / f"element-{i:04d}"
        monkeypatch.setenv("LAUNCHER_CKPT_ROOT", str(root))
        monkeypatch.setenv("LAUNCHER_ATTEMPT", "1")
        jobside.report(10, loss=loss * 2)
        jobside.report(20, loss=loss, acc=0.5)
    read = read_element_reports({i: str(tmp_path / f"element-{i:04d}") for i in range(2)}, timeout=30)
    assert read.problems == {}
    assert read.reports == {0: {10: {"loss": 1.0}, 20: {"loss": 0.5, "acc": 0.5}},
                            1: {10: {"loss": 0.5}, 20: {"loss": 0.25, "acc": 0.5}}}


def test_a_root_that_never_answers_is_left_out_and_not_read_again_until_its_read_ends():
    release = threading.Event()
    calls: list = []

    def reader(root):
        calls.append(root)
        if root == "/hung":
            release.wait(30)
        return {1: {"loss": 0.5}}

    read = read_element_reports({0: "/ok", 1: "/hung", 2: "/ok2"}, timeout=0.5, reader=reader)
    assert read.reports == {0: {1: {"loss": 0.5}}, 2: {1: {"loss": 0.5}}}
    assert "no answer from /hung within 0.5s" in read.problems[1]
    again = read_element_reports({1: "/hung"}, timeout=0.5, reader=reader)
    assert calls.count("/hung") == 1 and "still waiting for an earlier read of /hung" in again.problems[1]
    release.set()
    for _ in range(200):  # the hung read ends: the root is read again
        again = read_element_reports({1: "/hung"}, timeout=5, reader=reader)
        if not again.problems:
            break
        time.sleep(0.05)
    assert again.reports == {1: {1: {"loss": 0.5}}}


def test_a_read_that_fails_names_the_root_and_the_error():
    def reader(root):
        raise OSError("permission denied")

    read = read_element_reports({3: "/root/x"}, timeout=5, reader=reader)
    assert read.reports == {} and read.problems[3] == ("cannot read the reports under /root/x: "
                                                       "OSError: permission denied")


def test_latest_is_the_last_step_and_each_metrics_latest_value():
    assert latest({5: {"loss": 1.0, "acc": 0.1}, 10: {"loss": 0.5}}) == (10, {"loss": 0.5, "acc": 0.1})
    assert latest({}) == (None, {})
