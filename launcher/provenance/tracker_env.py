"""Pure: a job's tracker identities (``meta["trackers"]``) and the env that hands them to an attempt
(``launcher.provenance.trackers`` says what each tracker gets). Apart from the trackers' HTTP
clients, so that rendering a job (``launcher.launching.submission``) does not load urllib.request."""

from __future__ import annotations

import hashlib
import re
from typing import Optional

META_KEY = "trackers"
RUN_ID_RE = re.compile(r"[^A-Za-z0-9_-]+")


def wandb_run_id(job_id: str) -> str:
    """A W&B run id for JOB_ID: the id itself where W&B takes it (letters, digits, - and _,
    at most 64), else a stable transformation of it."""
    rid = RUN_ID_RE.sub("-", job_id).strip("-") or "run"
    if len(rid) > 64:

        rid = rid[:51] + "-" + hashlib.sha256(job_id.encode()).hexdigest()[:12]
    return rid


def wandb_identity(spec, job_id: str, commit: Optional[str], sweep_id: Optional[str] = None) -> dict:
    w = spec.tracking.wandb
    out = {"run_id": wandb_run_id(job_id), "job_id": job_id}
    if sweep_id:
        out["group"] = sweep_id
    if w.project:
        out["project"] = w.project
    if w.entity:
        out["entity"] = w.entity
    if commit:
        out["commit"] = commit
    return out


def tracker_env(trackers: Optional[dict]) -> dict[str, str]:
    """Pure: the variables that hand TRACKERS (a job's ``meta["trackers"]``) to an attempt."""
    env: dict[str, str] = {}
    w = (trackers or {}).get("wandb")
    if w:
        env["WANDB_RUN_ID"] = w["run_id"]
        env["WANDB_RESUME"] = "allow"
        if w.get("group"):
            env["WANDB_RUN_GROUP"] = w["group"]
        if w.get("project"):
            env["WANDB_PROJECT"] = w["project"]
        if w.get("entity"):
            env["WANDB_ENTITY"] = w["entity"]
        tags = [f"launcher-job:{w.get('job_id') or w['run_id']}"[:64]]
        if w.get("commit"):
            tags.append(f"commit:{w['commit'][:40]}")
        env["WANDB_TAGS"] = ",".join(tags)
    m = (trackers or {}).get("mlflow")
    if m:
        env["MLFLOW_RUN_ID"] = m["run_id"]
        env["MLFLOW_TRACKING_URI"] = m["tracking_uri"]
        if m.get("experiment_id"):
            env["MLFLOW_EXPERIMENT_ID"] = str(m["experiment_id"])
    return env


def with_trackers(spec, trackers: Optional[dict]):
    """A copy of SPEC whose env hands TRACKERS to the job (SPEC itself unchanged)."""
    env = tracker_env(trackers)
    return spec.model_copy(update={"env": {**spec.env, **env}}) if env else spec


def with_tracker_env(spec, meta: dict):
    """``with_trackers`` for a job row's META."""
    return with_trackers(spec, (meta or {}).get(META_KEY))


def describe(trackers: Optional[dict]) -> list[str]:
    """One line per tracker run (``launcher lineage``, ``launch``'s note)."""
    out = []
    w = (trackers or {}).get("wandb")
    if w:
        where = "/".join(x for x in (w.get("entity"), w.get("project")) if x)
        out.append(f"W&B run {w['run_id']}" + (f" in {where}" if where else "")
                   + (f", group {w['group']}" if w.get("group") else ""))
    m = (trackers or {}).get("mlflow")
    if m:
        out.append(f"MLflow run {m['run_id']} (experiment {m.get('experiment_id')}, {m['tracking_uri']})"
                   + (f", child of {m['parent_run_id']}" if m.get("parent_run_id") else ""))
    return out
