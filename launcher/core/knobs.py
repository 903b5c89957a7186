"""The launcher's numeric environment knobs (``LAUNCHER_CLAIM_TTL``, ``LAUNCHER_STATE_BUSY_TIMEOUT``,
...), read by one helper: unset or empty gives the default; anything else must be a finite
number in range, or the command stops with one line naming the variable and what it expects
(exit 2, bad input: docs/operations.md), never a traceback and never a silent default
(``LAUNCHER_CLAIM_TTL=nan`` made every claim expire at once; ``inf`` made none ever expire).

Only the launcher's side: the job side (``launcher.jobside``, stdlib only) reads its own."""

from __future__ import annotations

import math
import os
from typing import Optional

from launcher.core.errors import ConfigError


class KnobError(ConfigError):
    """A LAUNCHER_* variable that is not what it must be (exit 2)."""


def parse_number(name: str, raw: str, *, minimum: float = 0.0, positive: bool = False,
                 integer: bool = False, what: str = "seconds") -> float:
    """RAW (the value of the variable NAME) as a finite number >= MINIMUM (> MINIMUM when
    POSITIVE; a whole number when INTEGER), else KnobError. Pure."""
    bound = f"greater than {minimum:g}" if positive else f"at least {minimum:g}"
    expected = f"{what} (a {'whole ' if integer else ''}number {bound})"
    text = raw.strip()
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise KnobError(f"${name}={raw!r}: expected {expected}") from None
    if not math.isfinite(value) or value < minimum or (positive and value <= minimum):
        raise KnobError(f"${name}={raw!r}: expected {expected}")
    return value


def number(name: str, default: float, *, minimum: float = 0.0, positive: bool = False, what: str = "seconds",
           environ: Optional[dict] = None) -> float:
    """The knob NAME as a float (DEFAULT when unset or empty); see ``parse_number``."""
    raw = (os.environ if environ is None else environ).get(name, "")
    if not raw.strip():
        return default
    return parse_number(name, raw, minimum=minimum, positive=positive, what=what)


def whole(name: str, default: int, *, minimum: int = 0, positive: bool = False, what: str = "a count",
          environ: Optional[dict] = None) -> int:
    """The knob NAME as an int (DEFAULT when unset or empty); see ``parse_number``."""
    raw = (os.environ if environ is None else environ).get(name, "")
    if not raw.strip():
        return default
    return int(parse_number(name, raw, minimum=minimum, positive=positive, integer=True, what=what))


CLAIM_TTL_S = 120.0  # a job's claim's lifetime (launcher.state.claims): longer than a submission takes


def claim_ttl() -> float:
    """$LAUNCHER_CLAIM_TTL seconds (a finite number > 0), else CLAIM_TTL_S (read here, below the
    store, so the PostgreSQL engine can keep its timeouts under it)."""
    return number("LAUNCHER_CLAIM_TTL", CLAIM_TTL_S, positive=True)
