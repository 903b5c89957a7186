#!/usr/bin/env python3
"""A small deterministic training program that checkpoints through the launcher contract.

It fits a linear model with SGD + momentum on data generated from (seed, step), in pure
Python (no NumPy needed on the nodes). Because each step's batch depends only on the
seed and the step number, and the checkpoint holds the parameters *and* the optimizer
state, the final parameters after any number of interruptions are bit-for-bit those of
an uninterrupted run.

Under the launcher (the job script ran ``eval "$(python3 launcher_job.pyz resume-env)"``)::

    python examples/train.py --steps 1000 --every 50

Options (argv, else environment):
    --steps N    TRAIN_STEPS        total steps (default 200)
    --every K    TRAIN_CKPT_EVERY   checkpoint every K steps (default 20)
    --sleep S    TRAIN_STEP_SLEEP   seconds to sleep per step, so tests can interrupt it (0)
    --dim D      TRAIN_DIM          parameter count (default 64)
    --seed S     TRAIN_SEED         data seed (default 1234)
    --result P   TRAIN_RESULT       where to write the final result JSON (default ./train_result.json)

Contract used: LAUNCHER_CKPT_ROOT (where to save), LAUNCHER_RESUME_FROM / LAUNCHER_RESUME_STEP
(what to resume from), LAUNCHER_GENERATION (the checkpoint generation), LAUNCHER_PREEMPT_SIGNAL
(SIGUSR1).
SIGTERM is treated as a preemption notice too. Without LAUNCHER_CKPT_ROOT it runs without
checkpoints. If the launcher is not installed, set LAUNCHER_JOB_PYZ to the staged
launcher_job.pyz (or put it on PYTHONPATH).

Checkpoint at step N = the state after N completed steps; it holds params.bin (the
weights and momentum as little-endian float64) and state.json.

Metrics: at every checkpoint (and at the end) it reports the loss and the model FLOPs of one
step (``jobside.report(step, loss=..., flops=...)``: forward 2*dim and backward 2*dim
multiply-adds per example, times the batch), so ``launcher report`` shows MFU and effective
MFU against the spec's ``resources.peak_tflops``.

Output: "step N loss L" per step, and at the end "RESULT <sha256> steps=<N>" (also written
to the result file as {"sha256": ..., "steps": N}).

Exit codes: 0 finished; 75 saved a checkpoint on a preemption notice and stopped (restart
me); 3 superseded: a newer attempt of the job is running (this one is a zombie; under Slurm it
waits to be cleaned up instead, see launcher.jobside.stand_down); 1 error.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import struct
import sys
import time

try:
    from launcher import jobside
except ImportError:  # on a node without the launcher installed: use the staged zipapp
    if os.environ.get("LAUNCHER_JOB_PYZ"):
        sys.path.insert(0, os.environ["LAUNCHER_JOB_PYZ"])
        from launcher import jobside
    else:
        raise

from launcher.checkpoint import Superseded

EXIT_SUPERSEDED = 3
LR, BETA, BATCH = 0.01, 0.9, 8


def step_flops(dim):
    """Model FLOPs of one step: forward (w.x) and the weight gradient, 2*dim each, per example
    (the 6N rule's analogue for a linear model: no activation gradient to propagate)."""
    return 4 * dim * BATCH


def _opt(argv):
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=int(env("TRAIN_STEPS", "200")))
    p.add_argument("--every", type=int, default=int(env("TRAIN_CKPT_EVERY", "20")))
    p.add_argument("--sleep", type=float, default=float(env("TRAIN_STEP_SLEEP", "0")))
    p.add_argument("--dim", type=int, default=int(env("TRAIN_DIM", "64")))
    p.add_argument("--seed", type=int, default=int(env("TRAIN_SEED", "1234")))
    p.add_argument("--result", default=env("TRAIN_RESULT", "train_result.json"))
    a = p.parse_args(argv)
    if a.steps < 0 or a.every < 1 or a.dim < 1:
        p.error("--steps >= 0, --every >= 1, --dim >= 1")
    return a


def target(seed, dim):
    r = random.Random(seed)
    return [r.uniform(-1.0, 1.0) for _ in range(dim)]


def train_step(w, m, w_true, seed, step):
    """One SGD+momentum step on the batch of STEP. Returns the batch loss."""
    r = random.Random(seed * 1000003 + step)
    dim = len(w)
    grad = [0.0] * dim
    loss = 0.0
    for _ in range(BATCH):
        x = [r.gauss(0.0, 1.0) for _ in range(dim)]
        y = sum(a * b for a, b in zip(w_true, x)) + r.gauss(0.0, 0.01)
        err = sum(a * b for a, b in zip(w, x)) - y
        loss += err * err
        for i in range(dim):
            grad[i] += 2.0 * err * x[i] / BATCH
    for i in range(dim):
        m[i] = BETA * m[i] + grad[i]
        w[i] -= LR * m[i]
    return loss / BATCH


def pack(w, m) -> bytes:
    return struct.pack("<%dd" % (2 * len(w)), *(list(w) + list(m)))


def save(d, done, w, m, a, loss):
    with open(os.path.join(d, "params.bin"), "wb") as f:
        f.write(pack(w, m))
    with open(os.path.join(d, "state.json"), "w") as f:
        json.dump({"step": done, "seed": a.seed, "dim": a.dim, "loss": loss}, f)


def load(d, a):
    with open(os.path.join(d, "state.json")) as f:
        st = json.load(f)
    if (st["seed"], st["dim"]) != (a.seed, a.dim):
        raise SystemExit("checkpoint %s was made with seed %s dim %s, not seed %s dim %s"
                         % (d, st["seed"], st["dim"], a.seed, a.dim))
    with open(os.path.join(d, "params.bin"), "rb") as f:
        vals = list(struct.unpack("<%dd" % (2 * a.dim), f.read()))
    return st["step"], vals[:a.dim], vals[a.dim:]


def main(argv=None) -> int:
    a = _opt(argv)
    ckpt = bool(os.environ.get("LAUNCHER_CKPT_ROOT"))
    if ckpt:
        jobside.install_preemption_handler()
        jobside.install_preemption_handler([signal.SIGTERM])
    else:
        print("train: LAUNCHER_CKPT_ROOT is not set: running without checkpoints", file=sys.stderr)

    w, m, done = [0.0] * a.dim, [0.0] * a.dim, 0
    with jobside.restore() as d:
        if d:
            done, w, m = load(d, a)
            expect = jobside.resume_step()
            if expect >= 0 and expect != done:
                raise SystemExit("checkpoint %s holds step %d, LAUNCHER_RESUME_STEP says %d" % (d, done, expect))
            print("train: resumed from %s at step %d (generation %s)"
                  % (jobside.resume_from(), done, os.environ.get("LAUNCHER_GENERATION")), flush=True)
    w_true = target(a.seed, a.dim)
    saved = done
    loss = None
    try:
        while done < a.steps:
            loss = train_step(w, m, w_true, a.seed, done)
            done += 1
            print("step %d loss %.6g" % (done, loss), flush=True)
            if ckpt and (done % a.every == 0 or done == a.steps or jobside.preemption_requested()):
                with jobside.save(done) as d:
                    save(d, done, w, m, a, loss)
                saved = done
                jobside.report(done, loss=loss, flops=step_flops(a.dim))
            if ckpt and jobside.preemption_requested():
                print("train: preemption notice: saved step %d, exiting %d" % (saved, jobside.EXIT_PREEMPTED),
                      flush=True)
                return jobside.EXIT_PREEMPTED
            if a.sleep:
                time.sleep(a.sleep)
    except Superseded as e:
        print("train: %s" % e, file=sys.stderr, flush=True)
        jobside.stand_down()  # a zombie stops writing; under Slurm it waits to be cleaned up
        return EXIT_SUPERSEDED
    digest = hashlib.sha256(pack(w, m)).hexdigest()
    with open(a.result + ".tmp", "w") as f:
        json.dump({"sha256": digest, "steps": done}, f)
    os.replace(a.result + ".tmp", a.result)
    print("RESULT %s steps=%d" % (digest, done), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
