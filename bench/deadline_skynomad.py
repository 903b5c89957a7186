"""SkyNomad's own policy, as a baseline for ``bench/deadline_replay.py`` (never shipped in launcher/).

Written from reading the SkyNomad NSDI '27 artifact (``andylizf/skynomad-artifact``, Apache-2.0,
commit c62b9aa): ``sky_spot/strategies/unified_cost_model.py`` (the policy) and
``unified_cost_model_v_variants.py`` (its rate-ratio progress value), under its simulator's
safety net (``sky_spot/env.py``). The artifact's figures label two arms SkyNomad: on the V100
panel (Figure 9b) ``unified_cost_model_rate_ratio`` with ``--max-prediction-hours 1e9
--virtual-availability``; on the H100 panel (Figure 9a) ``unified_cost_model_risk`` (the base
class: the reference-cost progress value) with its defaults. Both are here (``value``). No code
was copied; what follows is what that code does, restated, and this module does the same.

Each tick, before the policy: the simulator's **safety net**: once ``ceil(work left + overhead)``
reaches ``floor(time left)`` (in ticks) it takes over for good: on-demand where the job runs, or,
holding nothing, in the zone cheapest to finish in (on-demand price x work left + egress from the
zone of the last progress). The policy is not asked again.

Then the policy, with the zones (SkyNomad's "regions") as its options:

* **Progress value** ($/h), ``rate_ratio``: ``V = c_od x (work left / time left) / (work /
  deadline)`` (``c_od`` the cheapest on-demand price), floored at the cheapest spot price this
  tick; ``reference``: 1.2 x the $/h of a plan for the work left: a share on on-demand (where
  the line through the progress rate of the last 10 h, shifted by two restarts, meets the
  deadline's), the rest on the zones cheapest first by ``price x E / (E - overhead)``, each up
  to its availability (share of the last 12 h it was seen running) x time left x ``(E -
  overhead) / E``, any shortfall on on-demand, plus $0.02/GB of checkpoint per switch the plan
  makes.
* **Expected spot lifetime** ``E`` per zone, from what the policy has seen of it (it is never
  told availability, only the result of its launches and probes): a Nelson-Aalen cumulative
  hazard over the zone's past runs (a run ends in a *failure* when preempted, or when a probe or
  launch finds the zone gone; in a *censor* when the policy ended it), the hazard scaled by a
  *burst* factor ``g`` (the densest recent suffix of failures over accumulated risk, at least 1,
  1 until a risk of 1 has accumulated), the expected remaining life at the run's current age,
  a geometric tail of one tick per step beyond the last knot; capped at ``max_prediction_hours``
  (2 h by default; 1e9 in the V100 panel's config) and at the time left. A zone with no failure
  seen has ``E`` = the cap.
* **Values** ($/h): spot in zone z: ``(V x (E - overhead) - spot price x E) / E`` (no overhead for
  the zone it runs in), minus ``egress(origin -> z) / E`` (origin: the zone held, else the zone
  last launched in); on-demand in z: ``V - on-demand price``, minus ``overhead x V + egress`` when
  z is not the origin (the transfer's time is not counted between regions, and is 0 within one).
  The current holding is worth its own value (spot: ``V - price``), waiting 0.
* **Gate** ("VOI gating", on by default): an option in another zone than the one held must beat
  the holding by ``0.5 + 0.0002 x checkpoint GB + 0.05 x V`` $/h.
* **Choice**: options worth >= 0 are tried best first while worth more than the holding; a spot
  launch where there is none fails (and is recorded as a failure of that zone) and the next is
  tried; the first success is taken and the old instance released. Choosing to wait while
  holding something keeps it.
* **Probes**: after deciding, every zone but the one chosen that has no live probe run, did not
  fail a launch this tick and is due (every 6 ticks) is probed; a probe that finds spot bills 60 s
  of spot and opens a "probe" run there that stays open (it is not probed again) until a real
  launch there takes over; one that does not counts as a failure for ``g``.
* ``virtual_availability`` (on in the V100 panel's config): the open run of a zone also counts as
  a censored observation of its lifetime, probe time adds to a zone's age, and a zone seen up
  and then down closes a run as a failure.

What this module keeps of the artifact's quirks, because they change decisions: a spot run left
for spot in another zone is never closed as the policy's own ending (without virtual
availability it stays open and ages; with it, it is closed as a failure); the on-demand option
in the origin zone pays no restart in its value.

Not reproduced: the artifact's decision log; its reference-cost V (the rate-ratio arm overrides
it). The replay's simulator rules (ticks, billing, egress) are ``deadline_replay``'s.
"""

from __future__ import annotations

import math
from collections import deque

NONE, SPOT, OD = 0, 1, 2          # deadline_replay's holdings
FAILURE, CENSOR = True, False
PROBE_BILLED_S = 60.0
_EPS_HAZARD = 1e-8


class Zone:
    """What the policy has seen of one zone: its closed runs (hours, failed?), the run open now
    (start in seconds, source "spot" or "probe"), and its burst events."""

    __slots__ = ("segments", "cur_start", "cur_src", "burst", "burst_sum", "g", "tick_failures",
                 "last_real_age", "last_virtual_age", "probe_age_h", "probing", "virtual", "next_probe",
                 "_knots_key", "_knots")

    def __init__(self):
        self.segments = []            # (duration_h, failed, start_s, end_s)
        self.cur_start = None
        self.cur_src = None
        self.burst = deque()          # (risk, failures)
        self.burst_sum = 0
        self.g = 1.0
        self.tick_failures = 0
        self.last_real_age = None
        self.last_virtual_age = None
        self.probe_age_h = 0.0
        self.probing = False          # a probe's run is open here
        self.virtual = None           # virtual availability: last seen up (True), down, or None
        self.next_probe = 0
        self._knots_key = None
        self._knots = ([], _EPS_HAZARD)

    # -- runs
    def start(self, now_s: float, src: str) -> None:
        self.cur_start, self.cur_src = now_s, src

    def end(self, now_s: float, failed: bool) -> None:
        """Close the open run (a failure counts for the burst factor even with none open)."""
        if failed:
            self.tick_failures += 1
        if self.cur_start is None:
            return
        self.segments.append((max(0.0, (now_s - self.cur_start) / 3600), failed, self.cur_start, now_s))
        self.cur_start = self.cur_src = None

    def age_h(self, now_s: float):
        return None if self.cur_start is None else max(0.0, (now_s - self.cur_start) / 3600)

    def availability(self, now_s: float, window_s: float = 12 * 3600.0) -> float:
        """Share of the last 12 h (or of the time so far) this zone was seen running."""
        if not self.segments and self.cur_start is None:
            return 0.0
        denom = min(window_s, now_s)
        if denom <= 0:
            return 0.0
        lo = max(0.0, now_s - window_s)
        up = sum(max(0.0, min(e, now_s) - max(st, lo)) for _, _, st, e in self.segments)
        if self.cur_start is not None:
            up += max(0.0, now_s - max(self.cur_start, lo))
        return max(0.0, min(1.0, up / denom))

    # -- Nelson-Aalen
    def knots(self, now_s: float, virtual: bool):
        """(knots [(failure time h, hazard step)], tail hazard per hour)."""
        age = self.age_h(now_s) if virtual else None
        key = (len(self.segments), age if age and age > 0 else None)
        if key == self._knots_key:
            return self._knots
        samples = [(d, f) for d, f, _, _ in self.segments]
        if virtual and age is not None and age > 0:
            samples.append((age, CENSOR))
        fails = sorted({d for d, f in samples if f and d >= 0})
        out = []
        for tau in fails:
            d_j = sum(1 for d, f in samples if f and abs(d - tau) <= 1e-9)
            n_j = sum(1 for d, _ in samples if d + 1e-9 >= tau)
            out.append((tau, d_j / max(n_j, 1e-12)))
        res = (out, max(out[-1][1], _EPS_HAZARD) if out else _EPS_HAZARD)
        self._knots_key, self._knots = key, res
        return res

    @staticmethod
    def hazard(knots, t: float, tail: float) -> float:
        """Cumulative hazard at age T: the steps before it, and the tail rate past the last one."""
        if t <= 0:
            return 0.0
        if not knots:
            return max(0.0, t * tail)
        s, last = 0.0, 0.0
        for tau, step in knots:
            if tau >= t:
                break
            s += step
            last = tau
        if t > last and tail > 0:
            s += (t - last) * tail
        return s

    def expected_life_h(self, age: float, gap_h: float, now_s: float, virtual: bool) -> float:
        knots, tail = self.knots(now_s, virtual)
        g = max(1e-6, self.g)
        e, surv, t = 0.0, 1.0, max(0.0, age)
        for tau, step in knots:
            if tau <= t + 1e-12:
                continue
            e += surv * (tau - t)
            surv *= math.exp(-g * step)
            t = tau
        if tail > 1e-12:
            denom = 1.0 - math.exp(-g * tail)
            e += surv * gap_h / denom if denom > 1e-9 else surv * gap_h / max(g * tail, 1e-9)
        return max(e, 0.0)

    # -- burst factor
    def add_burst(self, risk: float, failures: int) -> None:
        risk = max(0.0, risk)
        if risk <= 0 and failures <= 0:
            return
        self.burst.append((risk, failures))
        # the events' total risk, kept as a left-to-right sum of them (what summing the deque
        # afresh gives) and summed afresh only when the oldest are dropped (at a risk of 8)
        self.burst_sum += risk
        total, dropped = self.burst_sum, False
        while self.burst and total - self.burst[0][0] >= 8.0:
            total -= self.burst.popleft()[0]
            dropped = True
        if dropped:
            self.burst_sum = sum(x for x, _ in self.burst)
        self.g = 1.0 if self.burst_sum < 1.0 else max(1.0, self._densest())

    def _densest(self) -> float:
        """Failures per unit of risk over the densest suffix whose risk stays <= 1 (the newest
        event alone when even it is above 1)."""
        eps, risk, fails, n = 1e-6, 0.0, 0.0, 0
        best_ratio, best_n = 0.0, 0
        for r_i, f_i in reversed(self.burst):
            risk += max(0.0, r_i)
            fails += max(0.0, f_i)
            n += 1
            if n == 1 and risk <= eps and fails <= 0:
                continue
            if risk > 1.0 + 1e-9:
                if n == 1:
                    eff = max(risk, eps if fails > 0 else risk)
                    best_ratio, best_n = (fails / eff if eff > 0 else 0.0), 1
                break
            eff = risk if risk > 0 else (eps if fails > 0 else 0.0)
            ratio = fails / eff if eff > 0 else 0.0
            if best_n == 0 or ratio > best_ratio + 1e-9:
                best_ratio, best_n = ratio, n
        if best_n == 0 and self.burst:
            r_l, f_l = self.burst[-1]
            eff = r_l if r_l > 0 else (eps if f_l > 0 else 0.0)
            best_ratio = f_l / eff if eff > 0 else 0.0
        return best_ratio


class SkyNomad:
    """The artifact's ``unified_cost_model_rate_ratio`` with its simulator's safety net, over a
    ``deadline_replay.Run``. ``egress(src_region, dst_region)`` is the replay's $/GB."""

    name = "skynomad"

    def __init__(self, egress, max_prediction_h: float = 2.0, virtual: bool = False,
                 probe_every: int = 6, voi=(0.5, 0.0002, 0.05), value: str = "rate_ratio",
                 progress_window_h: float = 10.0):
        if value not in ("rate_ratio", "reference"):
            raise ValueError(f"value must be rate_ratio or reference, not {value!r}")
        self.value = value
        self.window_h = progress_window_h
        self.egress_per_gb = egress
        self.cap_h = max_prediction_h
        self.virtual_on = virtual
        self.probe_every = probe_every
        self.voi = voi

    # -- the run's state
    def reset(self, r):
        self.zones = [Zone() for _ in r.w.names]
        self.latched = False
        self.active = None            # zone of the spot run it launched and holds
        self.by_us = False            # that run is being ended by the policy
        self.last = None              # zone last launched in (the origin of a move)
        self.pending_probe_h = [0.0] * len(self.zones)
        self.blocked = set()
        self.gap_s = r.g * 3600
        self.done = []                # work done (h) in each tick so far
        self.p_seen = 0.0

    def _egress(self, r, a: int, b: int) -> float:
        if a == b or r.gb <= 0:
            return 0.0
        return r.gb * self.egress_per_gb(r.w.regions[a], r.w.regions[b])

    def _virtual(self, z: int, up: bool, now_s: float) -> None:
        """Virtual availability: a zone seen up opens a run, seen down closes it as a failure."""
        if not self.virtual_on or self.active == z:
            return
        zs = self.zones[z]
        prev = zs.virtual
        if prev is None:
            if up:
                zs.start(now_s, "probe")
        elif prev != up:
            if up:
                zs.start(now_s, "probe")
            else:
                zs.end(now_s, FAILURE)
        zs.virtual = up

    def _life_h(self, r, z: int, now_s: float) -> float:
        zs = self.zones[z]
        age = zs.age_h(now_s) or 0.0
        if self.virtual_on:
            age = max(age, zs.probe_age_h)
        e = min(zs.expected_life_h(age, r.g, now_s, self.virtual_on), self.cap_h)
        return min(e, r.D - r.t) if r.D > r.t else e

    def _tick_burst(self, r, now_s: float) -> None:
        dt = r.g
        for zs in self.zones:
            knots, tail = zs.knots(now_s, self.virtual_on)
            tail = max(tail, _EPS_HAZARD)
            now = prev = None
            active = False
            if zs.cur_src is not None:
                active = True
                now = zs.age_h(now_s)
                if zs.cur_src == "spot":
                    prev = zs.last_real_age
                    zs.last_real_age = now
                    if not self.virtual_on:
                        zs.last_virtual_age = None
                else:
                    prev = zs.last_virtual_age
                    zs.last_virtual_age = now
                    zs.last_real_age = None
                if prev is None:
                    prev = max(now - dt, 0.0)
            else:
                zs.last_real_age = None
                if not self.virtual_on:
                    zs.last_virtual_age = None
            risk = 0.0
            if now is not None:
                risk = max(0.0, Zone.hazard(knots, now, tail) - Zone.hazard(knots, prev, tail))
            if risk <= 0 and (active or zs.tick_failures > 0):
                if not knots:
                    risk = max(risk, tail * dt)
                elif prev is not None and now is not None and prev >= knots[-1][0]:
                    risk = max(risk, tail * max(0.0, now - prev))
            if zs.tick_failures > 0 and risk <= 0:
                risk = tail * dt if tail > 0 else 1e-6
            if risk > 0 or zs.tick_failures > 0:
                zs.add_burst(risk, zs.tick_failures)
            zs.tick_failures = 0

    def _safety(self, r):
        left = r.W - r.p
        g = r.g
        if not self.latched:
            need = math.ceil((left + r.d) / g - 1e-9) * g
            have = math.floor((r.D - r.t) / g + 1e-9) * g
            if need < have:
                return None
            self.latched = True
            if r.kind != NONE:
                return OD, r.zone
        elif r.kind != NONE:
            return r.kind, r.zone
        return OD, min(range(len(r.w.od)), key=lambda z: (r.w.od[z] * left + r.move_usd(z), z))

    def act(self, r):
        net = self._safety(r)
        if net is not None:
            return net
        now_s = r.k * self.gap_s
        w, idx = r.w, r.idx
        n = len(self.zones)
        while len(self.done) < r.k:    # the work each past tick did (the latched net asks nothing)
            self.done.append(r.p - self.p_seen if len(self.done) == r.k - 1 else 0.0)
        self.p_seen = r.p
        # a spot run it held and no longer holds: preempted, or ended by the policy
        if self.active is not None and not (r.kind == SPOT and r.zone == self.active):
            self.zones[self.active].end(now_s, CENSOR if self.by_us else FAILURE)
            self.active, self.by_us = None, False
        if self.virtual_on:
            for z in range(n):
                self.zones[z].probe_age_h += self.pending_probe_h[z]
                self.pending_probe_h[z] = 0.0
        self._tick_burst(r, now_s)

        left, time_left = r.W - r.p, r.D - r.t
        spot = [w.spot_price(z, idx) for z in range(n)]
        c_od = min(w.od)
        if time_left <= 0:
            v = math.inf
        elif self.value == "rate_ratio":
            v = max(c_od * (left * r.D) / (time_left * r.W), min(spot))
        else:
            v = 1.2 * self._reference_usd_h(r, left, time_left, spot, c_od, now_s)
        cur_zone = r.zone if r.kind != NONE else None
        cur_value = 0.0
        if r.kind == SPOT:
            cur_value = v - spot[r.zone]
        elif r.kind == OD:
            cur_value = v - w.od[r.zone]
        if cur_zone is not None:
            self.last = cur_zone
        origin = cur_zone if cur_zone is not None else self.last
        options = self._options(r, v, cur_zone, cur_value, origin, spot, now_s)

        self.blocked = set()
        for value, kind, z in options:
            if value <= cur_value:
                break
            if kind == r.kind and z == cur_zone:
                continue
            if kind == SPOT:
                zs = self.zones[z]
                if zs.probing:          # a real launch takes over the probe's run
                    zs.end(now_s, CENSOR)
                    zs.probing = False
                    zs.last_virtual_age = None
                if not r.up(z):
                    self.blocked.add(z)
                    zs.tick_failures += 1
                    self._virtual(z, False, now_s)
                    continue
                zs.start(now_s, "spot")
                self.active, self.by_us = z, False
                zs.last_real_age, zs.last_virtual_age = 0.0, None
            self.last = z
            if cur_zone is not None and kind != NONE:
                if self.active == cur_zone:
                    self.by_us = True
                self._virtual(cur_zone, False, now_s)
            if kind == NONE:
                self._probe(r, None, now_s)
                return (r.kind, r.zone) if r.kind != NONE else (NONE, -1)
            self._probe(r, z, now_s)
            return kind, z
        self._probe(r, cur_zone, now_s)
        return (r.kind, r.zone) if r.kind != NONE else (NONE, -1)

    def _options(self, r, v: float, cur_zone, cur_value: float, origin, spot, now_s: float) -> list:
        """(value $/h, kind, zone) of waiting and of every spot zone and on-demand zone worth
        trying, best first: worth >= 0 and, in another zone than the one held, more than the
        holding by the gate."""
        w, d = r.w, r.d
        gate = self.voi[0] + self.voi[1] * max(r.gb, 0.0) + self.voi[2] * v
        options = [(0.0, NONE, None)]
        for z in range(len(self.zones)):
            e = self._life_h(r, z, now_s)
            keep = r.kind == SPOT and z == cur_zone
            eff = max(0.0, e if keep else e - d)
            if eff <= 0 or e <= 0:
                continue
            value = (v * eff - spot[z] * e) / e
            if origin is not None and origin != z:
                value -= self._egress(r, origin, z) / max(e, 1e-6)
            if value < 0:
                continue
            if cur_zone is not None and z != cur_zone and value <= cur_value + gate:
                continue
            options.append((value, SPOT, z))
        for z in range(len(w.od)):
            value = v - w.od[z]
            if origin is not None and origin != z:
                value -= d * v + self._egress(r, origin, z)
            if value < 0 or (r.kind == OD and z == cur_zone):
                continue
            if cur_zone is not None and value <= cur_value + gate:
                continue
            options.append((value, OD, z))
        options.sort(key=lambda o: o[0], reverse=True)
        return options

    def _recent_rate(self, r) -> float:
        """Work done per hour over the last ``progress_window_h`` hours (0..1)."""
        t, p = r.t, r.p
        if t * 3600 < 600:
            return p / t if t > 0 else 0.0
        lo = max(0.0, t - self.window_h)
        first = int(lo / r.g)
        done = sum(self.done[first:])
        span = t - lo
        return max(0.0, min(1.0, done / span)) if span > 0 else 0.0

    def _od_weight(self, r) -> float:
        """The share of the work left planned on on-demand: where the line through the recent
        progress rate, shifted by two restarts, reaches the deadline's."""
        W, D, p, t = r.W, r.D, r.p, r.t
        if t <= 0:
            return 0.0
        if abs(p - t) < 1e-6 / 3600:
            return 0.5
        rate = self._recent_rate(r)
        if abs(rate - 1.0) < 1e-6:
            return 0.0
        x = (rate * t - p + (W + 2 * r.d - D)) / (rate - 1.0)
        if x >= D:
            return 0.0
        if x <= 0:
            return 1.0
        return max(0.0, min(1.0, (D - x) / (D - t)))

    def _reference_usd_h(self, r, left: float, time_left: float, spot, c_od: float, now_s: float) -> float:
        """The artifact's base progress value before its 1.2 factor: $/h of a plan for the work
        left that puts the on-demand share (``_od_weight``) on on-demand and the rest on the
        zones in order of lifetime-adjusted price, each up to availability x time left x its
        useful share, what is left over on on-demand; plus, with a checkpoint, $0.02/GB for
        each switch between the zones (and on-demand) the plan uses."""
        d = r.d
        zones = []
        for z, zs in enumerate(self.zones):
            e = self._life_h(r, z, now_s)
            useful = (e - d) / e if e > d else 0.0
            share = zs.availability(now_s) * time_left * useful
            if share > 0:
                zones.append((spot[z] * e / max(e - d, 1e-6), share))
        zones.sort(key=lambda x: x[0])
        od_h = max(0.0, min(1.0, self._od_weight(r))) * left
        want = max(0.0, left - od_h)
        cost, got, used = od_h * c_od, 0.0, 0
        for price, share in zones:
            if got >= want:
                break
            take = min(share, want - got)
            if take <= 0:
                continue
            used += 1
            cost += take * price
            got += take
        if got < want:
            od_h += want - got
            cost += (want - got) * c_od
        ref = cost / max(left, 1e-6)
        n = used + (1 if od_h > 0 else 0)
        if r.gb > 0 and n > 1:
            ref += (n - 1) * r.gb * 0.02 / max(left, 1e-6)
        return ref

    def _probe(self, r, primary, now_s: float) -> None:
        k = r.k
        for z, zs in enumerate(self.zones):
            if z == primary or zs.probing or z in self.blocked or k < zs.next_probe:
                continue
            zs.next_probe = k + max(1, self.probe_every)
            if r.up(z):
                zs.start(now_s, "probe")
                zs.probing = True
                zs.last_virtual_age = 0.0
                self._virtual(z, True, now_s)
                usd = r.w.spot_price(z, r.idx) * PROBE_BILLED_S / 3600
                r.cost += usd
                r.probe_usd += usd
                self.pending_probe_h[z] += PROBE_BILLED_S / 3600
            else:
                zs.tick_failures += 1
                zs.last_virtual_age = None
                self._virtual(z, False, now_s)
        self.blocked = set()
