#!/usr/bin/env python3
"""One rank of a small deterministic job for the multi-tier checkpoint tests (pure Python).

Each rank evolves its own parameter vector from (seed, rank, step) only, so the final
parameters after any number of interruptions are bit for bit those of an uninterrupted run
when every restart resumes every rank from the same committed step. It saves rank-R.bin and
rank-R.json (its own names) every TRAIN_EVERY steps through ``jobside.save``.

Environment: RANK, WORLD_SIZE, TRAIN_STEPS, TRAIN_EVERY, TRAIN_DIM, TRAIN_SEED, TRAIN_SLEEP,
TRAIN_RESULT_DIR; fault scaffolding for the tests: TRAIN_DIE_AT=N (after step N the rank
dies with os._exit, no exit handlers: a crash) and TRAIN_DRAIN_BEFORE_DIE=1 (wait for the
drainer first, so the copies of the last save reached the peer and the root),
TRAIN_HOLD_AFTER=N with TRAIN_HOLD_FILE=PATH (after step N, wait up to 300 s for PATH to exist:
a generation held still while the test starts the next one).
Exit 0 done, 3 superseded (a zombie), 9 died on purpose.
"""

import hashlib
import json
import os
import random
import struct
import sys
import time

try:
    from launcher import jobside
except ImportError:  # on a node without the launcher installed: the staged helper
    sys.path.insert(0, os.environ["LAUNCHER_JOB_PYZ"])
    from launcher import jobside
from launcher.checkpoint import Superseded

E = os.environ.get
rank, world = int(E("RANK", "0")), int(E("WORLD_SIZE", "1"))
steps, every, dim = int(E("TRAIN_STEPS", "60")), int(E("TRAIN_EVERY", "10")), int(E("TRAIN_DIM", "2000"))
seed, sleep = int(E("TRAIN_SEED", "7")), float(E("TRAIN_SLEEP", "0"))
die_at = int(E("TRAIN_DIE_AT", "-1"))
hold_after, hold_file = int(E("TRAIN_HOLD_AFTER", "-1")), E("TRAIN_HOLD_FILE", "")


def step_fn(w, step):
    r = random.Random(seed * 1000003 + rank * 7919 + step)
    for i in range(len(w)):
        w[i] = w[i] * 0.999 + r.gauss(0.0, 1.0) * 0.01


def pack(w):
    return struct.pack("<%dd" % len(w), *w)


w = [random.Random(seed + rank).uniform(-1, 1) for _ in range(dim)]
start = 0
seen_files = []
with jobside.restore() as d:
    if d:
        with open(os.path.join(d, "rank-%d.json" % rank)) as f:
            st = json.load(f)
        with open(os.path.join(d, "rank-%d.bin" % rank), "rb") as f:
            w = list(struct.unpack("<%dd" % dim, f.read()))
        start = st["step"]
        assert start == int(E("LAUNCHER_RESUME_STEP")), (start, E("LAUNCHER_RESUME_STEP"))
        seen_files = sorted(os.listdir(d))
for step in range(start + 1, steps + 1):
    step_fn(w, step)
    if step % every == 0 and E("LAUNCHER_CKPT_ROOT"):
        try:
            with jobside.save(step) as d:
                with open(os.path.join(d, "rank-%d.bin" % rank), "wb") as f:
                    f.write(pack(w))
                with open(os.path.join(d, "rank-%d.json" % rank), "w") as f:
                    json.dump({"step": step, "rank": rank}, f)
        except Superseded as e:
            print("rank %d superseded: %s" % (rank, e), file=sys.stderr, flush=True)
            sys.exit(3)
    if step == die_at:
        if E("TRAIN_DRAIN_BEFORE_DIE") == "1":
            jobside.drain(60)
        os._exit(9)
    if step == hold_after:
        held_until = time.time() + 300
        while not os.path.exists(hold_file) and time.time() < held_until:
            time.sleep(0.05)
    if sleep:
        time.sleep(sleep)
with open(os.path.join(E("TRAIN_RESULT_DIR", "."), "result-%d.json" % rank), "w") as f:
    json.dump({"sha256": hashlib.sha256(pack(w)).hexdigest(), "resumed_from": start, "seen": seen_files}, f)
