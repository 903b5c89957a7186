"""A candidate under ``cost.deadline``: its slack, its cost's spread, its chance of meeting the
deadline (pure functions; ``launcher plan`` shows them, ``rank`` computes them).

The model is the planner's (``launcher.plan.model``), on the candidate alone: interruptions
arrive as a Poisson process of rate ``lam`` (nodes x the offer's rate per node-hour), the job
commits a checkpoint every ``tau`` hours of work (cost ``C``), every interruption costs the
downtime ``D`` and the work since the last committed checkpoint, except that a fraction ``p``
of them comes with a notice long enough for an emergency checkpoint (cost ``Ce``) that saves
the work done until then.

The run is a sequence of independent, identically distributed **cycles**: a cycle starts an
interval of ``w = tau + C`` hours and ends when its checkpoint commits (length ``w``, reward
``tau`` of work) or at an interruption ``T < w`` (length ``T + D``, reward what a notice
saved: nothing before ``Ce``, ``T - Ce`` in the compute phase, ``tau`` during the checkpoint's
write). With ``L`` a cycle's length and ``Y`` its reward, the time ``R`` to commit ``W`` hours
of work has (renewal-reward; the variance by its central limit theorem)::

    mean R = W E[L] / E[Y]                         (= W / goodput: the planner's expected run)
    var R  = (W / E[Y]) Var(L - (E[L] / E[Y]) Y)

The moments of ``L`` and ``Y`` are exact integrals against the exponential density (``_g``:
lower incomplete gamma functions, by their series where the rate is small, so an on-demand
offer's rare interruptions lose no digits).

A normal law with that mean and variance would be wrong where it matters: an on-demand run is
uninterrupted 99% of the time, and a run whose interruptions come with a notice loses a near
constant per interruption. So the law (``RunLaw``, ``run_law``) is: the uninterrupted run
(the work and its checkpoints) exactly, plus a near-constant step per noticed interruption
(their number Poisson), plus the unnoticed interruptions' loss (their number Poisson,
independent by thinning): nothing when there was none, else a normal cut at 0; its mean and
variance are the ones above. Against a Monte Carlo of the model it is within a few points of
probability (``tests/unit/test_plan_outlook.py``).

What a candidate shows:

* **needs**: hours from now until it finishes there: the first start's overhead (``D``), the
  queue wait, and the mean run (the policy's slack counts the same three: restart, queue, work);
* **slack** = hours left until the deadline - needs;
* **P(meet)** = P(D + queue + R <= hours left), on that candidate alone (no fallback);
* **cost** = the job's $/h x R: its mean (the planner's expected total), its standard
  deviation, and its 10th and 90th percentiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

SPREAD = "p10-p90 of the run's law (launcher.plan.outlook)"


@dataclass(frozen=True, slots=True)
class Outlook:
    """One candidate under a deadline (hours, $ for the whole job)."""

    deadline_h: float          # hours left until the deadline
    needs_h: float             # start overhead + queue wait + mean run
    slack_h: float             # deadline_h - needs_h
    run_sd_h: float            # standard deviation of the run
    p_meet: float              # probability of finishing by the deadline on this candidate alone
    cost_usd: float            # mean
    cost_sd_usd: float
    cost_p10_usd: float
    cost_p90_usd: float

    def to_json(self) -> dict:
        return {"hours_left": _num(self.deadline_h), "needs_hours": _num(self.needs_h),
                "slack_hours": _num(self.slack_h), "run_sd_hours": _num(self.run_sd_h),
                "p_meet": _num(self.p_meet), "cost_mean_usd": _num(self.cost_usd, 4),
                "cost_sd_usd": _num(self.cost_sd_usd, 4), "cost_p10_usd": _num(self.cost_p10_usd, 4),
                "cost_p90_usd": _num(self.cost_p90_usd, 4), "spread": SPREAD}


def _num(x: float, nd: int = 6) -> Optional[float]:
    return None if math.isinf(x) or math.isnan(x) else round(x, nd)


# ---- the exponential's partial moments --------------------------------------------------------

def _gamma_lower(k: int, z: float) -> float:
    """int_0^z s^k e^-s ds (k = 0, 1, 2), accurate for small z too."""
    if z <= 0:
        return 0.0
    if z < k + 8:
        # k! e^-z sum_{j > k} z^j / j!: every term positive, no cancellation
        term = 1.0
        for j in range(1, k + 2):
            term *= z / j
        total, j = 0.0, k + 1
        while True:
            total += term
            j += 1
            term *= z / j
            if term < 1e-17 * total:
                break
        return math.factorial(k) * math.exp(-z) * total
    head = sum(z ** j / math.factorial(j) for j in range(k + 1))
    return math.factorial(k) * (1.0 - math.exp(-z) * head)


def _g(k: int, x: float, lam: float) -> float:
    """int_0^x t^k lam e^{-lam t} dt."""
    if x <= 0:
        return 0.0
    return _gamma_lower(k, lam * x) / lam ** k


@dataclass(frozen=True, slots=True)
class CycleMoments:
    """E[L], E[Y], E[L^2], E[Y^2], E[LY] of one renewal cycle (see the module doc)."""

    L: float
    Y: float
    LL: float
    YY: float
    LY: float


def cycle_moments(tau: float, C: float, lam: float, D: float, p: float = 0.0,
                  Ce: Optional[float] = None) -> CycleMoments:
    """The moments of one cycle: ``tau`` hours of work then a checkpoint of ``C``, interrupted
    at rate ``lam`` (each costing ``D``), a fraction ``p`` with a notice for a checkpoint of
    ``Ce`` (default ``C``, at most ``C``)."""
    Ce = C if Ce is None else min(Ce, C)
    w = tau + C
    q = math.exp(-lam * w)                       # no interruption in the cycle
    L = _g(1, w, lam) + D * _g(0, w, lam) + w * q
    LL = _g(2, w, lam) + 2 * D * _g(1, w, lam) + D * D * _g(0, w, lam) + w * w * q
    Y, YY, LY = tau * q, tau * tau * q, w * tau * q
    if p > 0:
        a, b = math.exp(-lam * Ce), math.exp(-lam * (tau + Ce))
        # noticed in the compute phase (T in [Ce, tau + Ce)): saves T - Ce
        Y += p * a * _g(1, tau, lam)
        YY += p * a * _g(2, tau, lam)
        LY += p * a * (_g(2, tau, lam) + (Ce + D) * _g(1, tau, lam))
        # noticed while the checkpoint is written (T in [tau + Ce, w)): saves tau
        Y += p * tau * (b - q)
        YY += p * tau * tau * (b - q)
        LY += p * tau * b * (_g(1, C - Ce, lam) + (tau + Ce + D) * _g(0, C - Ce, lam))
    return CycleMoments(L, Y, LL, YY, LY)


def run_sd(work: float, tau: float, C: float, lam: float, D: float, p: float = 0.0,
           Ce: Optional[float] = None) -> float:
    """Standard deviation of the hours to commit ``work`` hours (0 when nothing interrupts
    or no checkpoint is needed)."""
    if work <= 0 or lam <= 0 or not math.isfinite(tau) or tau <= 0:
        return 0.0
    m = cycle_moments(tau, C, lam, D, p, Ce)
    if not m.Y > 0:
        return math.inf
    rho = m.L / m.Y
    var = m.LL - 2 * rho * m.LY + rho * rho * m.YY
    return math.sqrt(max(var, 0.0) * work / m.Y)


@dataclass(frozen=True, slots=True)
class RunLaw:
    """The run's law: ``base`` hours (no interruption: the work and its checkpoints), plus
    ``step`` hours for each interruption that came with a notice (their number Poisson of mean
    ``noticed``: the downtime and the emergency checkpoint, less the periodic checkpoint time of
    the work it saved), plus the loss of the others (their
    number Poisson of mean ``unnoticed``, independent by thinning): 0 when there was none,
    probability ``p_none``, else a normal of mean ``mean_c`` and sd ``sd_c`` cut at 0.
    ``run_law`` makes its mean and variance the renewal-reward ones."""

    base: float
    step: float
    noticed: float
    p_none: float
    mean_c: float
    sd_c: float

    def _lost_cdf(self, x: float) -> float:
        """P(the unnoticed interruptions' loss <= x)."""
        if x < -1e-9:
            return 0.0
        if self.p_none >= 1.0:
            return 1.0
        return self.p_none + (1.0 - self.p_none) * _cut_normal_cdf(x, self.mean_c, self.sd_c, 0.0)

    def cdf(self, t: float) -> float:
        """P(run <= t hours)."""
        x = t - self.base
        if x < -1e-9:
            return 0.0
        if not self.noticed > 0:
            return self._lost_cdf(x)
        total, j, pj, mass = 0.0, 0, math.exp(-self.noticed), 0.0
        while True:
            if x - j * self.step < -1e-9:
                break
            total += pj * self._lost_cdf(x - j * self.step)
            mass += pj
            j += 1
            pj *= self.noticed / j
            if 1.0 - mass < 1e-12 or j > 10000:
                break
        return min(total, 1.0)

    def quantile(self, q: float) -> float:
        """The smallest t with cdf(t) >= q (by bisection; ``base`` when no interruption covers q)."""
        if self.cdf(self.base) >= q:
            return self.base
        lo, hi = self.base, self.base + 1.0
        while self.cdf(hi) < q and hi < 1e9:
            hi = self.base + 2 * (hi - self.base)
        for _ in range(60):
            mid = (lo + hi) / 2
            if self.cdf(mid) >= q:
                hi = mid
            else:
                lo = mid
        return hi


def _phi(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def _cut_normal_cdf(t: float, mean: float, sd: float, low: float) -> float:
    """CDF at ``t`` of a normal (mean, sd) conditioned to be at least ``low``."""
    if not sd > 0:
        return 1.0 if t >= max(mean, low) - 1e-9 else 0.0
    below = _phi((low - mean) / sd)
    if below >= 1.0:
        return 1.0
    return max(_phi((t - mean) / sd) - below, 0.0) / (1.0 - below)


def run_law(work: float, tau: float, C: float, lam: float, D: float, p: float, Ce: Optional[float],
            mean: float, sd: float, interruptions: float) -> RunLaw:
    """The run's law (``RunLaw``) for a run of ``mean`` and ``sd`` hours (``run_sd``) with
    ``interruptions`` expected: without any it takes ``work x (tau + C) / tau`` hours
    (``work`` when ``tau`` is infinite); a noticed one costs ``D + Ce - C / 2``; the unnoticed ones'
    loss has the mean and variance left to make the whole law's the renewal-reward ones."""
    Ce = C if Ce is None else min(Ce, C)
    base = work if not math.isfinite(tau) else work * (tau + C) / tau
    base = min(base, mean)
    if not math.isfinite(mean):
        return RunLaw(base, 0.0, 0.0, 0.0, math.inf, 0.0)
    if lam <= 0 or not interruptions > 0:
        return RunLaw(base, 0.0, 0.0, 1.0, 0.0, 0.0)
    # a noticed interruption in the compute phase at T saves T - Ce of work for T + D hours:
    # against the (tau + C) / tau hours that work takes uninterrupted, it loses D + Ce less the
    # periodic checkpoint time of the saved work, C / 2 on average
    step = max(D + Ce - C / 2, 0.0)
    noticed = interruptions * p
    unnoticed = interruptions - noticed
    # what is left for the unnoticed ones (compound Poisson: mean adds, variance adds n x step^2)
    mean_u = max(mean - base - noticed * step, 0.0)
    var_u = max(sd * sd - noticed * step * step, 0.0)
    p_none = math.exp(-unnoticed)
    if p_none >= 1.0 or mean_u <= 0:
        return RunLaw(base, step, noticed, 1.0, 0.0, 0.0)
    rest = 1.0 - p_none
    mean_c = mean_u / rest
    var_c = (var_u + mean_u * mean_u) / rest - mean_c * mean_c
    return RunLaw(base, step, noticed, p_none, mean_c, math.sqrt(max(var_c, 0.0)))


def outlook(deadline_h: float, start_h: float, queue_h: float, law: RunLaw, run_h: float,
            run_sd_h: float, job_hourly: float) -> Outlook:
    """The candidate's outlook: ``deadline_h`` hours left, ``start_h`` for the first start,
    ``queue_h`` of queue wait, a run of mean ``run_h`` and sd ``run_sd_h`` whose law is ``law``."""
    needs = start_h + queue_h + run_h
    slack = deadline_h - needs
    p_meet = law.cdf(deadline_h - start_h - queue_h) if math.isfinite(deadline_h) else 1.0
    return Outlook(deadline_h, needs, slack, run_sd_h, p_meet, job_hourly * run_h, job_hourly * run_sd_h,
                   job_hourly * law.quantile(0.1), job_hourly * law.quantile(0.9))
