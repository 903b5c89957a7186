"""JobSpec -> SkyPilot task YAML. Pure: no SkyPilot import, no I/O, no clock.

What the task carries, and why:
- ``name`` is the dedupe token in a form SkyPilot accepts (see names.py).
- ``resources``: accelerators as ``H100:8``, ``cpus``/``memory`` as at-least values
  (``64+``), disk in GB, ``image_id: docker:...``; one placement inline, several as
  ``ordered:`` (the planner's ranking, else the target's own placement and fallbacks).
- ``envs``: the static part of the launcher's job contract plus the spec's env. The
  per-node part (LAUNCHER_NODE_RANK, MASTER_ADDR) only exists at run time, so ``run``
  derives it from SKYPILOT_NODE_RANK / SKYPILOT_NODE_IPS.
- ``secrets``: names only, with null values. SkyPilot 0.14 treats a null secret as
  "resolved at launch", which is what submit does from the launcher's environment, in
  memory: no value is ever written into the task text.
- ``run`` claims the attempt's start on the head node, then resolves the resume point at
  every start (SkyPilot reruns ``run`` after every recovery) through the job-side helper,
  before the job's own command.

The start claim (``launcher.jobside.startclaim``): a second launch of the same attempt (a
watcher paused past its claim that submitted anyway) goes to the same cluster, because the
cluster is named from the attempt. SkyPilot queues it there as a second job of the same
name. Its ``run`` finds the claim file in ``~/.launcher/starts/<job>/attempt-N.start``
on node 0 held by another ``$SKYPILOT_TASK_ID`` and stands down (exit 3) before any user
code. On several nodes, node 0 claims and the others wait for its answer (handoff.py),
so a copy that stood down runs nothing anywhere. Which job of the cluster the launcher
follows is ``states.attempt_job``.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from typing import Optional, Sequence

import yaml

from launcher.backend.protocols import JobRef
from launcher.core.errors import CapabilityError
from launcher.spec.model import JobSpec

from launcher_backends.skypilot.limits import task_limits
from launcher_backends.skypilot.names import cluster_name, task_name
from launcher_backends.skypilot.options import Placement, SkyPilotSection

CKPT_MOUNT = "/launcher-ckpt"  # where an s3:// checkpoint bucket is mounted on every node
# Staged by submit into the job dir on the submit host, copied by SkyPilot to every node:
HELPER_NAME = "launcher_job.pyz"  # the job-side helper zipapp (launcher.backend.staging)
HANDOFF_NAME = "skypilot_handoff.py"  # node 0 -> other nodes hand-off of the resume point (handoff.py)
REMOTE_DIR = "~/.launcher"
STARTS_DIR = "$HOME/.launcher/starts/$LAUNCHER_JOB_ID"  # on node 0: this job's start claims (startclaim)
MASTER_PORT = "29500"
GIB = 1024 ** 3


@dataclass(frozen=True)
class RenderOptions:
    """The target settings that shape the task (the rest of the target only matters at submit)."""

    cluster_name_prefix: str = "launcher"
    idle_minutes: int = 5
    autodown: bool = True
    mount_checkpoint_bucket: bool = True


def render_task(spec: JobSpec, job: JobRef, placements: Sequence[Placement], opts: RenderOptions) -> tuple[str, dict]:
    """Return (task YAML text, meta). Raises CapabilityError for what SkyPilot cannot express."""
    if not placements:
        raise CapabilityError("no placement to render: the target has no infra and the planner gave no candidates")
    for u in task_limits(spec):  # `launcher validate` reports the same (SkyPilotBackend.unsupported)
        raise CapabilityError(f"{u.field}: {u.why}; {u.instead}")
    managed = spec.section(SkyPilotSection).managed
    warnings = _warnings(spec)
    if spec.secrets:
        # Measured with SkyPilot 0.14.1: the API server pickles each launch request, task and
        # secret values included, into ~/.sky/api_server/requests.db; the launcher cannot stop it.
        warnings.append("SkyPilot's API server keeps each launch request, secret values included, in "
                        "~/.sky/api_server/requests.db until api_server.requests_retention_hours"
                        + ("; the managed-jobs controller also keeps the task in ~/.sky/managed_jobs/"
                           if managed else ""))
    task: dict = {"name": task_name(job.job_id, job.attempt)}
    if spec.workdir:
        task["workdir"] = _plain_workdir(spec.workdir)
    task["num_nodes"] = spec.resources.nodes
    task["resources"] = _resources(spec, placements, managed, opts)
    task["envs"] = _envs(spec, job, opts)
    if spec.secrets:
        task["secrets"] = {name: None for name in spec.secrets}
    mounts = _file_mounts(spec, job, opts)
    if mounts:
        task["file_mounts"] = mounts
    if spec.setup is not None:
        task["setup"] = shell_command(spec.setup)
    task["run"] = _run(spec, staged=bool(job.job_dir))
    meta = {
        "task_name": task["name"],
        "cluster_name": cluster_name(opts.cluster_name_prefix, job.job_id, job.attempt),
        "managed": managed,
        "secrets": list(spec.secrets),
        "placements": [p.model_dump(exclude_none=True) for p in placements],
        "num_nodes": spec.resources.nodes,
        "gpus_per_node": spec.resources.gpus_per_node,
        "accelerator": spec.resources.accelerator,
        "warnings": warnings,
        "stage": staged_files(spec, job),
    }
    return dump_yaml(task), meta


_PLAIN_PATH = re.compile(r"^[A-Za-z0-9_./+@,:=~ -]+$")


def _plain_workdir(workdir: str) -> str:
    """SkyPilot 0.14 puts the workdir into its rsync command line as a Python repr, which the
    shell reads as a double-quoted string when the path holds a quote: ``$(...)`` or a
    backtick in it would run on this machine. Only plain paths go to SkyPilot."""
    if not _PLAIN_PATH.match(workdir):
        raise CapabilityError(f"workdir {workdir!r} has characters SkyPilot cannot pass to rsync safely "
                              "(quotes, $, `, ;, ...): use a plain path (letters, digits, spaces and _ . / + @ , : = ~ -)")
    return workdir


def staged_files(spec: JobSpec, job: JobRef) -> list[str]:
    """Names of the files submit writes into the job dir before launching (render only names them)."""
    if not job.job_dir:
        return []
    return [HELPER_NAME] + ([HANDOFF_NAME] if _handoff(spec) else [])


def _handoff(spec: JobSpec) -> bool:
    """Several nodes: node 0 claims the start (and resolves the resume point), the others take its answer."""
    return spec.resources.nodes > 1


def shell_command(cmd) -> str:
    """A spec's run/setup: a string is a shell snippet as written; a list is argv, each word quoted."""
    if isinstance(cmd, str):
        return cmd
    return " ".join(shlex.quote(str(a)) for a in cmd)


def _warnings(spec: JobSpec) -> list[str]:
    out = []
    if spec.topology.max_switches or spec.topology.segment:
        out.append("topology constraints are Slurm-only; SkyPilot places the nodes itself")
    if spec.resources.time_limit:
        out.append("resources.time_limit is not enforced by SkyPilot; cost.max_total_usd still bounds the job")
    if spec.resources.tasks_per_node > 1:
        out.append("SkyPilot starts one `run` per node; start tasks_per_node processes yourself (torchrun)")
    if spec.checkpoint.root and spec.checkpoint.root.startswith("s3://"):
        out.append("the job-side helper reads s3:// checkpoint roots with boto3: have it in the image or setup")
    return out


def _resources(spec: JobSpec, placements: Sequence[Placement], managed: bool, opts: RenderOptions) -> dict:
    res = spec.resources
    common: dict = {}
    if res.gpus_per_node:  # with an accelerator name: task_limits
        common["accelerators"] = f"{res.accelerator}:{res.gpus_per_node}"
    if res.cpus_per_node:
        common["cpus"] = f"{res.cpus_per_node}+"
    if res.memory_per_node:
        common["memory"] = f"{_gib(res.memory_per_node)}+"
    if res.disk_per_node:
        common["disk_size"] = max(1, math.ceil(res.disk_per_node / GIB))
    if spec.image:
        common["image_id"] = spec.image if spec.image.startswith("docker:") else f"docker:{spec.image}"
    if spec.cost.max_hourly_usd:
        # SkyPilot's limit is per instance; the spec's is for the whole job.
        common["max_hourly_cost"] = round(spec.cost.max_hourly_usd / res.nodes, 4)
    if managed:
        common["job_recovery"] = _job_recovery(spec)
    elif opts.autodown:
        # Torn down after the job ends and this many minutes pass idle: long enough for the
        # launcher to read the final state off the cluster, short enough not to pay for much.
        common["autostop"] = {"idle_minutes": opts.idle_minutes, "down": True}
    places = [_placement(p) for p in placements]
    if len(places) == 1:
        return {**places[0], **common}
    return {**common, "ordered": places}


def _placement(p: Placement) -> dict:
    out: dict = {"infra": p.full_infra, "use_spot": p.use_spot}
    if p.instance_type:
        out["instance_type"] = p.instance_type
    return out


EXIT_CHECKPOINTED = 75  # the job-side contract's "checkpointed on a preemption notice, restart me"


def _job_recovery(spec: JobSpec) -> dict:
    """Delegated mode: SkyPilot recovers preemptions itself; user-code failures get the spec's
    app_error budget, and exit 75 (checkpointed on notice) always means "restart me"."""
    jr = spec.section(SkyPilotSection).job_recovery
    out: dict = {}
    if jr is not None and jr.strategy:
        out["strategy"] = jr.strategy
    out["max_restarts_on_errors"] = (jr.max_restarts_on_errors if jr is not None and jr.max_restarts_on_errors
                                     is not None else spec.recovery.app_error)
    codes = jr.recover_on_exit_codes if jr is not None and jr.recover_on_exit_codes is not None else []
    out["recover_on_exit_codes"] = sorted({EXIT_CHECKPOINTED, *codes})
    return out


def _gib(nbytes: int) -> str:
    gib = nbytes / GIB
    if gib == int(gib):
        return str(int(gib))
    return f"{math.ceil(gib * 100) / 100:g}"


def _ckpt_bucket(root: Optional[str]) -> tuple[Optional[str], str]:
    if not root or not root.startswith("s3://"):
        return None, ""
    bucket, _, prefix = root[len("s3://"):].partition("/")
    return bucket, prefix.strip("/")


def _envs(spec: JobSpec, job: JobRef, opts: RenderOptions) -> dict:
    env = {
        "LAUNCHER_JOB_ID": job.job_id,
        "LAUNCHER_JOB_NAME": spec.name,
        "LAUNCHER_BACKEND": "skypilot",
        # the generation: the resume helper below makes it exact across SkyPilot's own restarts
        "LAUNCHER_ATTEMPT": str(job.attempt),
        "LAUNCHER_NUM_NODES": str(spec.resources.nodes),
        "LAUNCHER_GPUS_PER_NODE": str(spec.resources.gpus_per_node),
        "LAUNCHER_TASKS_PER_NODE": str(spec.resources.tasks_per_node),
        "LAUNCHER_PREEMPT_SIGNAL": spec.recovery.signal,
        # what each start's attempt record keeps of SkyPilot (the job side names no scheduler)
        "LAUNCHER_SCHEDULER_VARS": "SKYPILOT_TASK_ID SKYPILOT_CLUSTER_INFO",
        "MASTER_PORT": MASTER_PORT,
    }
    root = spec.checkpoint.root
    if root:
        env["LAUNCHER_CKPT_ROOT"] = root
        env["LAUNCHER_CKPT_KEEP"] = str(spec.checkpoint.keep)
        if spec.checkpoint.local:  # multi-tier (launcher.checkpoint.tiers)
            env.update(LAUNCHER_CKPT_LOCAL=spec.checkpoint.local, LAUNCHER_CKPT_PEERS=str(spec.checkpoint.peers),
                       LAUNCHER_CKPT_DRAIN=spec.checkpoint.drain_mode)
        bucket, prefix = _ckpt_bucket(root)
        if bucket and opts.mount_checkpoint_bucket:
            env["LAUNCHER_CKPT_MOUNT"] = f"{CKPT_MOUNT}/{prefix}".rstrip("/")
    else:
        env["LAUNCHER_RESUME_FROM"] = ""
        env["LAUNCHER_RESUME_STEP"] = ""
    env.update(spec.env)  # the contract's names (LAUNCHER_*, MASTER_*) are reserved by the spec
    return env


def _file_mounts(spec: JobSpec, job: JobRef, opts: RenderOptions) -> dict:
    mounts: dict = {}
    bucket, _ = _ckpt_bucket(spec.checkpoint.root)
    if bucket and opts.mount_checkpoint_bucket:
        # MOUNT, not MOUNT_CACHED: cached mode uploads asynchronously and out of order, so a
        # manifest could land before the files it lists. Commits go through the s3:// API anyway.
        mounts[CKPT_MOUNT] = {"source": f"s3://{bucket}", "mode": "MOUNT"}
    for name in staged_files(spec, job):
        mounts[f"{REMOTE_DIR}/{name}"] = f"{job.job_dir.rstrip('/')}/{name}"
    return mounts


def _run(spec: JobSpec, staged: bool) -> str:
    lines = [
        "# launcher: the per-node part of the job contract. SkyPilot runs this section on every",
        "# node at every (re)start of the job, so it is derived here, not at submit time.",
        'export LAUNCHER_NODE_RANK="${SKYPILOT_NODE_RANK:-0}"',
        'MASTER_ADDR="$(printf \'%s\\n\' "${SKYPILOT_NODE_IPS:-127.0.0.1}" | head -n 1)"',
        "export MASTER_ADDR",
        "# this cluster job's own id: the holder of its attempt's start claim",
        'export LAUNCHER_SELF_ID="$SKYPILOT_TASK_ID"',
    ]
    if staged:
        lines += ["# programs import launcher.jobside from here where launcher is not installed on the nodes",
                  f'export LAUNCHER_JOB_PYZ="$HOME/{REMOTE_DIR[2:]}/{HELPER_NAME}"']
        helper = 'python3 "$LAUNCHER_JOB_PYZ"'
        handoff = f'python3 "$HOME/{REMOTE_DIR[2:]}/{HANDOFF_NAME}"'
    else:  # no job dir to stage from: the nodes must have the launcher installed
        helper = "python3 -m launcher.jobside"
        handoff = "python3 -m launcher_backends.skypilot.handoff"
    claim = f'{helper} start-claim --job-dir "{STARTS_DIR}" --attempt "$LAUNCHER_ATTEMPT"'
    resume = ""
    if spec.checkpoint.root:
        resume = (f'{helper} resume-env --root "$LAUNCHER_CKPT_ROOT" --job-id "$LAUNCHER_JOB_ID" '
                  f'--attempt-hint "$LAUNCHER_ATTEMPT"' + (" --verify" if spec.checkpoint.verify else ""))
    lines += ["# This attempt's start is claimed once, on node 0 (create-only, with this job's id): a second",
              "# launch of the same attempt onto this cluster stands down here (exit 3) before anything runs."]
    if resume:
        lines += ["# Resolve the latest committed checkpoint at every start (a new generation: LAUNCHER_GENERATION,",
                  "# LAUNCHER_RESUME_FROM, LAUNCHER_RESUME_STEP)."]
    if _handoff(spec):
        lines.append("# One start is one generation: node 0 claims and starts it, the other nodes get its answer.")
        first = f"{claim} && {resume}" if resume else claim
        lines += [
            f'if ! _launcher_start="$({handoff} --rank "$LAUNCHER_NODE_RANK" --nodes "$LAUNCHER_NUM_NODES" '
            f'--master "$MASTER_ADDR" --port "$((MASTER_PORT + 1))" -- sh -c {shlex.quote(first)})"; then',
            '  echo "launcher: node $LAUNCHER_NODE_RANK has no start: node 0 stood down (a second launch of this '
            'attempt) or could not resolve the checkpoint to resume from" >&2',
            "  exit 3",
            "fi",
            'eval "$_launcher_start"',
        ]
    else:
        lines.append(f"{claim} || exit $?")
        if resume:
            lines += [
                f'if ! _launcher_start="$({resume})"; then',
                '  echo "launcher: could not resolve the checkpoint to resume from (root $LAUNCHER_CKPT_ROOT)" >&2',
                "  exit 3",
                "fi",
                'eval "$_launcher_start"',
            ]
    if resume:
        lines.append('echo "launcher: attempt $LAUNCHER_ATTEMPT (checkpoint generation $LAUNCHER_GENERATION) '
                     'resuming from ${LAUNCHER_RESUME_FROM:-<fresh start>}" >&2')
    lines += ["# the job's own command", shell_command(spec.run)]
    return "\n".join(lines) + "\n"


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper, value: str):
    # Multi-line scripts read best as literal blocks; PyYAML falls back to quoting by itself
    # when a literal block cannot represent the value exactly.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(data: dict) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True,
                     width=1000)
