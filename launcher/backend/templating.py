"""Jinja rendering for job scripts.

Templates are looked up first in the directories of ``$LAUNCHER_TEMPLATES``
(colon-separated; sites put their overrides there), then in the built-in
``templates/`` folder, shipped in the wheel as the package ``launcher_templates``.
``StrictUndefined`` makes a missing variable an error, and the ``q`` filter quotes
every value that reaches a shell (``comment`` keeps a value shown in a ``#`` line on
that line). Values printed in messages go through ``printf '%s'`` with ``q``, never
inside a double-quoted string, where ``$(...)`` would run.
"""

from __future__ import annotations

import os
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Optional

import jinja2
import launcher_templates

from launcher.core.errors import template_error


def builtin_dir() -> Path:
    return Path(launcher_templates.__file__).resolve().parent


def shell_quote(value) -> str:
    if value is None:
        return "''"
    return shlex.quote(str(value))


def comment_text(value) -> str:
    """A value shown inside a ``#`` comment (or an #SBATCH line): one line, whatever it holds.
    Quoting does not help there, since a newline ends the comment and starts shell code, so
    every character that is not printable (newlines included) is shown escaped."""
    text = str(value)
    if text.isprintable():  # the common case, without a look at every character
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


@lru_cache(maxsize=8)
def _env(override: str) -> jinja2.Environment:
    dirs = [d for d in override.split(":") if d] + [str(builtin_dir())]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(dirs),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["q"] = shell_quote
    env.filters["comment"] = comment_text
    return env


def render_template(name: str, **context) -> str:
    try:
        return _env(os.environ.get("LAUNCHER_TEMPLATES", "")).get_template(name).render(**context)
    except jinja2.TemplateError as e:  # a site override with a syntax error or an unknown variable
        raise template_error(name, e) from None


def run_as_shell(cmd) -> str:
    """A spec's run/setup: a string is a shell snippet; a list is argv, each word quoted."""
    if cmd is None:
        return ""
    if isinstance(cmd, str):
        return cmd
    return " ".join(shlex.quote(str(a)) for a in cmd)


def contract_context(spec, job, helper_cmd: str) -> dict:
    """What every shell-based job script takes from the spec and the job: the names used by
    templates/_contract.sh.j2 and the backends' templates. Values are raw; templates quote."""
    return {
        "job_id": job.job_id,
        "dedupe": job.dedupe_token,
        "name": spec.name,
        "job_dir": job.job_dir,
        "attempt": job.attempt,
        "nodes": spec.resources.nodes,
        "tasks_per_node": spec.resources.tasks_per_node,
        "gpus_per_node": spec.resources.gpus_per_node,
        "signal": spec.recovery.signal,
        "env": dict(spec.env),
        "workdir": spec.workdir,
        "setup": run_as_shell(spec.setup),
        "run": run_as_shell(spec.run),
        "ckpt_root": spec.checkpoint.root,
        "ckpt_verify": spec.checkpoint.verify,
        "ckpt_keep": spec.checkpoint.keep,
        "ckpt_local": spec.checkpoint.local,
        "ckpt_peers": spec.checkpoint.peers,
        "ckpt_drain": spec.checkpoint.drain_mode,
        "helper_cmd": helper_cmd,
        # None: the script runs its step once (templates/_contract.sh.j2); nvrx restarts inside the step
        "in_job": spec.recovery.in_job if in_job_kind(spec) in ("allocation", "torchft") else None,
        "in_job_kind": in_job_kind(spec),  # what else the kind renders (_contract.sh.j2 in_job_kind_env)
        "task_env": task_env(spec),
        "min_replicas": (spec.recovery.in_job.min_replicas or 1) if in_job_kind(spec) == "torchft" else None,
        "nvrx_restarts": spec.recovery.in_job.max_restarts if in_job_kind(spec) == "nvrx" else None,
        "lighthouse_port_offset": LIGHTHOUSE_PORT_OFFSET,
    }


def in_job_kind(spec) -> Optional[str]:
    ij = spec.recovery.in_job
    return ij.kind if ij is not None else None


LIGHTHOUSE_PORT_OFFSET = 20000  # torchft's lighthouse listens on MASTER_PORT + this (never another job's MASTER_PORT)


def task_env(spec) -> str:
    """Shell exports each task of the run gets for its in-job kind (after ``_launcher_node_env``):
    torchft's replica group (``_launcher_replica_group``, templates/_contract.sh.j2: the index of
    the node's topology block where it has one, else its rank, and their number); the
    torch.distributed variables NVRx's in-process wrapper reads. '' for the other kinds. The
    text goes inside a single-quoted ``bash -c``: it holds no single quote."""
    kind = in_job_kind(spec)
    if kind == "torchft":
        return "_launcher_replica_group; "
    if kind == "nvrx":
        world = spec.resources.nodes * spec.resources.tasks_per_node
        return f'export RANK="$LAUNCHER_RANK" LOCAL_RANK="$LAUNCHER_LOCAL_RANK" WORLD_SIZE={world}; '
    return ""
