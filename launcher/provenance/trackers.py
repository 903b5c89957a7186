"""Experiment trackers: one W&B / MLflow run per job, whatever the number of its attempts.

A spec with ``tracking:`` (``launcher.spec.integrations.TrackingSection``) gets, at its first
launch, a tracker identity that is kept in the job's meta (``meta["trackers"]``) and exported
to every attempt through the spec's ``env`` (like ``LAUNCHER_SEED``: every submission,
resubmissions by ``watch`` included, re-renders from the stored spec and meta):

* **W&B**: ``WANDB_RUN_ID`` = the job id (a stable id the job itself cannot change),
  ``WANDB_RESUME=allow`` (the first attempt creates the run, later ones continue it),
  ``WANDB_RUN_GROUP`` = the sweep id for a sweep's elements, ``WANDB_TAGS`` with the
  launcher's job id and the code's commit, ``WANDB_PROJECT`` / ``WANDB_ENTITY`` when the
  spec names them. Nothing is sent to W&B by the launcher.
* **MLflow**: the launcher creates the run on the tracking server over MLflow's REST API (the
  standard library only: ``mlflow`` is never imported here) and exports ``MLFLOW_RUN_ID``,
  ``MLFLOW_TRACKING_URI`` and ``MLFLOW_EXPERIMENT_ID``; ``mlflow.start_run()`` in the job
  then continues that run. The run carries the tags ``launcher.job_id``, ``launcher.commit``
  (and ``mlflow.source.git.commit``). A sweep is a parent run with one child run per
  element (``mlflow.parentRunId``).

The server's credentials come from the launcher's environment, as MLflow's own client reads
them (``MLFLOW_TRACKING_TOKEN``, or ``MLFLOW_TRACKING_USERNAME`` / ``_PASSWORD``); the job
needs them in ``secrets:`` to log.
"""

from __future__ import annotations

from urllib.parse import urlencode
import base64
import json
import os
import time
import urllib.error
import urllib.request
from typing import Optional
from urllib.parse import urlsplit

from launcher.core.errors import LauncherError
from launcher.spec.integrations import env_ref
from launcher.provenance.capture import code_dir, code_identity
from launcher.provenance.tracker_env import (META_KEY, describe, tracker_env, wandb_identity,  # noqa: F401
                                             wandb_run_id, with_tracker_env, with_trackers)

TIMEOUT_S = 15.0


class TrackerError(LauncherError):
    """A tracker could not be reached or refused what the launcher asked."""


# ---------------------------------------------------------------- MLflow over REST
def mlflow_uri(spec, environ=None) -> str:
    """The tracking URI of SPEC: ``tracking.mlflow.tracking_uri`` (or the variable it names),
    else ``$MLFLOW_TRACKING_URI``."""
    environ = os.environ if environ is None else environ
    given = spec.tracking.mlflow.tracking_uri
    name = env_ref(given) if given else "MLFLOW_TRACKING_URI"
    uri = environ.get(name, "") if name else given
    if not uri:
        raise TrackerError(f"tracking.mlflow: no tracking URI: set tracking.mlflow.tracking_uri in the spec or "
                           f"export {name or 'MLFLOW_TRACKING_URI'}")
    if urlsplit(uri).username or urlsplit(uri).password:
        raise TrackerError(f"tracking.mlflow: {name or 'tracking_uri'} carries a user or password: give them as "
                           "MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD (and list them in secrets:)")
    if not uri.startswith(("http://", "https://")):
        raise TrackerError(f"tracking.mlflow: {name or 'tracking_uri'} must be an http(s):// tracking server (the "
                           f"launcher creates the run over its REST API), got {uri.split('://')[0]}://...")
    return uri.rstrip("/")


class MlflowRest:
    """The few MLflow REST calls the launcher makes (API 2.0), over urllib."""

    def __init__(self, uri: str, timeout: float = TIMEOUT_S, environ=None):
        self.uri = uri.rstrip("/")
        self.timeout = timeout
        env = os.environ if environ is None else environ
        self.headers = {"Content-Type": "application/json"}
        if env.get("MLFLOW_TRACKING_TOKEN"):
            self.headers["Authorization"] = f"Bearer {env['MLFLOW_TRACKING_TOKEN']}"
        elif env.get("MLFLOW_TRACKING_USERNAME"):
            pair = f"{env['MLFLOW_TRACKING_USERNAME']}:{env.get('MLFLOW_TRACKING_PASSWORD', '')}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()

    def call(self, method: str, path: str, body: Optional[dict] = None, query: str = "") -> dict:
        url = f"{self.uri}/api/2.0/mlflow/{path}" + (f"?{query}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:  # noqa: S310 - http(s) only, checked
                raw = r.read()
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace")[:300]
            try:
                code = json.loads(text).get("error_code", "")
            except ValueError:
                code = ""
            raise TrackerError(f"MLflow {self.uri}: {path} answered HTTP {e.code} {code or text}".rstrip(),
                               ) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise TrackerError(f"MLflow {self.uri} is not reachable: {reason}") from None
        return json.loads(raw.decode() or "{}")

    def experiment_id(self, name: str) -> str:
        """The id of experiment NAME, created when missing (a concurrent creation is read back)."""

        try:
            got = self.call("GET", "experiments/get-by-name", query=urlencode({"experiment_name": name}))
            return str(got["experiment"]["experiment_id"])
        except TrackerError as e:
            if "RESOURCE_DOES_NOT_EXIST" not in str(e) and "404" not in str(e):
                raise
        try:
            return str(self.call("POST", "experiments/create", {"name": name})["experiment_id"])
        except TrackerError as e:
            if "RESOURCE_ALREADY_EXISTS" not in str(e):
                raise
            got = self.call("GET", "experiments/get-by-name", query=urlencode({"experiment_name": name}))
            return str(got["experiment"]["experiment_id"])

    def create_run(self, experiment_id: str, name: str, tags: dict) -> str:
        body = {"experiment_id": experiment_id, "run_name": name, "start_time": int(time.time() * 1000),
                "tags": [{"key": k, "value": str(v)} for k, v in tags.items() if v is not None]}
        return str(self.call("POST", "runs/create", body)["run"]["info"]["run_id"])

    def set_terminated(self, run_id: str, status: str) -> None:
        self.call("POST", "runs/update", {"run_id": run_id, "status": status, "end_time": int(time.time() * 1000)})

    def get_run(self, run_id: str) -> dict:

        return self.call("GET", "runs/get", query=urlencode({"run_id": run_id}))["run"]


def _mlflow_tags(job_id: str, commit: Optional[str], name: str, extra=None) -> dict:
    tags = {"launcher.job_id": job_id, "launcher.job_name": name, "mlflow.runName": job_id}
    if commit:
        tags["launcher.commit"] = commit
        tags["mlflow.source.git.commit"] = commit
    tags.update(extra or {})
    return tags


# ---------------------------------------------------------------- at launch
def commit_of(spec, spec_path: Optional[str]) -> Optional[str]:
    """The commit of the job's code (what provenance records), or None."""
    try:
        return code_identity(code_dir(spec, spec_path)).get("commit")
    except Exception:  # noqa: BLE001 - no git, no commit
        return None


def open_job(spec, job_id: str, spec_path: Optional[str], client=None) -> dict:
    """The tracker identity of a new job (``meta["trackers"]``): {} without ``tracking:``.
    Creates the MLflow run (TrackerError when the server cannot be reached: the launch stops
    before anything is submitted)."""
    t = spec.tracking
    if not t.any:
        return {}
    commit = commit_of(spec, spec_path)
    out = {}
    if t.wandb is not None:
        out["wandb"] = wandb_identity(spec, job_id, commit)
    if t.mlflow is not None:
        uri = mlflow_uri(spec)
        rest = client or MlflowRest(uri)
        exp = rest.experiment_id(t.mlflow.experiment or spec.name)
        run_id = rest.create_run(exp, job_id, _mlflow_tags(job_id, commit, spec.name))
        out["mlflow"] = {"run_id": run_id, "experiment_id": exp, "tracking_uri": uri}
    return out


def open_sweep(spec, sweep_id: str, element_ids: list, spec_path: Optional[str], client=None) -> dict:
    """{element job id: its tracker identity} of a new sweep: one W&B group (the sweep id),
    one MLflow parent run (the sweep) with a child run per element."""
    t = spec.tracking
    if not t.any:
        return {}
    commit = commit_of(spec, spec_path)
    out: dict = {j: {} for j in element_ids}
    if t.wandb is not None:
        for j in element_ids:
            out[j]["wandb"] = wandb_identity(spec, j, commit, sweep_id=sweep_id)
    if t.mlflow is not None:
        uri = mlflow_uri(spec)
        rest = client or MlflowRest(uri)
        exp = rest.experiment_id(t.mlflow.experiment or spec.name)
        parent = rest.create_run(exp, sweep_id, _mlflow_tags(sweep_id, commit, spec.name,
                                                             {"launcher.sweep_id": sweep_id}))
        for j in element_ids:
            child = rest.create_run(exp, j, _mlflow_tags(j, commit, spec.name, {
                "launcher.sweep_id": sweep_id, "mlflow.parentRunId": parent}))
            out[j]["mlflow"] = {"run_id": child, "experiment_id": exp, "tracking_uri": uri,
                                "parent_run_id": parent}
    return out


# the MLflow status of a run whose job closed in each final state
FINAL_STATUS = {"COMPLETED": "FINISHED", "FAILED": "FAILED", "GAVE_UP": "FAILED", "CANCELLED": "KILLED",
                "STOPPED": "KILLED", "SUPERSEDED": "KILLED"}


def attach_sweep(spec, sweep_id: str, rows: list, spec_path: Optional[str], client=None) -> dict:
    """Open the trackers of a new sweep and put each element's identity into its row's meta
    (ROWS: ``launcher.sweep.elements.element_rows``). {index: env} for an array's table."""
    opened = open_sweep(spec, sweep_id, [r["job_id"] for r in rows], spec_path, client)
    out = {}
    for r in rows:
        mine = opened.get(r["job_id"])
        if mine:
            r["meta"][META_KEY] = mine
            out[r["index"]] = tracker_env(mine)
    return out
