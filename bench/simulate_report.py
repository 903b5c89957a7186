"""The tables ``bench/simulate_policy.py`` prints: means, savings against EAGER_NEXT_REGION
per trace, and the summary lines."""

from __future__ import annotations

import math
import statistics

from simulate_world import TRACE_KINDS

BASELINE = "EAGER_NEXT_REGION"
LAUNCHER = "launcher"


def quantile(xs, q):
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def mean_of(rs, key="cost"):
    return statistics.mean(r[key] for r in rs)


def saving(rs, base) -> list[float]:
    return [100 * (1 - r["cost"] / b["cost"]) for r, b in zip(rs, base)]


def report(res, storms, policies, title):
    print(f"\n== {title}")
    for kind in TRACE_KINDS:
        base = res[(kind, BASELINE)]
        bc, bh = mean_of(base), mean_of(base, "hours")
        print(f"\n{kind} traces (spot zones in storm {100 * storms[kind]:.0f}% of the time on average)")
        print(f"{'policy':<36} {'mean $':>8} {'vs base':>8} {'mean h':>7} {'vs base':>8} {'restarts':>8}  "
              f"per-trace $ saving vs {BASELINE}: median [p10, p90] (min, max)")
        for p in policies:
            rs = res[(kind, p.name)]
            mc, mh, save = mean_of(rs), mean_of(rs, "hours"), saving(rs, base)
            print(f"{p.name:<36} {mc:>8,.0f} {100 * (mc / bc - 1):>+7.1f}% {mh:>7.1f} {100 * (mh / bh - 1):>+7.1f}% "
                  f"{mean_of(rs, 'restarts'):>8.1f}  {statistics.median(save):+5.1f}% "
                  f"[{quantile(save, 0.1):+5.1f}%, {quantile(save, 0.9):+5.1f}%] ({min(save):+.1f}%, {max(save):+.1f}%)")


def per_seed(res, show: int, rows: list[str]):
    """The first SHOW seeds side by side: $ of the baseline, and each row's $ and saving."""
    for kind in TRACE_KINDS:
        base = res[(kind, BASELINE)]
        print(f"\n{kind}: per seed, $ and saving vs {BASELINE}")
        print(f"{'seed':>6} {BASELINE:>18} " + " ".join(f"{r[:24]:>24} {'':>7}" for r in rows))
        for s in range(min(show, len(base))):
            cells = " ".join(f"{res[(kind, r)][s]['cost']:>24,.0f} {saving(res[(kind, r)], base)[s]:>+6.1f}%"
                             for r in rows)
            print(f"{s:>6} {base[s]['cost']:>18,.0f} {cells}")
        cells = " ".join(f"{mean_of(res[(kind, r)]):>24,.0f} {100 * (1 - mean_of(res[(kind, r)]) / mean_of(base)):>+6.1f}%"
                         for r in rows)
        print(f"{'mean':>6} {mean_of(base):>18,.0f} {cells}   (over {len(base)} seeds)")


def summary(res, title, name=LAUNCHER):
    out = []
    for kind in TRACE_KINDS:
        lr, br = res[(kind, name)], res[(kind, BASELINE)]
        save = saving(lr, br)
        n = len(save)
        se = statistics.stdev(save) / math.sqrt(n) if n > 1 else 0.0
        out.append(f"{title}, {kind}: {name} vs {BASELINE}: {100 * (1 - mean_of(lr) / mean_of(br)):+.1f}% cheaper "
                   f"on average (per-trace mean {statistics.mean(save):+.1f}% +- {se:.1f}% s.e.), median "
                   f"{statistics.median(save):+.1f}%, worst trace {min(save):+.1f}%")
    return out
