"""The test suite's CPU-per-test summary (tests/fixtures/cpu_time.py)."""

from tests.fixtures.cpu_time import costliest, cpu_seconds


def test_the_costliest_come_first_ties_by_name_and_at_most_n():
    cpu = {"b": 1.0, "a": 1.0, "c": 3.0, "d": 0.5}
    assert costliest(cpu, 3) == [("c", 3.0), ("a", 1.0), ("b", 1.0)]
    assert costliest({}, 3) == []


def test_cpu_seconds_counts_a_child_once_it_was_waited_for():
    import subprocess
    import sys

    before = cpu_seconds()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    assert cpu_seconds() - before >= 0.05
