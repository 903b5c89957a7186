"""Parsing of the units people write in job specs: durations and sizes.

Bare numbers are rejected on purpose: ``time_limit: 60`` means minutes to a Slurm
user and seconds to a Python user, so we make them say which.
"""

from __future__ import annotations

import math
import re

_DUR_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400, "day": 86400}
# a plural 's' only on the spelled-out units: '1ms' is not 'm' + 's' (one minute)
_DUR_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|secs?|m|mins?|h|hrs?|d|days?)\s*$", re.IGNORECASE)
_SUB_SECOND_RE = re.compile(r"^\s*\d+(?:\.\d+)?\s*(ms|msecs?|millis(?:econds?)?|us|µs|usecs?|ns|nsecs?)\s*$",
                            re.IGNORECASE)
# clock forms (as Slurm writes them): D-HH:MM:SS, D-HH:MM, D-HH, HH:MM:SS, MM:SS
_CLOCK_RE = re.compile(r"^\s*(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?\s*$")

DURATION_HINT = "a duration with a unit, like 30s, 90m, 24h, 2d, or D-HH:MM:SS / HH:MM:SS"
SIZE_HINT = "a size with a unit, like 512MB, 16GB, 1.5TB or 64GiB"


def parse_duration(value) -> int:
    """Return whole seconds. Raises ValueError with the accepted forms.

    Every duration the launcher reads (time limits, grace periods, intervals, TTLs) is
    whole seconds, so sub-second units (ms, us, ns) are refused with a clear error rather
    than rounded to 0 s; before, '1ms' was read as one minute ('m' with a plural 's').
    A plural 's' is accepted only after the spelled-out units (secs, mins, hrs, days)."""
    if isinstance(value, bool):
        raise ValueError(f"expected {DURATION_HINT}, got {value!r}")
    if isinstance(value, (int, float)):
        raise ValueError(f"expected {DURATION_HINT}, got the bare number {value!r} (add a unit)")
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected {DURATION_HINT}, got {value!r}")
    if _SUB_SECOND_RE.match(value):
        raise ValueError(f"expected {DURATION_HINT}, got {value!r}: durations are whole seconds, "
                         f"sub-second units (ms, us, ns) are not accepted")
    m = _DUR_RE.match(value)
    if m:
        unit = m.group(2).lower()
        return int(round(float(m.group(1)) * _DUR_UNITS[unit[:-1] if len(unit) > 2 and unit[-1] == "s" else unit]))
    m = _CLOCK_RE.match(value)
    if m and (":" in value or "-" in value):
        days, a, b, c = m.groups()
        nums = [int(x) for x in (a, b, c) if x is not None]
        if days is not None:  # D-HH[:MM[:SS]]
            h, mi, s = (nums + [0, 0])[:3]
            total = int(days) * 86400 + h * 3600 + mi * 60 + s
        elif len(nums) == 3:
            h, mi, s = nums
            total = h * 3600 + mi * 60 + s
        else:  # MM:SS as Slurm reads it
            mi, s = nums
            total = mi * 60 + s
        return total
    raise ValueError(f"expected {DURATION_HINT}, got {value!r}")


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(I?)(B?)\s*$", re.IGNORECASE)
_POW = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}


def parse_size(value) -> int:
    """Return bytes. ``512GB`` and ``512G`` are read the way Slurm reads them (binary units),
    because that is what ``--mem`` would have done with the same text."""
    if isinstance(value, bool) or isinstance(value, (int, float)):
        raise ValueError(f"expected {SIZE_HINT}, got the bare number {value!r} (add a unit)")
    if not isinstance(value, str):
        raise ValueError(f"expected {SIZE_HINT}, got {value!r}")
    m = _SIZE_RE.match(value)
    if not m or not m.group(2) and not m.group(4):
        raise ValueError(f"expected {SIZE_HINT}, got {value!r}")
    num, prefix, _i, _b = m.groups()
    return int(float(num) * (1024 ** _POW[prefix.upper()]))


def format_mebibytes(nbytes: int) -> str:
    """Bytes -> Slurm --mem value in MiB (rounded up)."""
    mib = -(-int(nbytes) // (1024 * 1024))
    return f"{mib}M"


def format_hours(hours: float, infinite: str = "never", compact: bool = False) -> str:
    """HOURS as a person reads them: minutes under an hour, else hours to one decimal
    (``45 min``, ``2.5 h``; COMPACT: ``45m``, ``2.5h``); INFINITE for an infinite time."""
    if math.isinf(hours):
        return infinite
    sep = "" if compact else " "
    if hours < 1:
        return f"{hours * 60:.0f}{sep}{'m' if compact else 'min'}"
    return f"{hours:.1f}{sep}h"
