import pytest

from launcher.spec.units import format_mebibytes, parse_duration, parse_size
from launcher_backends.slurm.times import format_time as format_slurm_time


def test_slurm_time_round_trips_through_the_parser():
    for secs in (59, 3600, 5400, 86400, 90061):
        assert parse_duration(format_slurm_time(secs)) == secs


def test_mm_ss_is_read_as_slurm_reads_it():
    assert parse_duration("05:30") == 330


def test_mebibytes_round_up():
    assert format_mebibytes(1) == "1M"
    assert format_mebibytes(512 * 1024**3) == "524288M"


@pytest.mark.parametrize("bad", [True, None, "", "12 parsecs"])
def test_garbage_is_rejected(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)
    with pytest.raises(ValueError):
        parse_size(bad)


def test_format_hours_is_the_one_hours_formatter():
    from launcher.spec.units import format_hours

    assert format_hours(0.75) == "45 min"
    assert format_hours(2.54) == "2.5 h"
    assert format_hours(float("inf")) == "never"
    assert format_hours(0.75, "none", compact=True) == "45m"
    assert format_hours(1.0, compact=True) == "1.0h"
    assert format_hours(float("inf"), "none", compact=True) == "none"
