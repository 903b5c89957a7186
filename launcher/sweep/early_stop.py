"""Early stopping: asynchronous successive halving over a sweep's elements. Pure.

Programs report metrics with ``jobside.report(step, **metrics)``; this module sees them as
``reports[index] = {step: {metric: value}}`` and decides, rung by rung, which elements go on
and which are stopped. The rule (``early_stop: {metric, mode, min_steps, keep, rungs}``):

- An element **reaches** rung R once it has reported a step >= R. Its value at the rung is
  the metric from its latest report at a step <= R (a report without the metric, or a value
  that is not a finite float: NaN, +inf, -inf, an integer beyond a float's range, counts as
  the worst value: a non-finite report never ranks first, whatever the mode). Elements that have not reached a rung are not judged there.
- An element is judged at a rung once. Everyone judged at rung R so far (the rung's
  population, stopped ones included) is ranked by value (``mode: min``: smaller is better),
  ties broken by the lower index; an element newly judged goes on if its rank is within
  ``ceil(keep * population)``, else it is stopped, with the reason. Elements reaching a rung
  in the same call are judged together, so when all elements reach a rung at once this is
  plain successive halving; when they trickle in (``max_parallel`` smaller than the sweep),
  each is compared with those before it, never with the future (asynchronous halving, as
  ASHA): the first element at a rung always goes on.
- Rungs are judged in order: an element stopped at a rung is not judged at later ones, and an
  element must have gone on at every earlier rung to be judged at the next.
- A stop is final and is not a failure (the element's state is STOPPED). Elements that have
  ended already (``ended``) are ranked, so they shape the rung, but are never stopped.

``judge`` is given the judgements made before (from the state store) and returns only the
new ones: the same reports and history always give the same decisions.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Optional, Sequence

from launcher.spec.sweep import EarlyStop

Reports = Mapping[int, Mapping[int, Mapping[str, float]]]  # index -> step -> metric -> value


@dataclass(frozen=True)
class Judgement:
    index: int
    rung: int
    value: Optional[float]  # the metric at the rung; None: not reported (ranked worst)
    rank: int  # 1 = best, among the rung's population when judged
    population: int
    kept: int  # how many of the population go on: ceil(keep * population)
    stop: bool
    reason: str

    def to_json(self) -> dict:
        return asdict(self)


def reached(steps: Mapping[int, Mapping[str, float]], rung: int) -> bool:
    return any(int(s) >= rung for s in steps)


def value_at(steps: Mapping[int, Mapping[str, float]], rung: int, metric: str) -> Optional[float]:
    """The metric from the latest report at a step <= RUNG that carries it (None if none does,
    or if that value is not a finite float: ranked worst)."""
    for s in sorted((int(s) for s in steps if int(s) <= rung), reverse=True):
        v = (steps.get(s) or steps.get(str(s)) or {}).get(metric)
        if v is None:
            continue
        try:
            v = float(v)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond a float
            return None
        return v if math.isfinite(v) else None
    return None


def _order_key(mode: str, value: Optional[float], index: int) -> tuple:
    if value is None:
        return (1, 0.0, index)
    return (0, value if mode == "min" else -value, index)


def _describe(cfg: EarlyStop, j_value, rank, population, kept, rung, verdict: str) -> str:
    shown = f"no {cfg.metric} reported" if j_value is None else f"{cfg.metric} {j_value:.6g}"
    better = "lowest" if cfg.mode == "min" else "highest"
    return (f"rung {rung}: {shown} ranks {rank} of {population} ({better} first; the best {kept} go on): "
            f"{verdict}")


def _arriving(reports: Reports, rung: int, judged: Iterable[int], stopped: set, cleared: Optional[set]) -> list:
    """The indices newly at RUNG: reached it, not judged there yet (JUDGED) nor stopped, and gone
    on at the rung before (CLEARED; None: RUNG is the first)."""
    return [index for index in sorted(reports)
            if index not in judged and index not in stopped and reached(reports[index], rung)
            and (cleared is None or index in cleared)]


def _judge_rung(cfg: EarlyStop, rung: int, before: Mapping[int, Optional[float]],
                arriving: Mapping[int, Optional[float]], ended: set) -> list[Judgement]:
    """The judgements of the ARRIVING elements ({index: value}) at RUNG, each ranked among them
    and those judged there BEFORE ({index: value}); an element that ENDED is never stopped."""
    values = {**before, **arriving}
    order = sorted(values, key=lambda i: _order_key(cfg.mode, values[i], i))
    population = len(order)
    kept = max(1, math.ceil(cfg.keep * population - 1e-9))
    out = []
    for index in arriving:
        rank = order.index(index) + 1
        stop = rank > kept and index not in ended
        verdict = "stopped" if stop else ("goes on" if rank <= kept else "not stopped: it had ended already")
        out.append(Judgement(index, rung, values[index], rank, population, kept, stop,
                             _describe(cfg, values[index], rank, population, kept, rung, verdict)))
    return out


def judge(cfg: EarlyStop, reports: Reports, previous: Sequence[Judgement] = (),
          ended: Iterable[int] = ()) -> list[Judgement]:
    """The new judgements (see the module's docstring), in rung order then index order."""
    ended = set(ended)
    history = list(previous)
    stopped = {j.index for j in history if j.stop}
    new: list[Judgement] = []
    for pos, rung in enumerate(cfg.rungs):
        at_rung = {j.index: j.value for j in history if j.rung == rung}
        cleared = {j.index for j in history if j.rung == cfg.rungs[pos - 1] and not j.stop} if pos else None
        arriving = _arriving(reports, rung, at_rung, stopped, cleared)
        if not arriving:
            continue
        judged = _judge_rung(cfg, rung, at_rung, {i: value_at(reports[i], rung, cfg.metric) for i in arriving},
                             ended)
        new += judged
        history += judged
        stopped |= {j.index for j in judged if j.stop}
    return new


def stopped_elements(judgements: Iterable[Judgement]) -> dict[int, Judgement]:
    """index -> the judgement that stopped it."""
    return {j.index: j for j in judgements if j.stop}


def until_stop(steps: Mapping, stop: Optional[Judgement]) -> dict:
    """STEPS ({step: {metric: value}}) of an element as they count for its ranking: when STOP
    (the judgement that stopped it) is given, only the steps up to the rung it was stopped
    at, what it was judged on. A stopped element's program may go on reporting until the
    cancel lands; those reports never make it the best element nor change its shown metric."""
    if stop is None:
        return dict(steps)
    return {s: m for s, m in steps.items() if int(s) <= stop.rung}
