"""`launcher report SWEEP`: the pure sums over elements and the choice of the best element."""

from __future__ import annotations

import pytest

from launcher.report.accounting import CATEGORIES
from launcher.report.sweep import (ElementIn, MetricChoice, ReportUsageError, aggregate, best_index, choose_metric,
                                   element_value, index_ranges)
from launcher.report.sweep_text import format_sweep_report
from launcher.spec.sweep import EarlyStop


def report(wall, useful, cost=None, complete=True, t0=0.0, open_=False, saves=(), gpu_h=0.0):
    cats = {c: 0.0 for c in CATEGORIES}
    cats["useful_compute"] = useful
    cats["queue_wait"] = wall - useful
    return {"wall_s": wall, "categories": cats, "goodput_pct": 100.0 * useful / wall, "t0": t0,
            "t_end": t0 + wall, "open": open_,
            "attempts": [{"saves": [{"step": s, "committed": True} for s in saves]}],
            "cost": {"total_usd": cost, "complete": complete, "useful_gpu_hours": gpu_h}}


def el(i, state="COMPLETED", rep=None, metrics=None, **kw):
    return ElementIn(index=i, params={"lr": 0.1 * (i + 1)}, state=state, job_id=f"sw-e{i}", report=rep,
                     metrics=metrics or {}, **kw)


LOSS = MetricChoice("loss", "min")


def test_categories_goodput_and_cost_add_up_over_the_elements():
    els = [el(0, rep=report(100, 60, cost=1.0, t0=0, gpu_h=0.5)),
           el(1, rep=report(50, 40, cost=0.5, t0=10, gpu_h=0.25)),
           el(2, "FAILED", rep=report(30, 0, cost=0.25, t0=20))]
    d = aggregate("sw", els)
    assert d["wall_s"] == 180 and d["sum_s"] == pytest.approx(180)
    assert sum(d["categories"].values()) == pytest.approx(d["wall_s"])
    assert d["categories"]["useful_compute"] == 100
    assert d["goodput_pct"] == pytest.approx(100 * 100 / 180)
    assert d["cost"]["total_usd"] == pytest.approx(1.75) and d["cost"]["complete"] and d["cost"]["priced"] == 3
    assert d["cost"]["usd_per_useful_gpu_hour"] == pytest.approx(1.75 / 0.75)
    assert d["span"] == {"t0": 0, "t_end": 100, "elapsed_s": 100, "open": False}
    assert d["counts"] == {"COMPLETED": 2, "FAILED": 1}
    assert [r["cost_usd"] for r in d["elements"]] == [1.0, 0.5, 0.25]


def test_a_missing_price_makes_the_total_a_lower_bound_and_none_at_all_says_why():
    d = aggregate("sw", [el(0, rep=report(10, 5, cost=1.0)), el(1, rep=report(10, 5, cost=None, complete=False))])
    assert d["cost"]["total_usd"] == 1.0 and not d["cost"]["complete"]
    assert "lower bound" in d["cost"]["reason"]
    d = aggregate("sw", [el(0, rep=report(10, 5, cost=None, complete=False))])
    assert d["cost"]["total_usd"] is None and "gpu_hour_usd" in d["cost"]["reason"]


def test_an_element_without_a_report_counts_in_the_table_but_adds_no_time():
    d = aggregate("sw", [el(0, rep=report(10, 5)), el(1, "PENDING", rep=None, notes=["no report: gone"])])
    assert d["wall_s"] == 10 and d["size"] == 2
    assert d["elements"][1]["wall_s"] is None and not d["elements"][1]["reported"]
    assert d["notes"] == ["element 1: no report: gone"]


def test_equal_notes_of_many_elements_are_one_line():
    els = [el(i, rep=report(10, 5), notes=["no attempt records of the element under its root"]) for i in range(5)]
    els.append(el(7, rep=report(10, 5), notes=["no attempt records of the element under its root"]))
    assert aggregate("sw", els)["notes"] == ["elements 0-4, 7: no attempt records of the element under its root"]
    assert index_ranges([3, 1, 2, 9, 11, 10]) == "1-3, 9-11"


def test_the_best_element_is_the_lowest_latest_loss_and_ties_go_to_the_lower_index():
    els = [el(0, metrics={10: {"loss": 0.9}, 20: {"loss": 0.5}}),
           el(1, metrics={10: {"loss": 0.2}, 20: {"loss": 0.4}}),
           el(2, metrics={10: {"loss": 0.7}, 20: {"loss": 0.4}}),
           el(3, "FAILED", metrics={10: {"acc": 0.1}})]
    d = aggregate("sw", els, LOSS)
    assert d["best"]["index"] == 1 and d["best"]["metric"] == 0.4 and d["best"]["metric_step"] == 20
    assert [r["metric"] for r in d["elements"]] == [0.5, 0.4, 0.4, None]
    assert d["reported_metrics"] == ["acc", "loss"]
    # scope best: each element's best report (element 1 reached 0.2 at step 10)
    d = aggregate("sw", els, MetricChoice("loss", "min", scope="best"))
    assert d["best"]["index"] == 1 and (d["best"]["metric"], d["best"]["metric_step"]) == (0.2, 10)
    d = aggregate("sw", els, MetricChoice("loss", "max"))
    assert d["best"]["index"] == 0


def test_an_elements_step_is_its_rows_one_step_and_a_reported_step_is_its_metrics():
    # one step per job in every view (launcher.state.rows.job_step): not the highest of the row's, the attempt
    # records' and the reports' (which made one element read 15, 20 and 35 in three views)
    d = aggregate("sw", [el(0, rep=report(10, 5, saves=(4, 8)), metrics={6: {"loss": 1.0}}, last_step=2),
                         el(1, rep=report(10, 5), metrics={12: {"loss": 1.0}}),
                         el(2, rep=None)], LOSS)
    assert [r["final_step"] for r in d["elements"]] == [2, None, None]
    assert [r["last_step"] for r in d["elements"]] == [2, None, None]
    assert [r["metric_step"] for r in d["elements"]] == [6, 12, None]


def test_no_metric_to_rank_by_says_what_to_pass_and_what_was_reported():
    d = aggregate("sw", [el(0, metrics={1: {"acc": 0.5}})], None)
    assert d["best"] is None
    assert "--metric NAME --mode min|max" in d["best_reason"] and "reported: acc" in d["best_reason"]
    d = aggregate("sw", [el(0)], LOSS)
    assert d["best"] is None and d["best_reason"].startswith("no element reported loss")
    assert "jobside.report(step, NAME=value)" in d["best_reason"]


def test_the_metric_comes_from_the_options_else_the_sweeps_early_stop():
    es = EarlyStop(metric="loss", mode="min", rungs=[10])
    assert choose_metric(None, None, es) == MetricChoice("loss", "min", "last", "the sweep's early_stop")
    assert choose_metric("acc", "max", es).name == "acc"
    assert choose_metric(None, "max", es) == \
        MetricChoice("loss", "max", "last", "the sweep's early_stop metric, --mode")
    assert choose_metric("loss", None, es).mode == "min"
    assert choose_metric(None, None, None) is None
    with pytest.raises(ReportUsageError, match="--mode min or --mode max"):
        choose_metric("acc", None, es)
    with pytest.raises(ReportUsageError, match="--mode needs --metric"):
        choose_metric(None, "min", None)
    with pytest.raises(ReportUsageError, match="--scope"):
        choose_metric("acc", "min", None, scope="mean")


def test_element_value_skips_reports_without_the_metric():
    assert element_value({5: {"loss": 1.0}, 9: {"acc": 0.3}}, LOSS) == (1.0, 5)
    assert element_value({"3": {"loss": 2}, "10": {"loss": 1}}, LOSS) == (1.0, 10)  # steps as JSON keys
    assert element_value({}, LOSS) == (None, None)
    assert best_index({0: None, 1: None}, "min") is None


def test_the_text_shows_sums_the_best_element_and_one_row_each():
    els = [el(0, rep=report(100, 60, cost=1.0), metrics={20: {"loss": 0.5}}),
           el(1, "CANCELLED", rep=report(50, 10, cost=0.5), metrics={20: {"loss": 0.3}}),
           el(2, "FAILED", rep=report(30, 0, cost=0.25))]
    text = format_sweep_report(aggregate("sw", els, LOSS))
    assert "sweep sw: 3 elements: 1 COMPLETED, 1 FAILED, 1 CANCELLED" in text
    assert "goodput 38.9% (useful compute / element time)" in text
    assert "cost $1.75 (3 of 3 elements priced)" in text
    assert "best element 1 (min loss, its latest report, from --metric): loss 0.3 at step 20, CANCELLED; lr=0.2" in text
    rows = [line for line in text.splitlines() if line.lstrip("* ").split("  ")[0] in ("0", "1", "2")]
    assert len(rows) == 3 and rows[1].startswith("*") and not rows[0].startswith("*"), text
    text = format_sweep_report(aggregate("sw", els, None))
    assert "best element: - (no metric to rank by" in text


H100 = {"name": "H100 SXM", "precision": "bf16", "tflops": 989.0, "source": "s", "per": "GPU", "dense": True}
A100 = {"name": "A100 SXM", "precision": "bf16", "tflops": 312.0, "source": "s", "per": "GPU", "dense": True}


def with_mfu(rep, mfu, peak, useful_share=0.5):
    """REP with the compute figures of launcher.report.mfu.summarize: MFU against PEAK."""
    peak_flops, useful_s = peak["tflops"] * 1e12, rep["categories"]["useful_compute"]
    paid_s = useful_s / useful_share
    rep["compute"] = {"mfu": mfu, "effective_mfu": mfu * useful_share, "useful_share": useful_share, "peak": peak,
                      "peak_text": f"dense BF16 peak, {peak['name']}, {peak['tflops']:g} TFLOPS per GPU",
                      "model_flops": mfu * peak_flops * useful_s, "peak_flops": peak_flops, "useful_s": useful_s,
                      "paid_s": paid_s, "reason": None}
    return rep


def _row(text: str, index: int) -> str:
    return next(line for line in text.splitlines() if line.lstrip("* ").split("  ")[0] == str(index))


def test_the_table_has_each_elements_mfu_and_the_line_names_the_one_peak():
    els = [el(0, rep=with_mfu(report(100, 60), 0.412, H100)), el(1, rep=with_mfu(report(50, 10), 0.3, H100)),
           el(2, "FAILED", rep=report(30, 0))]
    d = aggregate("sw", els, LOSS)
    assert [r["mfu"] for r in d["elements"]] == [0.412, 0.3, None] and d["elements"][0]["peak"] == H100
    text = format_sweep_report(d)
    head = next(line for line in text.splitlines() if "index" in line and "state" in line)
    assert head.split() == ["index", "state", "attempts", "goodput", "MFU", "cost", "step", "loss", "params"]
    assert "41.2%" in _row(text, 0) and "30.0%" in _row(text, 1) and _row(text, 2).split()[4] == "-"
    assert f"MFU {100 * (0.412 * 60 + 0.3 * 10) / 70:.1f}% of dense BF16 peak, H100 SXM, 989 TFLOPS per GPU" in text
    assert "mixed peaks" not in text
    assert "peak (TFLOPS)" not in text


def test_elements_against_different_peaks_say_mixed_peaks_and_name_each_ones():
    els = [el(0, rep=with_mfu(report(100, 60), 0.412, H100)), el(1, rep=with_mfu(report(50, 10), 0.3, A100)),
           el(2, "FAILED", rep=report(30, 0))]
    d = aggregate("sw", els, LOSS)
    assert d["peak"] is None and d["compute"]["mixed_peaks"] is True and d["mfu"] is not None
    text = format_sweep_report(d)
    mfu_line = next(line for line in text.splitlines() if line.startswith("MFU "))
    assert mfu_line.startswith("MFU ") and " of mixed peaks (each element against its own peak" in mfu_line
    head = next(line for line in text.splitlines() if "index" in line and "state" in line)
    assert " ".join(head.split()[3:6]) == "goodput MFU peak"
    assert "41.2%" in _row(text, 0) and "H100 SXM BF16 989" in _row(text, 0)
    assert "30.0%" in _row(text, 1) and "A100 SXM BF16 312" in _row(text, 1)
    # one peak among the elements with MFU (the others have none): named, not mixed
    d = aggregate("sw", [el(0, rep=with_mfu(report(100, 60), 0.4, H100)), el(1, rep=report(50, 10))], LOSS)
    assert d["compute"]["mixed_peaks"] is False and d["peak"] == H100
