"""Metrics a job reports (``launcher.jobside.report``), stored under its checkpoint root.

Layout: ``ROOT/.launcher/metrics/g<G>.jsonl``, one file per generation (one start of the
job), one JSON line per report, in the order they were made::

    {"step": 300, "metrics": {"loss": 0.41, "acc": 0.87}, "generation": 3, "at": "ISO-8601"}

The job side keeps its generation's lines and rewrites the whole file atomically on
every report (a PUT on S3, temp file + rename on POSIX): a reader never sees a torn
line, and a report that could not be stored is written with the next one.

Reading merges every generation into {step: {metric: value}}: for each step and metric
the value reported last wins (later generations after earlier ones, later lines after
earlier ones). Reports of a lost timeline are dropped by the rules checkpoints follow
(``Generations.stale_cause``): a superseded generation's reports above the step a later
generation resumed from (a stale fork), and every report of a run that a ``--fresh``
launch started over.

Stdlib only, like the rest of ``launcher.checkpoint``: the job side packs it.
"""

from __future__ import annotations

import json
import math
import numbers
import re

from launcher.checkpoint.contract import META_DIR, MAX_MANIFEST_BYTES, read_generations
from launcher.checkpoint.store import open_store

METRICS_DIR = META_DIR + "/metrics"
MAX_METRICS_BYTES = MAX_MANIFEST_BYTES  # per generation file; the writer refuses to grow past it
MAX_NAME = 128
_NAME_FILE = re.compile(r"^g(\d+)\.jsonl$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# metrics with a meaning to the launcher: the model FLOPs and the tokens of ONE step (launcher report's MFU)
COUNTS = ("flops", "tokens")


def metrics_key(generation: int) -> str:
    return "%s/g%d.jsonl" % (METRICS_DIR, int(generation))


# ---------------------------------------------------------------- validation (job side)
def check_step(step) -> int:
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        raise ValueError("report: step must be an int >= 0, got %r (%s)" % (step, type(step).__name__))
    if int(step) < 0:
        raise ValueError("report: step must be an int >= 0, got %d" % int(step))
    return int(step)


def check_value(name, value):
    """VALUE as a plain int or float; ValueError unless it is a finite real number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError("report: metric %r must be a finite number, got %r (%s)"
                         % (name, value, type(value).__name__))
    v = int(value) if isinstance(value, numbers.Integral) else float(value)
    try:
        finite = math.isfinite(v)
    except OverflowError:  # an int no float can hold: it would rank as +-inf
        finite = False
    if not finite:
        shown = ("an integer of %d bits" % v.bit_length()) if isinstance(v, int) else repr(v)
        raise ValueError("report: metric %r must be a finite number (within a float's range), got %s"
                         % (name, shown))
    return v


def check_name(name) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or _CONTROL.search(name):
        raise ValueError("report: metric name %r must be 1 to %d characters without control characters"
                         % (name, MAX_NAME))
    return name


def check_report(step, metrics) -> tuple:
    """(step, {name: value}) validated: step an int >= 0, at least one metric, every value a
    finite int or float (bool, None, NaN, inf, strings and tensors are refused: pass
    ``t.item()``). ValueError naming the metric otherwise."""
    step = check_step(step)
    if not metrics:
        raise ValueError("report: no metric given: report(step, loss=0.3)")
    values = {check_name(k): check_value(k, v) for k, v in metrics.items()}
    for k in COUNTS:
        if k in values and values[k] < 0:
            raise ValueError("report: %s is a count (the model FLOPs or tokens of one step), got %r" % (k, values[k]))
    return step, values


def encode_report(step: int, metrics: dict, generation: int, at: str) -> bytes:
    doc = {"step": step, "metrics": metrics, "generation": generation, "at": at}
    return (json.dumps(doc, sort_keys=True, allow_nan=False) + "\n").encode()


# ---------------------------------------------------------------- parsing (launcher side)
def _parse_line(line: str):
    doc = json.loads(line)
    if not isinstance(doc, dict) or not isinstance(doc.get("metrics"), dict):
        raise ValueError("not a report object")
    step, metrics = check_report(doc.get("step"), doc["metrics"])
    return step, metrics


def parse_reports(data: bytes, where: str = "metrics") -> tuple:
    """([(step, {metric: value}), ...] in file order, [problem, ...]) from one generation's
    file. A line that is not a valid report is skipped and named in the problems."""
    reports, problems = [], []
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            reports.append(_parse_line(line))
        except ValueError as e:  # json.JSONDecodeError is a ValueError
            problems.append("%s line %d: %s" % (where, n, e))
    return reports, problems


def merge_reports(by_generation: dict, gens=None) -> dict:
    """{step: {metric: value}}, steps ascending, from {generation: [(step, metrics), ...]}:
    the last value reported for each (step, metric) wins, generations in ascending order.
    With GENS (a Generations), reports of a stale fork or of a run started over are dropped."""
    merged = {}
    for gen in sorted(by_generation):
        for step, metrics in by_generation[gen]:
            if gens is not None and gens.stale_cause(step, gen)[0] is not None:
                continue
            merged.setdefault(step, {}).update(metrics)
    return {s: merged[s] for s in sorted(merged)}


# ---------------------------------------------------------------- reading a root
def read_reports(store) -> tuple:
    """({generation: [(step, metrics), ...]}, [problem, ...]) of every metrics file under
    the store's root."""
    by_gen, problems = {}, []
    for rel in sorted(store.list_tree(METRICS_DIR)):
        m = _NAME_FILE.match(rel)
        if not m:
            continue
        raw, _ = store.read("%s/%s" % (METRICS_DIR, rel), limit=MAX_METRICS_BYTES)
        if raw is None:  # removed between the listing and the read
            continue
        by_gen[int(m.group(1))], bad = parse_reports(raw, store.url("%s/%s" % (METRICS_DIR, rel)))
        problems += bad
    return by_gen, problems


def read_metrics(root) -> dict:
    """{step: {metric: value}} every generation of the job under ROOT (a path, an s3:// URL,
    or a store) reported, stale forks and started-over runs dropped (see the module
    docstring). {} when nothing was reported."""
    store = open_store(root) if isinstance(root, str) else root
    by_gen, _ = read_reports(store)
    if not by_gen:
        return {}
    return merge_reports(by_gen, read_generations(store))
