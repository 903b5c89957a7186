#!/usr/bin/env python3
"""Multi-tier checkpoints against a synchronous durable save, side by side in one run.

The durable tier is S3: a moto_server this script starts on 127.0.0.1 (stopped by PID),
reached through a **rate-limited TCP proxy** (``ThrottledLink`` below: a token bucket per
direction, --durable-mbps MB/s each way, default 100) standing in for a node's share of an
object store. The local tiers are directories on this machine's disk (one per simulated
node, the peer copy reached as a path); the network transport of nodes with their own disks,
``launcher.checkpoint.peernet``, is timed for the restore only, through the same kind of
proxy at --peer-mbps (default 1000 MB/s each way: a node-to-node link, ~8 Gb/s, well below
the 25-400 Gb/s of GPU nodes' networks, and about what this Python proxy itself passes).
Prints figures; asserts nothing.

    .venv/bin/python bench/checkpoint_tiers.py [--mb 64] [--saves 3] [--durable-mbps 100] [--local-base /dev/shm]
                                               [--peer-mbps 1000] [--state-gb 64] [--json OUT]

What is timed (each save writes the same --mb MB of state per rank, 2 nodes x 1 rank, peers: 1):
- blocked per save: from entering ``jobside.save(step)`` to leaving it, i.e. the time training
  waits. Multi-tier (drain: async): the local write + fsync + local commit (+ the fence read).
  Durable: the write to staging + the upload through the throttled link + the commit.
- drain: how long the background drain (peer copy + upload + the root's commit) took after.
- restore: resolving and materializing the whole checkpoint on node 0 and reading every byte,
  from local (same nodes), peer (node 1's directory removed), durable (both removed); and
  peer over the network (nodes with their own disks): fetching node 1's part from node 0's
  peer server (``peernet``, TCP on 127.0.0.1 through a --peer-mbps proxy) and reading it.
- goodput over a simulated year of a 512-node job, whole-job MTBF 7 days (exponential; the
  same failure trace for both sides), each side at its own optimal interval (Daly, with the
  side's blocked time as C), downtime per failure = restart (--restart-s) + the side's restore.
  Multi-tier: a failure loses one node (so it restores from peer) in --single-node-share of
  the cases, else from durable; the interval is also kept >= the drain time, and a failure
  while the newest save is still draining loses the interval before it too. Every cost is
  measured at two sizes (--mb/4 and --mb per rank), fitted as fixed seconds + seconds per MB,
  and taken at --state-gb per node (the bench size is small so it runs on a laptop): an
  extrapolation, printed beside the raw figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from checkpoint_discovery import start_moto  # noqa: E402

from launcher.checkpoint import bump_generation, open_store, read_generations  # noqa: E402
from launcher.checkpoint import peernet  # noqa: E402
from launcher.checkpoint import tier_resume as R, tiers as T  # noqa: E402
from launcher.checkpoint.posix_store import LocalStore  # noqa: E402
from launcher.jobside import tiered  # noqa: E402
from launcher.jobside import api as jobside_api  # noqa: E402


# ---------------------------------------------------------------- the throttled link
class Bucket:
    """A token bucket: RATE bytes/s, bursts of at most 64 KiB."""

    def __init__(self, rate):
        self.rate, self.cap = float(rate), 64 * 1024
        self.tokens, self.t = self.cap, time.monotonic()
        self.lock = threading.Lock()

    def take(self, n):
        while True:
            with self.lock:
                now = time.monotonic()
                self.tokens = min(self.cap, self.tokens + (now - self.t) * self.rate)
                self.t = now
                if self.tokens >= n:
                    self.tokens -= n
                    return
                wait = (n - self.tokens) / self.rate
            time.sleep(wait)


class ThrottledLink:
    """127.0.0.1:port -> TARGET, RATE bytes/s in each direction for all connections together."""

    def __init__(self, target_port, rate):
        self.up, self.down = Bucket(rate), Bucket(rate)
        self.target = ("127.0.0.1", target_port)
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            s = socket.create_connection(self.target)
            for a, b, bucket in ((c, s, self.up), (s, c, self.down)):
                threading.Thread(target=self._pump, args=(a, b, bucket), daemon=True).start()

    @staticmethod
    def _pump(a, b, bucket):
        try:
            while True:
                data = a.recv(16384)
                if not data:
                    break
                bucket.take(len(data))
                b.sendall(data)
        except OSError:
            pass
        finally:
            for x in (a, b):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.srv.close()


# ---------------------------------------------------------------- measurements
def write_state(d, rank, payload):
    with open(os.path.join(d, "rank-%d.bin" % rank), "wb") as f:
        f.write(payload)


def read_all(d):
    h = hashlib.sha256()
    n = 0
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            for b in iter(lambda: f.read(1 << 20), b""):
                h.update(b)
                n += len(b)
    return n


def measure(a, endpoint, tmp, mb, tag):
    payload = os.urandom(mb << 20)
    nodes = 2
    out = {"mb_per_rank": mb, "ranks": nodes, "durable_mbps": a.durable_mbps, "peer_mbps": a.peer_mbps}
    tmp = os.path.join(tmp, tag)
    template = os.path.join(a.local_base_dir, tag, "local", "node-{node}")
    os.environ["AWS_ENDPOINT_URL_S3"] = endpoint
    os.environ.pop("LAUNCHER_CKPT_LOCAL", None)

    # -- synchronous durable saves (the contract as it is without a local tier)
    root = "s3://bench/%s/sync" % tag
    durable = open_store(root)
    bump_generation(durable, read_generations(durable))
    sync = []
    for i in range(a.saves):
        t0 = time.perf_counter()
        with jobside_api.save((i + 1) * 10, root=root, generation=1) as d:
            write_state(d, 0, payload)
        sync.append(time.perf_counter() - t0)
    out["blocked_sync_durable_s"] = sync

    # -- multi-tier, drain async: each of 2 nodes saves its part; blocked = inside save
    root = "s3://bench/%s/tiers" % tag
    durable = open_store(root)
    bump_generation(durable, read_generations(durable))
    cfgs = [tiered.Config(T.Layout(template, nodes, r, r, nodes, 1), "async", 3, 600.0, 0) for r in range(nodes)]
    blocked, drains = [], []
    for i in range(a.saves):
        step = (i + 1) * 10
        for r in range(nodes):
            t0 = time.perf_counter()
            with tiered.save(cfgs[r], durable, step, 1) as d:
                write_state(d, r, payload)
            blocked.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        assert tiered.wait_all(600)
        drains.append(time.perf_counter() - t0 + blocked[-1])
    tiered.close_all(60)
    out["blocked_async_local_s"] = blocked
    out["drain_after_save_s"] = drains

    # -- restores of the newest step, on node 0
    lay0 = T.Layout(template, nodes, 0, 0, nodes, 1)
    rest = {}
    for case in ("local", "peer", "durable"):
        if case == "peer":
            shutil.rmtree(T.node_dir(template, 1))
        if case == "durable":
            shutil.rmtree(T.node_dir(template, 0))
        times = []
        for _ in range(a.restores):
            t0 = time.perf_counter()
            res = R.resolve(durable, lay0)
            dest = os.path.join(tmp, "view-%s" % case)
            R.materialize(durable, lay0, res.to_doc(), dest)
            n = read_all(dest)
            times.append(time.perf_counter() - t0)
            shutil.rmtree(dest)
            assert n == nodes * len(payload) and res.tier == case, (n, res.tier, case)
        rest[case] = times
        if case == "peer":
            rest["peer_net"] = restore_over_network(a, durable, template, tmp, nodes, len(payload))
    out["restore_s"] = rest
    return out


def restore_over_network(a, durable, template, tmp, nodes, size):
    """The peer restore of nodes with their own disks: rank 1's part, whose node is gone, fetched
    from the copy node 0 holds through node 0's peer server (``peernet``, TCP on 127.0.0.1,
    behind a --peer-mbps link), then every byte read. Node 0's own part is local."""
    lay0 = T.Layout(template, nodes, 0, 0, nodes, 1, root=durable.root)  # node 0's directory of this run
    srv = peernet.PeerServer(lay0.base(), durable, 0, 0, 1)
    addr = srv.publish(host="localhost", addr="127.0.0.1")
    link = ThrottledLink(int(addr["port"]), a.peer_mbps * (1 << 20))
    addr = {**addr, "host": None, "port": link.port}  # the fetch goes through the link
    name = T.local_parts(lay0.own())[0][2]
    times = []
    try:
        for _ in range(a.restores):
            dst = LocalStore(os.path.join(tmp, "fetched", "r1"))
            t0 = time.perf_counter()
            assert peernet.fetch_part(addr, "peer", 1, name, dst) == "copied"
            n = read_all(dst.local_path(name))
            times.append(time.perf_counter() - t0)
            shutil.rmtree(os.path.join(tmp, "fetched"))
            assert n >= size, (n, size)
    finally:
        link.close()
        srv.close()
    return times


# ---------------------------------------------------------------- the simulated year
def daly(C, M):
    if C >= 2 * M:
        return M
    x = C / (2 * M)
    return math.sqrt(2 * C * M) * (1 + math.sqrt(x) / 3 + x / 9) - C


def simulate(tau, C, D_of, M, horizon, seed, lag=0.0):
    """Useful-work fraction over HORIZON seconds: compute TAU, save (blocked C), repeat; a
    failure (exponential, mean M, the same trace for every caller with SEED) loses the work
    since the last save and costs D_of(rng) seconds before computing again. LAG: a save is
    only restorable LAG seconds after it returned (its copy to the peer / the root still
    draining): a failure inside that window loses the interval before it too."""
    rng = random.Random(seed)
    krng = random.Random(seed + 1)
    t, useful = 0.0, 0.0
    last_save, since_restart = -1e18, 0
    next_fail = rng.expovariate(1.0 / M)
    while t < horizon:
        seg = tau + C
        if t + seg <= next_fail:
            t += seg
            useful += tau
            last_save, since_restart = t, since_restart + 1
            continue
        if lag and since_restart and next_fail - last_save < lag:
            useful -= tau  # the newest save had not reached the tier the restart reads
        t = next_fail + D_of(krng)
        since_restart = 0
        next_fail = t + rng.expovariate(1.0 / M)
    return useful / t


def med(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def fit(small, big, key, sub=None):
    """(fixed seconds, seconds per MB) of a metric measured at two sizes."""
    def get(m):
        v = m[key] if sub is None else m[key][sub]
        return med(v)
    y0, y1 = get(small), get(big)
    x0, x1 = small["mb_per_rank"], big["mb_per_rank"]
    slope = max(0.0, (y1 - y0) / (x1 - x0))
    return max(0.0, y1 - slope * x1), slope


def goodput(small, big, a):
    """The simulated year with every cost = fixed + per-MB x the per-node state (--state-gb),
    both fitted from the two measured sizes (one rank per node here)."""
    mb = a.state_gb * 1024.0
    at = lambda f: f[0] + f[1] * mb  # noqa: E731
    fits = {"C_sync": fit(small, big, "blocked_sync_durable_s"), "C_tier": fit(small, big, "blocked_async_local_s"),
            "drain": fit(small, big, "drain_after_save_s")}
    for k in ("local", "peer", "durable"):
        fits["restore_" + k] = fit(small, big, "restore_s", k)
    C_sync, C_tier, drain = at(fits["C_sync"]), at(fits["C_tier"]), at(fits["drain"])
    R = {k: at(fits["restore_" + k]) for k in ("local", "peer", "durable")}
    M, year = a.mtbf_days * 86400.0, 365 * 86400.0
    tau_sync = daly(C_sync, M)
    tau_tier = max(daly(C_tier, M), drain - C_tier)   # a save's drain must end before the next save
    share = a.single_node_share
    g_sync = simulate(tau_sync, C_sync, lambda r: a.restart_s + R["durable"], M, year, a.seed)
    g_tier = simulate(tau_tier, C_tier,
                      lambda r: a.restart_s + (R["peer"] if r.random() < share else R["durable"]), M, year, a.seed,
                      lag=drain)
    return {"scaled_to_gb_per_node": a.state_gb, "fits_fixed_s_per_mb": fits, "C_sync_s": C_sync, "C_tier_s": C_tier, "drain_s": drain,
            "restore_s": R, "interval_sync_s": tau_sync, "interval_tier_s": tau_tier,
            "goodput_durable_only": g_sync, "goodput_multi_tier": g_tier,
            "points": 100 * (g_tier - g_sync)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=int, default=64, help="state per rank, MB")
    p.add_argument("--saves", type=int, default=3)
    p.add_argument("--restores", type=int, default=3)
    p.add_argument("--durable-mbps", type=float, default=100.0, help="the throttled link to S3, MB/s each way")
    p.add_argument("--peer-mbps", type=float, default=1000.0,
                   help="the throttled node-to-node link of the network peer restore, MB/s each way")
    p.add_argument("--state-gb", type=float, default=64.0, help="per-node state the goodput model scales to")
    p.add_argument("--mtbf-days", type=float, default=7.0)
    p.add_argument("--restart-s", type=float, default=180.0, help="requeue + start, besides the restore")
    p.add_argument("--single-node-share", type=float, default=0.9,
                   help="failures that lose one node (multi-tier restores those from the peer)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--local-base", default=None,
                   help="where the local tiers (and the synchronous save's staging) live: a disk directory "
                        "(default: the temp dir) or a RAM disk such as /dev/shm (GKE's multi-tier checkpointing "
                        "uses a RAM-backed local volume)")
    p.add_argument("--json")
    a = p.parse_args(argv)
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                 "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
                 "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "LAUNCHER_NODE_FACTS": "0",
                 "LAUNCHER_HEARTBEAT_SECONDS": "0"}.items():
        os.environ[k] = v
    tmp = tempfile.mkdtemp(prefix="bench-tiers-")
    a.local_base_dir = tempfile.mkdtemp(prefix="bench-tiers-local-", dir=a.local_base) if a.local_base else tmp
    os.environ["LAUNCHER_STAGING_DIR"] = a.local_base_dir
    proc, endpoint = start_moto(tmp)
    link = None
    try:
        import boto3

        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
        link = ThrottledLink(int(endpoint.rsplit(":", 1)[1]), a.durable_mbps * (1 << 20))
        ep = "http://127.0.0.1:%d" % link.port
        small = measure(a, ep, tmp, max(1, a.mb // 4), "small")
        m = measure(a, ep, tmp, a.mb, "big")
    finally:
        if link:
            link.close()
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(a.local_base_dir, ignore_errors=True)
    g = goodput(small, m, a)
    bs, ba = med(m["blocked_sync_durable_s"]), med(m["blocked_async_local_s"])
    r = {k: med(v) for k, v in m["restore_s"].items()}
    print("state %d MB per rank, 2 nodes x 1 rank, peers: 1; durable = moto S3 behind a %g MB/s link; local "
          "tiers and staging under %s" % (a.mb, a.durable_mbps, a.local_base or "the temp dir (disk)"))
    print("blocked per save   sync durable %.3f s   async multi-tier %.3f s   ratio %.1f%%  (target <= 10%%)"
          % (bs, ba, 100 * ba / bs))
    print("drain after a save (background) %.3f s" % med(m["drain_after_save_s"]))
    print("restore            local %.3f s   peer %.3f s   durable %.3f s   local/durable %.3f (<= 0.1)  "
          "peer/durable %.3f (<= 0.25)" % (r["local"], r["peer"], r["durable"], r["local"] / r["durable"],
                                          r["peer"] / r["durable"]))
    print("                   peer over the network (own disks, peernet behind a %g MB/s link, one rank's part) "
          "%.3f s   peer_net/durable %.3f (<= 0.25)" % (a.peer_mbps, r["peer_net"], r["peer_net"] / r["durable"]))
    print("goodput, 512 nodes, MTBF %g d, a year, costs fitted (fixed + per MB, from %d and %d MB) and taken at %g GB/node: C sync %.0f s (interval %.0f s), "
          "C tier %.1f s (interval %.0f s), restore durable %.0f s peer %.0f s"
          % (a.mtbf_days, small["mb_per_rank"], a.mb, a.state_gb, g["C_sync_s"], g["interval_sync_s"], g["C_tier_s"], g["interval_tier_s"],
             g["restore_s"]["durable"], g["restore_s"]["peer"]))
    print("  durable-only %.4f   multi-tier %.4f   +%.2f points  (target >= 5)"
          % (g["goodput_durable_only"], g["goodput_multi_tier"], g["points"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"measured": m, "measured_small": small, "goodput": g}, f, indent=1)


if __name__ == "__main__":
    main()
