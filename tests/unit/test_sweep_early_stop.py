"""Successive halving over a sweep's elements: which elements stop at each rung, and why."""

from __future__ import annotations

import pytest

from launcher.sweep.early_stop import Judgement, judge, stopped_elements, value_at
from launcher.spec.sweep import EarlyStop


def cfg(**kw) -> EarlyStop:
    return EarlyStop(**{"metric": "loss", "mode": "min", "keep": 0.5, "rungs": [100, 300], **kw})


def curve(final: dict[int, float], steps=(100, 300)) -> dict:
    """reports[index] = {step: {"loss": value}} with the same value at every step."""
    return {i: {s: {"loss": v} for s in steps} for i, v in final.items()}


def test_at_a_rung_reached_by_all_the_worst_half_stop():
    js = judge(cfg(rungs=[100]), curve({0: 0.9, 1: 0.1, 2: 0.5, 3: 0.3}, steps=(100,)))
    assert sorted(stopped_elements(js)) == [0, 2]
    by = {j.index: j for j in js}
    assert (by[1].rank, by[3].rank, by[2].rank, by[0].rank) == (1, 2, 3, 4)
    assert all(j.population == 4 and j.kept == 2 for j in js)
    assert "rung 100: loss 0.9 ranks 4 of 4 (lowest first; the best 2 go on): stopped" == by[0].reason


def test_mode_max_keeps_the_highest():
    js = judge(cfg(mode="max", rungs=[100]), curve({0: 0.9, 1: 0.1, 2: 0.5, 3: 0.3}, steps=(100,)))
    assert sorted(stopped_elements(js)) == [1, 3]
    assert "highest first" in js[0].reason


def test_rungs_halve_again_and_only_survivors_are_judged_at_the_next():
    reports = curve({i: v for i, v in enumerate([0.8, 0.1, 0.7, 0.2, 0.6, 0.3, 0.5, 0.4])})
    js = judge(cfg(), reports)
    first = [j for j in js if j.rung == 100]
    second = [j for j in js if j.rung == 300]
    assert sorted(j.index for j in first if j.stop) == [0, 2, 4, 6]
    assert sorted(j.index for j in second) == [1, 3, 5, 7]
    assert sorted(j.index for j in second if j.stop) == [5, 7]
    assert sorted(stopped_elements(js)) == [0, 2, 4, 5, 6, 7]


def test_elements_that_have_not_reached_a_rung_are_not_judged():
    reports = {0: {50: {"loss": 0.1}}, 1: {100: {"loss": 0.5}}, 2: {120: {"loss": 0.9}}, 3: {}}
    js = judge(cfg(rungs=[100]), reports)
    assert sorted(j.index for j in js) == [1, 2]
    assert stopped_elements(js).keys() == {2}


def test_judgement_is_incremental_each_element_once_per_rung_and_stops_are_final():
    c = cfg(rungs=[100])
    early = judge(c, {0: {100: {"loss": 0.5}}})
    assert [(j.index, j.stop, j.population) for j in early] == [(0, False, 1)]  # the first always goes on
    later = judge(c, {0: {100: {"loss": 0.5}}, 1: {100: {"loss": 0.1}}, 2: {100: {"loss": 0.9}}}, early)
    assert [(j.index, j.stop, j.rank, j.population) for j in later] == [(1, False, 1, 3), (2, True, 3, 3)]
    # element 0 is not judged again at that rung, even though it now ranks 2 of 3
    assert judge(c, {0: {100: {"loss": 0.5}}, 1: {100: {"loss": 0.1}}, 2: {100: {"loss": 0.9}}},
                 early + later) == []


def test_a_stopped_element_is_never_judged_again_even_if_it_keeps_reporting():
    c = cfg()
    first = judge(c, curve({0: 0.1, 1: 0.9}, steps=(100,)))
    assert stopped_elements(first).keys() == {1}
    again = judge(c, curve({0: 0.1, 1: 0.0}), first)
    assert [j.index for j in again] == [0] and not again[0].stop


def test_same_inputs_same_decisions_and_ties_go_to_the_lower_index():
    reports = curve({3: 0.5, 1: 0.5, 2: 0.5, 0: 0.5}, steps=(100,))
    a = judge(cfg(rungs=[100]), reports)
    assert a == judge(cfg(rungs=[100]), dict(reversed(list(reports.items()))))
    assert sorted(stopped_elements(a)) == [2, 3]


def test_missing_or_nan_metrics_rank_worst():
    reports = {0: {100: {"acc": 1.0}}, 1: {100: {"loss": 0.9}}, 2: {100: {"loss": float("nan")}},
               3: {100: {"loss": 0.95}}}
    js = judge(cfg(rungs=[100]), reports)
    assert sorted(stopped_elements(js)) == [0, 2]
    by = {j.index: j for j in js}
    assert by[0].value is None and "no loss reported" in by[0].reason


def test_the_value_at_a_rung_is_the_latest_report_at_or_before_it():
    steps = {50: {"loss": 0.9}, 90: {"loss": 0.7}, 110: {"loss": 0.1}, 95: {"other": 1.0}}
    assert value_at(steps, 100, "loss") == 0.7
    assert value_at({"90": {"loss": "0.5"}}, 100, "loss") == 0.5  # JSON keys and values
    assert value_at({150: {"loss": 0.1}}, 100, "loss") is None


def test_ended_elements_shape_the_rung_but_are_never_stopped():
    js = judge(cfg(rungs=[100]), curve({0: 0.9, 1: 0.1, 2: 0.5, 3: 0.3}, steps=(100,)), ended={0})
    assert sorted(stopped_elements(js)) == [2]
    assert "had ended already" in {j.index: j for j in js}[0].reason


@pytest.mark.parametrize("keep,n,kept", [(0.5, 1, 1), (0.5, 2, 1), (0.5, 3, 2), (0.5, 12, 6), (0.25, 12, 3),
                                         (0.3, 10, 3), (0.1, 5, 1), (0.9, 10, 9)])
def test_how_many_go_on(keep, n, kept):
    js = judge(cfg(keep=keep, rungs=[100]), curve({i: float(i) for i in range(n)}, steps=(100,)))
    assert sum(not j.stop for j in js) == kept and all(j.kept == kept for j in js)


def test_twelve_elements_three_rungs_deterministic_metrics():
    """The acceptance case: 12 elements, rungs 100/300/900, keep 0.5: 6, then 3, then 2 go on."""
    quality = [7, 3, 11, 0, 9, 5, 1, 10, 4, 8, 2, 6]  # lower is better
    reports = {i: {s: {"loss": q + s / 1000} for s in (100, 300, 900)} for i, q in enumerate(quality)}
    js = judge(cfg(rungs=[100, 300, 900]), reports)
    survivors = {r: sorted(j.index for j in js if j.rung == r and not j.stop) for r in (100, 300, 900)}
    assert survivors == {100: [1, 3, 5, 6, 8, 10], 300: [3, 6, 10], 900: [3, 6]}
    assert len(stopped_elements(js)) == 10


def test_judgements_serialise():
    j = judge(cfg(rungs=[100]), curve({0: 0.5}, steps=(100,)))[0]
    assert Judgement(**j.to_json()) == j
