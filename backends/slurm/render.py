"""Spec + cluster facts -> sbatch script. Pure: no I/O, no clock.

Capabilities are checked here against the probed facts, with errors that name
the cluster and say what to use instead.
"""

from __future__ import annotations

import re
import shlex

from launcher.backend.protocols import Facts, JobRef, Request
from launcher.core.errors import CapabilityError
from launcher.spec.model import JobSpec
from launcher.backend.templating import contract_context, in_job_kind, render_template
from launcher.spec.units import format_mebibytes

from launcher_backends.slurm.array import ELEMENT_LOG_PATTERN, ELEMENT_SELF_REF, LOG_PATTERN, SELF_REF, array_directive, sweep_context
from launcher_backends.slurm.options import SlurmSection
from launcher_backends.slurm.states import parse_version
from launcher_backends.slurm.jobvars import ELEMENT_SCHEDULER_VARS, SCHEDULER_VARS
from launcher_backends.slurm.times import format_time

from launcher.backend.staging import HELPER_NAME  # noqa: E402  (re-exported for the backend)


def job_name(spec_name: str) -> str:
    """Slurm job names travel in directives and squeue columns: keep them plain."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", spec_name).strip("_")[:64] or "job"


def _version(facts: Facts) -> tuple:
    v = facts.get("slurm_version")
    return parse_version(v) if v else (0, 0, 0)


def _check_path(p: str, what: str) -> str:
    if any(ch in p for ch in "\n\r\"'\\") or re.search(r"\s", p):
        raise CapabilityError(f"{what} {p!r} contains whitespace or quotes, which #SBATCH lines cannot carry; "
                              f"set LAUNCHER_HOME (or the target's remote_dir) to a plain path")
    return p


def directives(spec: JobSpec, facts: Facts, job: JobRef, opts, job_dir: str) -> list[str]:
    s = spec.section(SlurmSection)
    cluster = facts.get("cluster") or facts.target
    d = [f"--job-name={job_name(spec.name)}", f"--comment={job.dedupe_token}"]
    d += _resource_directives(spec.resources, facts, cluster)
    d += _placement_directives(s, opts, facts, cluster, _excluded(spec, facts, job, opts, cluster))
    d += _topology_directives(spec.topology, facts, cluster, _layout_segment(spec, facts, cluster))
    d += ["--requeue", "--open-mode=append"]
    if _notice(spec):
        d.append(f"--signal=B:{spec.recovery.signal}@{spec.recovery.grace}")
    d.append(f"--output={job_dir}/{ELEMENT_LOG_PATTERN if spec.sweep else LOG_PATTERN}")
    if spec.sweep:
        d.append(array_directive(spec, facts, job.elements))
    if spec.image:
        _require_pyxis(spec.image, facts, cluster)
    d += list(s.extra)
    _require_printable(d)
    return d


def _resource_directives(r, facts: Facts, cluster: str) -> list[str]:
    """--nodes, --ntasks-per-node, --gres, --cpus-per-task, --mem, --time for spec.resources."""
    d = [f"--nodes={r.nodes}", f"--ntasks-per-node={r.tasks_per_node}"]
    if r.gpus_per_node:
        gtype = _gpu_type(r.accelerator, facts, cluster) if r.accelerator else ""
        d.append(f"--gres=gpu:{gtype + ':' if gtype else ''}{r.gpus_per_node}")
    if r.cpus_per_node:
        per_task = max(1, r.cpus_per_node // r.tasks_per_node)
        d.append(f"--cpus-per-task={per_task}")
    if r.memory_per_node:
        d.append(f"--mem={format_mebibytes(r.memory_per_node)}")
    if r.time_limit:
        d.append(f"--time={format_time(r.time_limit)}")
    return d


def _gpu_type(accelerator: str, facts: Facts, cluster: str) -> str:
    """The cluster's spelling of ``accelerator`` ("" when the cluster lists no GPU types)."""
    types = {t.lower(): t for t in facts.get("gpu_types", [])}
    gtype = types.get(accelerator.lower(), "")
    if types and not gtype:
        raise CapabilityError(
            f"cluster {cluster} has GPU types {sorted(types.values())}, not {accelerator}: "
            f"set resources.accelerator to one of them, or remove it to take any GPU")
    return gtype


def _excluded(spec: JobSpec, facts: Facts, job: JobRef, opts, cluster: str) -> str:
    """--exclude's value: the spec's, then the nodes quarantined on the target (``job.exclude_nodes``),
    once the partition is known to keep enough nodes for the job besides them."""
    s = spec.section(SlurmSection)
    if not job.exclude_nodes:
        return s.exclude or ""
    _check_enough_nodes(spec.resources.nodes, s.partition or opts.partition, job.exclude_nodes, facts, cluster,
                        job.job_id)
    return ",".join([*([s.exclude] if s.exclude else []), *job.exclude_nodes])


def partition_nodes(facts: Facts, partition) -> list:
    """The names of the nodes of PARTITION (None: the default partition, else every node) in the
    probed facts ([] when the facts list no nodes)."""
    if not partition:
        partition = next((p["name"] for p in facts.get("partitions", []) if p.get("default")), None)
    nodes = facts.get("nodes") or []
    return [n["name"] for n in nodes if partition is None or partition in n.get("partitions", [])]


def _check_enough_nodes(wanted: int, partition, excluded, facts: Facts, cluster: str, job_id: str) -> None:
    """A CapabilityError when the quarantined nodes EXCLUDED leave fewer than WANTED nodes in the
    job's partition (the facts' node list; nothing is said when the facts list no nodes)."""
    for node in excluded:  # they travel in an #SBATCH line: plain host names only
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", node):
            raise CapabilityError(f"quarantined node {node!r} is not a plain host name: an #SBATCH line cannot carry it")
    names = partition_nodes(facts, partition)
    if not names:
        return
    out = sorted(set(names) & set(excluded))
    left = len(names) - len(out)
    if left < wanted:
        where = f"partition {partition}" if partition else "the default partition"
        raise CapabilityError(
            f"job {job_id} asks for {wanted} node(s), and the quarantined nodes leave {left} of the {len(names)} "
            f"of {where} on cluster {cluster} (quarantined: {', '.join(out)}); not excluding them would put the "
            f"job on nodes that keep failing: see `launcher nodes`, and lift a quarantine with "
            f"`launcher nodes release NODE`")


def _placement_directives(s, opts, facts: Facts, cluster: str, exclude: str = "") -> list[str]:
    """--partition (checked against the cluster's partitions), --account, --qos, --constraint, ...
    EXCLUDE: --exclude's value (the spec's, and the nodes quarantined on the target)."""
    d = []
    partition = s.partition or opts.partition
    if partition:
        known = [p["name"] for p in facts.get("partitions", [])]
        if known and partition not in known:
            raise CapabilityError(f"partition '{partition}' does not exist on cluster {cluster} "
                                  f"(partitions: {', '.join(known)})")
        d.append(f"--partition={partition}")
    for key, val in (("account", s.account or opts.account), ("qos", s.qos or opts.qos),
                     ("constraint", s.constraint), ("exclude", exclude), ("reservation", s.reservation)):
        if val:
            d.append(f"--{key}={val}")
    return d


def _layout_segment(spec: JobSpec, facts: Facts, cluster: str):
    """The --segment that keeps layout.group_nodes inside blocks where the cluster has
    topology/block and the spec sets no segment (None: no directive); refuses a group the
    cluster's blocks or leaf switches cannot hold. The spec checked nodes and segment already."""
    n, nodes = spec.layout.group_nodes, spec.resources.nodes
    if not n or n == 1 or nodes == 1:
        return None
    plugin = facts.get("topology_plugin") or ""
    sizes = facts.get("topology_groups") or {}
    if "block" in plugin:
        bad = sorted({s for s in sizes.values() if s % n})
        if bad:
            raise CapabilityError(f"layout.group_nodes: {n} does not divide the block size {bad[0]} of cluster "
                                  f"{cluster} (topology/block): a group would span two blocks; use a group size "
                                  f"that divides {bad[0]}")
        if spec.topology.segment or spec.topology.max_switches or _version(facts) < (23, 11, 0):
            return None
        block = min(sizes.values()) if sizes else n
        # the largest multiple of N that fits a block and divides the job: fewest blocks, groups whole
        return max(s for s in range(n, min(block, nodes) + 1, n) if nodes % s == 0)
    if "tree" in plugin and sizes and n > max(sizes.values()):
        raise CapabilityError(f"layout.group_nodes: {n} is more than the {max(sizes.values())} nodes of the largest "
                              f"leaf switch of cluster {cluster} (topology/tree): a group cannot stay under one "
                              f"switch; use at most {max(sizes.values())}")
    return None


def _topology_directives(t, facts: Facts, cluster: str, layout_segment=None) -> list[str]:
    """--switches (needs topology/tree) and --segment (needs Slurm 23.11 and topology/block);
    LAYOUT_SEGMENT: the segment layout.group_nodes asks for where the spec sets none."""
    d = [f"--segment={layout_segment}"] if layout_segment else []
    if t.max_switches:
        if facts.get("topology_plugin") and "tree" not in facts.get("topology_plugin", ""):
            raise CapabilityError(f"cluster {cluster} has TopologyPlugin={facts.get('topology_plugin')}: "
                                  f"max_switches needs topology/tree" +
                                  ("; use topology.segment instead" if "block" in facts.get("topology_plugin", "")
                                   else "; remove topology.max_switches"))
        wait = f"@{format_time(t.switch_wait)}" if t.switch_wait else ""
        d.append(f"--switches={t.max_switches}{wait}")
    if t.segment:
        ver = _version(facts)
        if ver < (23, 11, 0) or "block" not in facts.get("topology_plugin", ""):
            why = (f"Slurm {facts.get('slurm_version')} has no --segment (added in 23.11)" if ver < (23, 11, 0)
                   else f"TopologyPlugin={facts.get('topology_plugin')}, not topology/block")
            raise CapabilityError(f"topology.segment is not available on cluster {cluster}: {why}; "
                                  f"use topology.max_switches (topology/tree) instead")
        d.append(f"--segment={t.segment}")
    return d


def _require_pyxis(image: str, facts: Facts, cluster: str) -> None:
    if not facts.get("pyxis"):
        raise CapabilityError(f"spec sets image={image!r} but cluster {cluster} has no pyxis "
                              f"(srun --container-image is missing): remove image or use a target with pyxis")


def _require_printable(d: list[str]) -> None:
    for item in d:  # the models refuse these already; a directive line must never end early
        if not item.isprintable():
            raise CapabilityError(f"sbatch option {item!r} has a newline or control character, which an "
                                  f"#SBATCH line cannot carry")


def hourly_usd(spec: JobSpec, opts):
    """The cluster's internal price of this job per hour (gpu_hour_usd x GPUs), if configured."""
    if opts.gpu_hour_usd is None or not spec.resources.gpus_per_node:
        return None
    return round(opts.gpu_hour_usd * spec.resources.gpus_per_node * spec.resources.nodes, 6)


def _notice(spec: JobSpec) -> bool:
    """A notice signal only helps a job that can commit a checkpoint; to any other
    program an unhandled SIGUSR1 is a kill, so it is not sent."""
    return bool(spec.checkpoint.root and spec.recovery.checkpoint_on_signal and spec.recovery.grace)


def render_sbatch(spec: JobSpec, facts: Facts, job: JobRef, opts, target_name: str) -> Request:
    job_dir = _check_path(job.job_dir, "job directory")
    python = opts.python
    helper_cmd = f"{shlex.quote(python)} {shlex.quote(job_dir + '/' + HELPER_NAME)}"
    # torchft and NVRx recover inside the step: a rank or replica group that ends early must not end the others
    # nvrx restarts ranks inside the step: a rank's exit must not end it. torchft runs a step per
    # replica group, and a group with a dead process is restarted whole (templates/_contract.sh.j2)
    srun_common = "--kill-on-bad-exit=0" if in_job_kind(spec) == "nvrx" else "--kill-on-bad-exit=1"
    if spec.image:
        srun_common += f" --container-image={shlex.quote(spec.image)} --container-mount-home"
    grace = spec.recovery.grace or 0
    sweep, files = sweep_context(spec, job) if spec.sweep else (None, ())
    ctx = {
        **contract_context(spec, job, helper_cmd),
        "directives": directives(spec, facts, job, opts, job_dir),
        "target": target_name,
        "srun_common": srun_common,
        "notice": _notice(spec),
        # keep a margin before the kill: Slurm delivers the notice up to ~30-60 s early
        "grace_wait": max(1, int(grace * 0.8)),
        # the job-side node order keeps groups of this many consecutive ranks inside blocks (nodeorder.py)
        "group_nodes": spec.layout.group_nodes or 1,
        "sweep": sweep,  # a sweep is one job array: each task reads its element's line of the table
        "self_ref": ELEMENT_SELF_REF if spec.sweep else SELF_REF,
        # what each start's attempt record keeps (jobvars.py)
        "scheduler_vars": ELEMENT_SCHEDULER_VARS if spec.sweep else SCHEDULER_VARS,
    }
    text = render_template("sbatch.sh.j2", c=ctx)
    return Request(backend="slurm", target=target_name, job=job, text=text, kind="script", files=files,
                   meta={"job_dir": job_dir, "secrets": list(spec.secrets),
                         "stage_helper": True, "hourly_usd": hourly_usd(spec, opts)})
