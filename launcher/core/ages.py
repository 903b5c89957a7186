"""An age in words, as `launcher status` and `launcher serve` say how old a row shown as stored is."""

from __future__ import annotations


def ago(seconds: float) -> str:
    """A duration in words, as an age ("45 s", "12 min", "3.5 h", "2.0 d"); never negative."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
