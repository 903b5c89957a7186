"""Starting a generation (what every start of a job does, inside the job) and the
per-generation record ``ROOT/.launcher/attempts/g<G>.json``.

The record is advisory (a later report reads it): it is written with a plain overwrite,
by the process that started the generation and then by the process that commits::

    {"generation": G, "job_id": ..., "host": ..., "pid": ..., "started": ISO,
     "resume_step": N or -1, "resume_from": path or null, "resume_seconds": s,
     "scheduler": {VAR: value for VAR in $LAUNCHER_SCHEDULER_VARS, LAUNCHER_JOB_ID},
     "preempt_signal_at": ISO or null, "seed": $LAUNCHER_SEED or null,
     "node": {"hostname", "python", "python_executable", "platform", "cpus",
              "gpu": {"present", "driver_version", "cuda_version", "gpus": [...]} ,
              "nccl": {"version", "source"} or null, "torch": version or null,
              "packages_sha256", "package_count", "seconds"},
     "saves": [{"step", "start", "end", "seconds", "write_seconds", "commit_seconds",
                "bytes", "files", "committed", "preempt", "error"}]}

``node`` is what only the node knows (``node_facts``): every probe is bounded by a
timeout and any failure leaves its field null. ``LAUNCHER_NODE_FACTS=0`` skips the
GPU/NCCL probes.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import re
import shutil
import socket
import subprocess
import sys
import time

from launcher.checkpoint.contract import GENERATIONS, attempt_key, bump_generation, now_iso, read_generations
from launcher.checkpoint.discovery import latest
from launcher.checkpoint.errors import CheckpointError, Conflict


def _scheduler_vars() -> dict:
    """The scheduler's variables of this start, as the backend's job script names them
    (``LAUNCHER_SCHEDULER_VARS``, space-separated), and ``LAUNCHER_JOB_ID``."""
    names = os.environ.get("LAUNCHER_SCHEDULER_VARS", "").split() + ["LAUNCHER_JOB_ID"]
    return {k: os.environ[k] for k in dict.fromkeys(names) if k in os.environ}


def read_attempt(store, generation: int):
    raw, _ = store.read(attempt_key(generation))
    if raw is None:
        return None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def write_attempt(store, generation: int, doc: dict) -> None:
    store.put(attempt_key(generation), (json.dumps(doc, indent=1) + "\n").encode())


# ---------------------------------------------------------------- node facts
def _nvidia_smi(timeout=15.0):
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {"present": False}
    out = {"present": True, "driver_version": None, "cuda_version": None, "gpus": [], "error": None}
    try:
        p = subprocess.run([exe], capture_output=True, timeout=timeout)
        head = p.stdout.decode("utf-8", "replace")
        m = re.search(r"Driver Version:\s*([0-9][0-9.]*)", head)
        out["driver_version"] = m.group(1) if m else None
        m = re.search(r"CUDA Version:\s*([0-9][0-9.]*)", head)
        out["cuda_version"] = m.group(1) if m else None
        p = subprocess.run([exe, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                           capture_output=True, timeout=timeout)
        if p.returncode == 0:
            for line in p.stdout.decode("utf-8", "replace").splitlines():
                parts = [x.strip() for x in line.split(",")]
                if len(parts) >= 2 and parts[0]:
                    out["gpus"].append({"name": parts[0], "memory": parts[1]})
                    if not out["driver_version"] and len(parts) >= 3:
                        out["driver_version"] = parts[2]
        elif not out["driver_version"]:
            out["error"] = (p.stderr.decode("utf-8", "replace").strip() or "nvidia-smi exit %d" % p.returncode)[:300]
    except (OSError, subprocess.SubprocessError) as e:
        out["error"] = "%s: %s" % (type(e).__name__, e)
    return out


def _dist_versions():
    """{canonical name: version} of the distributions this interpreter sees."""
    try:
        from importlib import metadata  # guarded: the job side may run on a Python without it
    except ImportError:  # Python < 3.8
        return {}
    out = {}
    for d in metadata.distributions():
        try:
            name = d.metadata["Name"]
        except Exception:
            continue
        if name:
            out.setdefault(re.sub(r"[-_.]+", "-", name).lower(), d.version)
    return out


def _nccl(dists, timeout=60.0):
    """NCCL's version: from the nvidia-nccl-cu* wheel torch depends on (no import), else by
    asking torch in a child process (bounded); None when there is no NCCL to ask."""
    for name in sorted(dists):
        if name.startswith("nvidia-nccl-cu"):
            return {"version": dists[name], "source": name}
    if "torch" not in dists:
        return None
    if "+cpu" in dists["torch"]:  # a CPU build of torch (2.13.0+cpu) has no NCCL: not worth seconds of import
        return None
    code = ("import torch\nv = torch.cuda.nccl.version()\n"
            "print('.'.join(map(str, v)) if isinstance(v, tuple) else v)")
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=timeout)
        v = p.stdout.decode("utf-8", "replace").strip().splitlines()
        if p.returncode == 0 and v and v[-1] not in ("", "None"):
            return {"version": v[-1], "source": "torch.cuda.nccl.version()"}
        return {"version": None, "source": "torch", "error": (p.stderr.decode("utf-8", "replace").strip()
                                                              .splitlines() or ["exit %d" % p.returncode])[-1][:300]}
    except (OSError, subprocess.SubprocessError) as e:
        return {"version": None, "source": "torch", "error": "%s: %s" % (type(e).__name__, e)}


def node_facts(probe_gpu=None):
    """What only the node knows, for the attempt record. Never raises."""
    t0 = time.monotonic()
    out = {"hostname": None}
    try:
        out.update(hostname=socket.gethostname(), python=platform.python_version(),
                   python_executable=sys.executable, platform=platform.platform(), cpus=os.cpu_count())
    except Exception as e:
        out["error"] = "%s: %s" % (type(e).__name__, e)
    if probe_gpu is None:
        probe_gpu = os.environ.get("LAUNCHER_NODE_FACTS", "1").strip().lower() not in ("0", "false", "no")
    try:
        dists = _dist_versions()
        pkgs = ["%s==%s" % (k, dists[k]) for k in sorted(dists)]
        out["packages_sha256"] = hashlib.sha256(("\n".join(pkgs) + "\n").encode()).hexdigest()
        out["package_count"] = len(pkgs)
        out["torch"] = dists.get("torch")
    except Exception as e:
        dists = {}
        out["packages_error"] = "%s: %s" % (type(e).__name__, e)
    if probe_gpu:
        try:
            out["gpu"] = _nvidia_smi()
        except Exception as e:
            out["gpu"] = {"present": None, "error": "%s: %s" % (type(e).__name__, e)}
        try:
            out["nccl"] = _nccl(dists)
        except Exception as e:
            out["nccl"] = {"version": None, "error": "%s: %s" % (type(e).__name__, e)}
    out["seconds"] = round(time.monotonic() - t0, 6)
    return out


def starts_over(gens, job_id, fresh) -> bool:
    """A job launched with --fresh starts over at its first start only: when no generation
    of JOB_ID is recorded yet. Its later starts (requeues, resubmissions) resume its own
    checkpoints."""
    if not fresh:
        return False
    if not job_id:
        raise CheckpointError("a fresh start needs the job id (LAUNCHER_JOB_ID) to tell its first start "
                              "from a restart")
    return not any(h.get("job_id") == job_id for h in gens.history)


def start_generation(store, job_id=None, hint=None, verify=False, tries: int = 50, fresh=False, resolver=None,
                     extra=None):
    """Resolve the latest committed checkpoint and start a new generation resuming from it,
    atomically with respect to other starts (compare-and-swap on GENERATIONS.json; the
    checkpoint is re-resolved on every retry so the recorded resume step is the one seen
    by the winning write).

    FRESH (the job was launched with --fresh): the job's first start (``starts_over``)
    resumes from nothing and records ``"fresh": true`` above every existing generation,
    which makes every older checkpoint stale (kept, never resumed from).

    RESOLVER(store, gens, verify, log, seen): what to resume from instead of ``latest`` (the
    multi-tier ``launcher.checkpoint.tier_resume.resolve``); its answer's ``tier`` is recorded as
    ``resume_tier`` in GENERATIONS.json and in the attempt record.

    EXTRA: more fields for both records (an in-job restart's ``in_job``, launcher.jobside.injob).

    Returns (Generations after the bump, Entry or None, [Entry looked at on the way])."""
    t0 = time.monotonic()
    store.check_root(create=True)
    last = None
    for _ in range(max(1, tries)):
        gens = read_generations(store)
        log, seen = [], {}
        if resolver is None:
            found = latest(store, verify=verify, gens=gens, log=log, seen=seen)
        else:
            found = resolver(store, gens, verify, log, seen)
        over = starts_over(gens, job_id, fresh)
        if over:
            found, log = None, []
        tier = getattr(found, "tier", None) if resolver is not None else None
        if resolver is not None and found is None:
            tier = "fresh"
        try:
            new = bump_generation(store, gens, found, job_id=job_id, hint=hint,
                                  min_generation=seen.get("max_generation", -1) + 1,
                                  extra={**({"fresh": True} if over else {}),
                                         **({"attempt": int(hint)} if hint is not None else {}),
                                         **({"resume_tier": tier} if tier else {}),
                                         **(extra or {})} or None)
        except Conflict as e:
            last = e
            time.sleep(random.uniform(0.01, 0.1))
            continue
        rec = {"generation": new.generation, "job_id": job_id, "host": socket.gethostname(),
               "pid": os.getpid(), "started": now_iso(),
               "resume_step": found.step if found else -1, "resume_from": found.path if found else None,
               "resume_seconds": round(time.monotonic() - t0, 6),
               **({"resume_tier": tier} if tier else {}),
               "scheduler": _scheduler_vars(),
               "preempt_signal_at": None, "seed": os.environ.get("LAUNCHER_SEED") or None, "saves": [],
               **(extra or {})}
        rec["node"] = node_facts()  # after "started": the probes (nvidia-smi ...) are not resume time
        try:
            write_attempt(store, new.generation, rec)
        except Exception:  # advisory only: never fail a start over it
            pass
        return new, found, log
    raise CheckpointError("%s: could not start a new generation: %d concurrent updates of GENERATIONS.json "
                          "(%s)" % (store.root, tries, last))


def record_rejoin(store, generation: int, entry: dict, tries: int = 50) -> list:
    """Record a restart inside GENERATION's run that starts no new generation: one replica group
    restarted in the allocation that rejoined the groups that kept training (recovery.in_job kind
    torchft), or the ranks restarted inside their processes (NVRx, ``kind: in_process``). ENTRY
    (its kind, group, restart number, exit, failed_at) is appended to ``rejoins`` of GENERATION's
    record in GENERATIONS.json, compare-and-swap as a start is, once per (kind, group, restart).
    No new generation: the run goes on writing under GENERATION. Returns the record's
    ``rejoins`` after the write."""
    last = None
    for _ in range(max(1, tries)):
        gens = read_generations(store)
        rec = gens.record(generation)
        if rec is None:
            raise CheckpointError("%s: generation %s is not in GENERATIONS.json: cannot record a replica group's "
                                  "rejoin" % (store.root, generation))
        rejoins = [r for r in rec.get("rejoins") or [] if isinstance(r, dict)]
        key = (entry.get("kind"), entry.get("group"), entry.get("restart"))
        if any((r.get("kind"), r.get("group"), r.get("restart")) == key for r in rejoins):
            return rejoins  # recorded already (a caller asked twice)
        rejoins.append(entry)
        history = [dict(h, rejoins=rejoins) if h is rec else h for h in gens.history]
        doc = dict(gens.to_doc(), history=history)
        try:
            store.put_if_match(GENERATIONS, (json.dumps(doc, indent=1) + "\n").encode(), gens.token)
            return rejoins
        except Conflict as e:
            last = e
            time.sleep(random.uniform(0.01, 0.1))
    raise CheckpointError("%s: could not record a rejoin: %d concurrent updates of GENERATIONS.json (%s)"
                          % (store.root, tries, last))
