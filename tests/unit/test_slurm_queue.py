"""Slurm queue-wait estimates from captured squeue / sinfo / sbatch --test-only text."""

import math
from datetime import datetime

import pytest

from launcher_backends.slurm.queue import (estimate_queue_wait, parse_slurm_duration, parse_squeue_start,
                                 wait_from_pending_work, wait_from_squeue_start, wait_from_test_only)

NOW = datetime(2026, 11, 20, 10, 0, 0)

# sinfo -h -N -p gpu -o '%N|%R|%T' (plus a node of another partition)
SINFO = """n1|gpu|idle
n2|gpu|idle
n3|gpu|allocated
n4|gpu|allocated
n5|gpu|drained
n6|gpu|idle*
c1|cpu|idle
"""


@pytest.mark.parametrize("text,seconds", [
    ("1-02:03:04", 93784), ("2-00", 172800), ("1-01:30", 91800), ("02:00:00", 7200),
    ("30:00", 1800), ("45", 2700), ("UNLIMITED", None), ("NOT_SET", None), ("INVALID", None),
])
def test_slurm_durations(text, seconds):
    assert parse_slurm_duration(text) == seconds


def test_slurm_duration_garbage_is_an_error():
    with pytest.raises(ValueError, match="not a Slurm duration"):
        parse_slurm_duration("soon")


def test_test_only_prediction():
    text = "sbatch: Job 123 to start at 2026-11-20T12:30:00 using 64 processors on nodes n[1-2] in partition gpu"
    assert wait_from_test_only(text, NOW).hours == pytest.approx(2.5)
    assert wait_from_test_only("sbatch: error: Batch job submission failed", NOW) is None


SQUEUE_START = """             JOBID PARTITION     NAME     USER ST          START_TIME  NODES SCHEDNODES           NODELIST(REASON)
               101       gpu my job      alice PD 2026-11-20T11:00:00      2 n[1-2]               (Priority)
               102       gpu    train      bob PD 2026-11-20T14:00:00      1 n3                   (Resources)
               103       cpu     prep    carol PD 2026-11-21T09:00:00      1 c1                   (Priority)
               104       gpu     eval    alice PD                 N/A      1 (null)               (ReqNodeNotAvail, UnavailableNodes:n5)
"""


def test_squeue_start_default_table_is_parsed_including_names_with_spaces():
    rows = parse_squeue_start(SQUEUE_START)
    assert [(r[0], r[1], r[3]) for r in rows] == [("101", "gpu", 2), ("102", "gpu", 1), ("103", "cpu", 1),
                                                  ("104", "gpu", 1)]
    assert rows[3][2] is None


def test_squeue_start_wait_is_the_latest_predicted_start_in_the_partition():
    assert wait_from_squeue_start(SQUEUE_START, "gpu", NOW).hours == pytest.approx(4.0)
    assert wait_from_squeue_start(SQUEUE_START, "cpu", NOW).hours == pytest.approx(23.0)
    assert wait_from_squeue_start(SQUEUE_START, "other", NOW) is None


def test_squeue_start_parsable_format():
    text = "201|gpu|PENDING|2026-11-20T13:00:00|4\n202|gpu|PENDING|N/A|1\n"
    assert wait_from_squeue_start(text, "gpu", NOW).hours == pytest.approx(3.0)


def test_pending_work_is_list_scheduled_before_our_job():
    # usable: n1, n2 idle; n3, n4 busy (one 2-node job, 1 h left); n5 drained, n6 not responding.
    # A 4-node job is ahead: it waits for n3+n4 (t=1 h), runs its 2 h limit (to t=3 h); then ours.
    squeue = "11|gpu|RUNNING|2|4:00:00|1:00:00|500\n12|gpu|PENDING|4|2:00:00|2:00:00|900\n"
    est = wait_from_pending_work(squeue, SINFO, "gpu", nodes=2)
    assert est.hours == pytest.approx(3.0)
    assert wait_from_pending_work(squeue, SINFO, "gpu", nodes=2, runtime_fraction=0.5).hours == pytest.approx(1.5)


def test_pending_jobs_start_in_priority_order():
    # n1, n2 idle; n3+n4 free at 1 h. High priority first: the 1-node job takes n1 (to 0.5 h),
    # the 2-node job takes n2 + n1 at 0.5 h, ours gets n3+n4 at 1 h.
    running = "11|gpu|RUNNING|2|4:00:00|1:00:00|1\n"
    small_first = running + "13|gpu|PENDING|2|3:00:00|3:00:00|10\n12|gpu|PENDING|1|0:30:00|0:30:00|99\n"
    assert wait_from_pending_work(small_first, SINFO, "gpu", nodes=2).hours == pytest.approx(1.0)
    # The other way round the 2-node job takes n1+n2 at once, the 1-node job n3 at 1 h (to 1.5 h),
    # and ours needs n4 plus that node: 1.5 h.
    big_first = running + "13|gpu|PENDING|2|3:00:00|3:00:00|99\n12|gpu|PENDING|1|0:30:00|0:30:00|10\n"
    assert wait_from_pending_work(big_first, SINFO, "gpu", nodes=2).hours == pytest.approx(1.5)


def test_an_idle_partition_means_no_wait():
    assert wait_from_pending_work("", "a|p|idle\nb|p|idle\n", "p", nodes=2).hours == 0.0


def test_a_job_larger_than_the_usable_partition_never_starts():
    est = wait_from_pending_work("", SINFO, "gpu", nodes=5)
    assert math.isinf(est.hours) and "4 usable node(s)" in est.source


def test_nodes_busy_with_invisible_jobs_free_up_when_the_visible_work_ends():
    squeue = "11|gpu|RUNNING|1|4:00:00|2:00:00|1\n"   # n3 is busy with it; n4 with something unseen
    assert wait_from_pending_work(squeue, SINFO, "gpu", nodes=4).hours == pytest.approx(2.0)


def test_estimate_prefers_slurms_own_prediction_then_pending_work_then_squeue_start():
    test_only = "sbatch: Job 9 to start at 2026-11-20T10:30:00 using 8 processors on nodes n1 in partition gpu"
    squeue = "11|gpu|RUNNING|2|4:00:00|1:00:00|500\n12|gpu|PENDING|4|2:00:00|2:00:00|900\n"
    kw = dict(now=NOW, squeue_text=squeue, sinfo_text=SINFO, squeue_start_text=SQUEUE_START)
    assert estimate_queue_wait("gpu", 2, test_only_text=test_only, **kw).source == "sbatch --test-only"
    assert estimate_queue_wait("gpu", 2, **kw).hours == pytest.approx(3.0)
    assert estimate_queue_wait("gpu", 2, now=NOW, squeue_start_text=SQUEUE_START).hours == pytest.approx(4.0)
    assert estimate_queue_wait("gpu", 2) is None
