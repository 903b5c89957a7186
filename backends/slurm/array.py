"""A sweep on Slurm: one job array. Pure: no I/O, no clock.

The whole sweep is ONE ``sbatch --array=0-(N-1)%max_parallel`` with one dedupe token. Each
element's variables (``launcher.spec.sweep_elements.element_env``: its index, parameters, seed and
checkpoint root) are in a sweep table staged beside the script (``Request.files``): one
``export`` line per element, every value quoted for bash (``line_quote``), so a value holding
``$(...)``, quotes or newlines arrives in the element's environment literally. The script
reads only its own line (``sed``: a task of a 10,000-element sweep does not parse the whole
table), checks that it is an export line for its index, and evaluates it.

Inside an array task, ``$SLURM_JOB_ID`` of one task equals the array's own id, and
``scancel``/``scontrol requeue`` of that id act on the WHOLE array: the script's own
commands (notice forwarding, requeue, the restarted-elsewhere check) name the element as
``<array id>_<index>`` instead (``SELF_REF``).
"""

from __future__ import annotations

import shlex

from launcher.backend.protocols import Facts, JobRef
from launcher.core.errors import CapabilityError
from launcher.spec.model import JobSpec
from launcher.spec.sweep_elements import element_env, elements, sweep_seed_of
from launcher.backend.templating import comment_text

TABLE_NAME = "sweep.sh"
SELF_REF = '"$SLURM_JOB_ID"'  # how a plain job's script names its own job
ELEMENT_SELF_REF = '"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"'  # an array task's own element
LOG_PATTERN = "slurm-%j.out"
ELEMENT_LOG_PATTERN = "slurm-%A_%a.out"  # slurm-<array id>_<index>.out: one log per element


def max_array_size(facts: Facts):
    """The probed MaxArraySize (array indices go up to MaxArraySize - 1), None if not probed."""
    v = facts.get("max_array_size")
    return int(v) if v not in (None, "") else None


def array_directive(spec: JobSpec, facts: Facts, only=None) -> str:
    """``--array=0-(N-1)[%max_parallel]``, checked against the cluster's MaxArraySize; with
    ONLY (indices), ``--array=3`` or ``--array=1,4``: just those elements of the same table."""
    n = spec.sweep.size
    if only:
        return "--array=" + ",".join(str(int(i)) for i in sorted(set(only)))
    cap = max_array_size(facts)
    if cap is not None and n > cap:
        cluster = facts.get("cluster") or facts.target
        raise CapabilityError(
            f"sweep has {n:,} elements but cluster {cluster} allows job arrays of at most {cap:,} "
            f"(MaxArraySize={cap}: indices 0-{cap - 1}): split the sweep into sweeps of at most {cap:,} "
            f"elements, or ask the administrators to raise MaxArraySize")
    spec_range = f"0-{n - 1}" if n > 1 else "0"
    p = spec.sweep.max_parallel
    return f"--array={spec_range}" + (f"%{min(p, n)}" if p else "")


def line_quote(value: str) -> str:
    """VALUE as one bash word on one line: ``shlex.quote`` unless it holds a line break, which
    becomes ANSI-C quoting (``$'first\\nsecond'``), where only backslash escapes are special."""
    if "\n" not in value and "\r" not in value:
        return shlex.quote(value)
    out = []
    for ch in value:
        if ch in _ANSI_C:
            out.append(_ANSI_C[ch])
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


_ANSI_C = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def sweep_table(spec: JobSpec, job: JobRef) -> str:
    """The sweep table: after one comment line, line 2 + i holds element i's variables as one
    ``export`` line (so a task reads only its own line, whatever the sweep's size): in
    ``element_env``'s order, each variable as NAME=<line_quote(value)>."""
    els = elements(spec.sweep)
    seed = sweep_seed_of(spec, job.seed)
    sweep_id = job.sweep_id or job.job_id
    lines = [f"# launcher sweep table of {comment_text(sweep_id)}: {len(els)} elements; line 2 + i exports "
             f"element i's variables (bash, every value quoted)"]
    extra = {i: dict(pairs) for i, pairs in job.element_env}  # e.g. each element's tracker run
    for e in els:
        env = {**element_env(sweep_id, e, len(els), seed, spec.checkpoint.root), **extra.get(e.index, {})}
        lines.append("export " + " ".join(f"{name}={line_quote(value)}" for name, value in env.items()))
    return "\n".join(lines) + "\n"


def sweep_context(spec: JobSpec, job: JobRef) -> tuple[dict, tuple]:
    """(what the template's sweep block needs, the files staged beside the script)."""
    table = sweep_table(spec, job)
    ctx = {"table": f"{job.job_dir}/{TABLE_NAME}", "size": spec.sweep.size,
           "max_parallel": spec.sweep.max_parallel}
    return ctx, ((TABLE_NAME, table),)


def task_ids(spec_text: str) -> list[int]:
    """Slurm's ArrayTaskId of one record as indices: ``3``, ``4-11%3``, ``1,3,5-7``, ``0-10:2``."""
    out: list[int] = []
    for part in spec_text.split("%")[0].split(","):
        part = part.strip()
        if not part:
            continue
        rng, _, step = part.partition(":")
        lo, _, hi = rng.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()) or (step and not step.isdigit()):
            continue
        out.extend(range(int(lo), int(hi or lo) + 1, int(step or 1) or 1))
    return out


def with_array_tasks(live: dict) -> dict:
    """``scontrol -o show job`` records keyed by job id, plus every array task under
    ``<array id>_<index>``: a started task has its own record (ArrayTaskId=3), while the
    tasks still pending share the array's one record (ArrayTaskId=4-11%3), which then
    stands for each of them."""
    out = dict(live)
    for fields in live.values():
        array, tasks = fields.get("ArrayJobId"), fields.get("ArrayTaskId")
        if not array or not tasks or tasks in ("N/A", "(null)"):
            continue
        for i in task_ids(tasks):
            out.setdefault(f"{array}_{i}", fields)
    return out
