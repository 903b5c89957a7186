"""``report(step, **metrics)``: a program's metrics, stored under its checkpoint root.

Stdlib only (see ``launcher.jobside``); works on every backend and on POSIX and s3://
roots, because it writes where checkpoints go (layout: ``launcher.checkpoint.metrics``).
The launcher reads them back with ``launcher.checkpoint.metrics.read_metrics(ROOT)``
(sweep early stopping ranks elements by them).
"""

from __future__ import annotations

import sys

from launcher.checkpoint.contract import now_iso
from launcher.checkpoint.metrics import MAX_METRICS_BYTES, check_report, encode_report, metrics_key

from launcher.jobside.heartbeat import auto_heartbeat
from launcher.jobside.env import PROG, ckpt_root, generation as _current_generation, store_for

_FILES = {}  # (root, generation) -> {"lines": stored lines (None: not read yet), "pending": not yet stored}


def report(step, /, **metrics) -> bool:
    """Record METRICS (name=finite number) for STEP (an int >= 0) under
    $LAUNCHER_CKPT_ROOT/.launcher/metrics/g<G>.jsonl, G = $LAUNCHER_GENERATION.

    ValueError for a bad step or value (bool, None, NaN, inf, a string or a tensor: pass
    ``loss.item()``), before anything is written; CheckpointError without a checkpoint
    root. Storing is advisory: when it fails (a full disk, S3 unreachable) a warning goes
    to stderr, False is returned, and the report is stored with the next one. Call it
    from one process at a time per job start (rank 0): every call rewrites this
    generation's file (one PUT on S3), so report every few steps, not on every
    micro-batch. Reporting a step again overrides its earlier values, metric by metric.

    Two names mean something to the launcher: ``flops`` (the model FLOPs of ONE step, the
    whole global batch over every rank) and ``tokens`` (the tokens of one step, turned into
    FLOPs by the spec's ``model.flops_per_token``); a report stands for the steps since the
    previous one. ``launcher report`` divides them by the accelerators' peak for MFU
    (docs/mfu.md). Both must be >= 0."""
    step, values = check_report(step, metrics)
    auto_heartbeat()  # a reporting process is one a hang is judged by: its stacks can be asked for
    store = store_for(ckpt_root())
    gen = _current_generation(store)
    key = metrics_key(gen)
    f = _FILES.setdefault((store.root, gen), {"lines": None, "pending": []})
    line = encode_report(step, values, gen, now_iso())
    size = sum(len(x) for x in (f["lines"] or []) + f["pending"]) + len(line)
    if size > MAX_METRICS_BYTES:
        raise ValueError("report: %s would grow past %d bytes: report less often" % (store.url(key), MAX_METRICS_BYTES))
    f["pending"].append(line)
    try:
        if f["lines"] is None:
            f["lines"] = _stored_lines(store, key)  # an earlier process of this start: continue its file
        store.put(key, b"".join(f["lines"] + f["pending"]))
    except Exception as e:  # advisory: never end a training run over a metric
        print("%s: warning: could not store the report of step %d under %s (kept for the next report): %s: %s"
              % (PROG, step, store.url(key), type(e).__name__, e), file=sys.stderr, flush=True)
        return False
    f["lines"] += f["pending"]
    f["pending"] = []
    return True


def _stored_lines(store, key) -> list:
    raw, _ = store.read(key, limit=MAX_METRICS_BYTES)
    return [ln + b"\n" for ln in (raw or b"").split(b"\n") if ln.strip()]
