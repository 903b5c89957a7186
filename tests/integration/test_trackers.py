"""Experiment trackers across attempts: a local job preempted twice (it commits a checkpoint,
exits 75, and `launcher watch` resubmits it) leaves ONE tracker run whose steps continue, in a
real MLflow tracking server started by the tests (``mlflow server`` on 127.0.0.1, SQLite) and in
W&B's offline mode; the run records the launcher's job id and commit, and `launcher lineage`
names the run. A sweep is an MLflow parent run with a child run per element."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fixtures.gitrepo import git

from .launcher_cli import LauncherCLI
from tests.fixtures.policy import service_unavailable


def need(module: str) -> None:
    """The tracker package the test drives (the `trackers` extra): a skip locally, a failure
    under CI=true (scripts/test installs it for the services tier)."""
    try:
        __import__(module)
    except ImportError as e:
        service_unavailable(module, f"not installed ({e}); pip install -e '.[trackers]'")

STEPS_PER_ATTEMPT = 3
ATTEMPTS = 3


def code_repo(tmp: Path, program: str) -> tuple[Path, str]:
    """A git work tree holding the job's program: (its folder, its commit)."""
    repo = tmp / "code"
    repo.mkdir()
    (repo / "train.py").write_text(textwrap.dedent(program))
    git(repo, "init", "-q")
    git(repo, "add", "train.py")
    git(repo, "commit", "-qm", "train")
    return repo, git(repo, "rev-parse", "HEAD")


# The job: resumes its committed step, logs STEPS_PER_ATTEMPT further steps, commits a
# checkpoint at each, and ends its first two attempts as preempted (exit 75).
PREAMBLE = f"""
    import os, sys
    from launcher import jobside
    attempt = int(os.environ["LAUNCHER_ATTEMPT"])
    first = jobside.resume_step() + 1
    steps = range(first, first + {STEPS_PER_ATTEMPT})
"""
EXIT = f"""
    sys.exit(0 if attempt >= {ATTEMPTS} else 75)
"""

MLFLOW_JOB = PREAMBLE + """
    import mlflow
    with open(os.environ["SEEN"], "a") as f:
        f.write(os.environ["MLFLOW_RUN_ID"] + "\\n")
    run = mlflow.start_run()  # MLFLOW_RUN_ID: the launcher's run
    for s in steps:
        mlflow.log_metric("loss", 1.0 / (s + 1), step=s)
        with jobside.save(s) as d:
            open(os.path.join(str(d), "w"), "w").write(str(s))
    mlflow.end_run()
""" + EXIT

WANDB_JOB = PREAMBLE + """
    import wandb
    run = wandb.init()  # WANDB_RUN_ID / WANDB_RESUME=allow from the launcher, WANDB_MODE=offline
    for s in steps:
        run.log({"loss": 1.0 / (s + 1)}, step=s)
        with jobside.save(s) as d:
            open(os.path.join(str(d), "w"), "w").write(str(s))
    run.finish()
""" + EXIT


def run_to_completion(cli: LauncherCLI, job: str) -> None:
    """`launcher watch` until nothing is left to do (it resubmits the preempted attempts)."""
    p = cli.run("watch", "--exit-when-idle", "--interval", "0.5", timeout=900)
    st = cli.status(job)
    assert st["state"] == "COMPLETED", (st, p.stdout, p.stderr)


def test_mlflow_one_run_across_two_preemptions(cli, mlflow_server):
    need("mlflow")
    repo, commit = code_repo(cli.tmp, MLFLOW_JOB)
    seen = cli.tmp / "seen.txt"
    spec = cli.spec("mlf", {"run": f"{sys.executable} train.py", "workdir": str(repo),
                            "env": {"SEEN": str(seen)}, "checkpoint": {"root": str(cli.tmp / "ck")},
                            "tracking": {"mlflow": {"tracking_uri": "${TEAM_MLFLOW}", "experiment": "launcher-t"}}})
    cli.env["TEAM_MLFLOW"] = mlflow_server.uri
    job = cli.launch(spec, "local")
    run_to_completion(cli, job)
    runs = mlflow_server.runs("launcher-t")
    assert len(runs) == 1, runs  # ONE run, whatever the number of attempts
    info, tags = runs[0]["info"], {t["key"]: t["value"] for t in runs[0]["data"].get("tags", [])}
    assert seen.read_text().split() == [info["run_id"]] * ATTEMPTS  # every attempt was handed it
    assert mlflow_server.metric_steps(info["run_id"], "loss") == list(range(ATTEMPTS * STEPS_PER_ATTEMPT))
    assert tags["launcher.job_id"] == job and tags["launcher.commit"] == commit
    assert info["status"] == "FINISHED"  # ended by watch with the job (the outbox's mlflow_end)
    lin = json.loads(cli.run("lineage", str(cli.tmp / "ck"), "--json").stdout)
    assert lin["trackers"]["mlflow"]["run_id"] == info["run_id"]
    assert "MLflow run " + info["run_id"] in cli.run("lineage", str(cli.tmp / "ck")).stdout


def test_mlflow_sweep_is_a_parent_run_with_a_child_per_element(cli, mlflow_server):
    spec = cli.spec("mlsweep", {"run": "true", "sweep": {"grid": {"lr": [1, 2, 3]}},
                                "tracking": {"mlflow": {"tracking_uri": mlflow_server.uri, "experiment": "sw"}}})
    sweep = cli.launch(spec, "local")
    rows = [r for r in json.loads(cli.run("status", "--json").stdout) if r["job_id"].startswith(sweep + "-e")]
    assert len(rows) == 3
    runs = mlflow_server.runs("sw")
    tags = [{t["key"]: t["value"] for t in r["data"].get("tags", [])} for r in runs]
    parent = [t for t in tags if t["launcher.job_id"] == sweep]
    children = sorted(t["launcher.job_id"] for t in tags if t.get("mlflow.parentRunId"))
    assert len(parent) == 1 and len(runs) == 4
    assert children == sorted(r["job_id"] for r in rows)
    assert {t["mlflow.parentRunId"] for t in tags if t.get("mlflow.parentRunId")} == {
        next(r["info"]["run_id"] for r in runs if {x["key"]: x["value"] for x in r["data"]["tags"]}[
            "launcher.job_id"] == sweep)}


def offline_runs(wandb_dir: Path) -> list[dict]:
    """Each offline run folder's run id, tags and logged steps, read from its .wandb file."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    out = []
    for d in sorted((wandb_dir / "wandb").glob("offline-run-*")):
        f = next(d.glob("run-*.wandb"))
        ds = datastore.DataStore()
        ds.open_for_scan(str(f))
        run = {"dir": d.name, "run_id": None, "tags": [], "steps": []}
        while True:
            data = ds.scan_data()
            if data is None:
                break
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(data)
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                run["run_id"], run["tags"], run["group"] = rec.run.run_id, list(rec.run.tags), rec.run.run_group
            elif kind == "history":
                run["steps"].append(rec.history.step.num)
        out.append(run)
    return out


def test_wandb_offline_one_run_id_across_two_preemptions(cli):
    need("wandb")
    from launcher.provenance.trackers import wandb_run_id

    repo, commit = code_repo(cli.tmp, WANDB_JOB)
    wandb_dir = cli.tmp / "wb"
    wandb_dir.mkdir()
    spec = cli.spec("wb", {"run": f"{sys.executable} train.py", "workdir": str(repo),
                           "checkpoint": {"root": str(cli.tmp / "ck")},
                           "env": {"WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir), "WANDB_SILENT": "true"},
                           "tracking": {"wandb": {"project": "launcher-t"}}})
    job = cli.launch(spec, "local")
    run_to_completion(cli, job)
    runs = offline_runs(wandb_dir)
    assert len(runs) == ATTEMPTS, runs  # offline: one folder per start, all of ONE run
    assert {r["run_id"] for r in runs} == {wandb_run_id(job)}
    steps = [s for r in runs for s in r["steps"]]
    assert steps == list(range(ATTEMPTS * STEPS_PER_ATTEMPT)), runs  # the steps continue
    assert f"launcher-job:{job}" in runs[0]["tags"] and f"commit:{commit}" in runs[0]["tags"]
    lin = json.loads(cli.run("lineage", str(cli.tmp / "ck"), "--json").stdout)
    assert lin["trackers"]["wandb"]["run_id"] == wandb_run_id(job)
