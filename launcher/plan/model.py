"""Expected wall time of a checkpointed job under interruptions (pure functions, hours).

Model (exponential interruptions, the renewal model of Young 1974 / Daly 2006):

* the job computes ``tau`` hours of work, then writes a periodic checkpoint costing ``C``;
* interruptions arrive as a Poisson process of rate ``lam = 1/M``, also while checkpointing;
* a fraction ``p`` of them comes with a notice long enough for an emergency checkpoint of
  cost ``Ce <= C``: the job keeps working until ``T - Ce``, saves, and loses nothing;
  the others lose all work since the last committed checkpoint;
* every interruption costs a failure-free downtime ``D`` (re-provision, restart, load).

The long-run goodput (saved work per wall hour) of one checkpoint cycle is exact under
this model (renewal-reward):

    G(tau) = E[saved work per cycle] / E[cycle length]
           = (tau e^{-lam w} + p (I1 + I2)) / ((1 - e^{-lam w}) (M + D)),   w = tau + C

and the expected run time for ``W`` hours of work is ``W / G(tau)``: exact for p = 0 when
W is a whole number of intervals (each interval then costs (M + D)(e^{lam w} - 1)), a
renewal approximation otherwise. With p = 0 the optimum has a closed form,
``lam tau* = 1 + W0(-e^{-(1 + lam C)})`` (Lambert W, principal branch), which reduces to
Young's sqrt(2 C M) for small C/M. With notice the optimum is searched numerically around
the closed form at ``M_eff = M / (1 - p)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

INF = float("inf")


def young(C: float, M: float) -> float:
    return math.sqrt(2.0 * C * M)


def daly(C: float, M: float) -> float:
    """Daly's higher-order optimum of the compute time between checkpoints."""
    if C >= 2.0 * M:
        return M
    x = C / (2.0 * M)
    return math.sqrt(2.0 * C * M) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - C


def goodput(tau: float, C: float, lam: float, D: float = 0.0, p: float = 0.0,
            Ce: Optional[float] = None) -> float:
    """Exact long-run fraction of wall time that becomes committed work (see module doc)."""
    if tau <= 0:
        return 0.0
    if lam <= 0:
        return tau / (tau + C)
    Ce = C if Ce is None else min(Ce, C)
    w = tau + C
    lost_prob = -math.expm1(-lam * w)          # 1 - e^{-lam w}, accurate for small lam w
    surv = 1.0 - lost_prob
    reward = tau * surv
    if p > 0:
        x = lam * tau
        # I1 = e^{-lam Ce} * tau * ((1 - e^{-x})/x - e^{-x}): work saved by noticed
        # interruptions inside the compute phase
        inner = (-math.expm1(-x)) / x - math.exp(-x) if x > 0 else 0.0
        i1 = math.exp(-lam * Ce) * tau * inner
        # I2 = tau (e^{-lam (tau + Ce)} - e^{-lam w}): noticed during the checkpoint write
        i2 = tau * math.exp(-lam * (tau + Ce)) * (-math.expm1(-lam * (C - Ce)))
        reward += p * (i1 + i2)
    cycle = lost_prob * (1.0 / lam + D)
    return reward / cycle


def _lambert_w0_near_branch(z: float) -> float:
    """W0(z) for z in [-1/e, 0): series start near the branch point, then Halley steps."""
    q = 2.0 * (1.0 + math.e * z)
    q = math.sqrt(max(q, 0.0))
    w = -1.0 + q - q * q / 3.0 + 11.0 / 72.0 * q ** 3 if q < 1.0 else z
    for _ in range(30):
        ew = math.exp(w)
        f = w * ew - z
        if f == 0:
            break
        wp1 = w + 1.0
        if abs(wp1) < 1e-15:
            break
        step = f / (ew * wp1 - (w + 2.0) * f / (2.0 * wp1))
        w -= step
        if abs(step) <= 1e-15 * (1.0 + abs(w)):
            break
    return w


def optimal_interval_no_notice(C: float, lam: float) -> float:
    """Exact optimum of G(tau) for p = 0 (independent of D): lam tau = 1 + W0(-e^{-(1 + lam C)})."""
    if lam <= 0:
        return INF
    c = lam * C
    if c < 1e-3:
        # Near the branch point: solve x + c + ln(1 - x) = 0 by Newton from the series,
        # which avoids the cancellation in 1 + W0(...).
        x = math.sqrt(2.0 * c) - 2.0 * c / 3.0
        for _ in range(20):
            g = x + c + math.log1p(-x)
            dg = -x / (1.0 - x)
            step = g / dg
            x -= step
            if abs(step) < 1e-15 * x:
                break
        return x / lam
    return (1.0 + _lambert_w0_near_branch(-math.exp(-(1.0 + c)))) / lam


def _golden_max(f, a: float, b: float, iters: int = 40) -> float:
    g = (math.sqrt(5.0) - 1.0) / 2.0
    c1, c2 = b - g * (b - a), a + g * (b - a)
    f1, f2 = f(c1), f(c2)
    for _ in range(iters):
        if f1 > f2:
            b, c2, f2 = c2, c1, f1
            c1 = b - g * (b - a)
            f1 = f(c1)
        else:
            a, c1, f1 = c1, c2, f2
            c2 = a + g * (b - a)
            f2 = f(c2)
    return (a + b) / 2.0


def optimal_interval(C: float, lam: float, D: float = 0.0, p: float = 0.0,
                     Ce: Optional[float] = None, cap: float = INF) -> float:
    """The tau in (0, cap] that maximises the exact goodput; INF when nothing interrupts."""
    if lam <= 0:
        return INF if cap == INF else cap
    if p <= 0:
        tau = optimal_interval_no_notice(C, lam)
    else:
        if p >= 1.0:
            p = 1.0 - 1e-12
        start = optimal_interval_no_notice(C, lam * (1.0 - p))
        tau = _golden_max(lambda t: goodput(t, C, lam, D, p, Ce), start / 8.0, start * 8.0)
    return min(tau, cap)


@dataclass(frozen=True, slots=True)
class RunEstimate:
    interval_hours: float        # compute time between checkpoints (INF: none needed)
    goodput: float               # committed work per wall hour
    run_hours: float             # expected wall time on the machines (billed)
    interruptions: float         # expected number of interruptions during the run
    notice_fraction: float       # p used (0 when the notice is too short for a checkpoint)


def expected_run(work: float, C: float, lam: float, D: float, p: float = 0.0,
                 Ce: Optional[float] = None, interval: Optional[float] = None) -> RunEstimate:
    """Expected billed wall time to commit ``work`` hours, at ``interval`` or the optimum.

    With no interruptions (lam == 0) nothing needs a periodic checkpoint: the run takes
    exactly ``work`` (or work plus the checkpoints a fixed ``interval`` forces).
    """
    if work <= 0:
        return RunEstimate(INF, 1.0, 0.0, 0.0, p)
    if lam <= 0:
        if interval:
            g = goodput(interval, C, 0.0)
            return RunEstimate(interval, g, work / g, 0.0, p)
        return RunEstimate(INF, 1.0, work, 0.0, p)
    tau = interval if interval else optimal_interval(C, lam, D, p, Ce, work)
    g = goodput(tau, C, lam, D, p, Ce)
    if not g > 1e-9:
        return RunEstimate(tau, 0.0, INF, INF, p)
    run = work / g
    return RunEstimate(tau, g, run, lam * run * _busy_fraction(tau, C, lam, D), p)


def _busy_fraction(tau: float, C: float, lam: float, D: float) -> float:
    """Fraction of wall time exposed to interruptions (downtime D is failure-free)."""
    lost_prob = -math.expm1(-lam * (tau + C))
    exposed = lost_prob / lam
    return exposed / (exposed + lost_prob * D)
