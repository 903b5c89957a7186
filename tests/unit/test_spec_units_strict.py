"""Durations say what they mean (issue 20, §9): before the fix '1ms' was read as one minute
(the unit 'm' with a plural 's'). Durations are whole seconds, so milliseconds (and any
other sub-second unit) are refused, naming what is accepted."""

from __future__ import annotations

import pytest

from launcher.core.errors import SpecError
from launcher.backend.sections import spec_from_text
from launcher.spec.units import parse_duration


@pytest.mark.parametrize("text", ["1ms", "500ms", "1.5ms", "10msec", "3us", "2ns", "1MS"])
def test_sub_second_units_are_refused_not_read_as_minutes(text):
    with pytest.raises(ValueError, match="whole seconds"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["1hs", "1ds", "1ss"])
def test_a_single_letter_unit_takes_no_plural_s(text):
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(text)


@pytest.mark.parametrize("text,seconds", [("1m", 60), ("2mins", 120), ("1min", 60), ("3hrs", 10800), ("2days", 172800),
                                          ("5secs", 5), ("30s", 30), ("1h", 3600), ("1d", 86400), ("90 M", 5400)])
def test_the_usual_forms_still_parse(text, seconds):
    assert parse_duration(text) == seconds


def test_a_spec_with_milliseconds_names_the_field():
    with pytest.raises(SpecError) as e:
        spec_from_text("name: x\nrun: y\nresources: {time_limit: 1ms}\n", "j.yaml")
    (path, msg), = e.value.problems
    assert path == "resources.time_limit" and "whole seconds" in msg
