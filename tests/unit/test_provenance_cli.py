"""Provenance end to end on the local target: real launches of the example trainer from a
git repository, RUN.json under the checkpoint root, `launcher lineage` with the state
store gone, `launcher diff`, the seed, and no secret value in anything written."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures.gitrepo import git
from tests.integration.launcher_cli import LauncherCLI, job_id_of

ROOT = Path(__file__).resolve().parents[2]
HF = "hf_" + "Q7wPz" * 7  # looks like a Hugging Face token
OTHER = "not-a-known-shape-7c1d9e04b2"  # only its variable's name (*_TOKEN) marks it as secret


def files_under(*dirs):
    for d in dirs:
        for dirpath, _, names in os.walk(d):
            for n in names:
                yield Path(dirpath) / n


@pytest.fixture
def project(tmp_path):
    repo = tmp_path / "proj"
    repo.mkdir()
    shutil.copy(ROOT / "examples" / "train.py", repo / "train.py")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "remote", "add", "origin", f"https://ci:{HF}@example.invalid/team/proj.git")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "trainer")
    return repo


def write_spec(repo, root, steps=12):
    spec = repo / "job.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "prov", "workdir": ".",
        "run": f"echo \"$LAUNCHER_SEED\" > seed-$LAUNCHER_JOB_ID.txt; {sys.executable} train.py --steps {steps} "
               f"--every 4 --result result-$LAUNCHER_JOB_ID.json",
        "secrets": ["HF_TOKEN"], "env": {"LOG_LEVEL": "info"}, "checkpoint": {"root": str(root)}}, sort_keys=False))
    return spec


@pytest.fixture
def cli(tmp_path):
    c = LauncherCLI(tmp_path, extra_targets={})
    c.env.update(HF_TOKEN=HF, DEPLOY_TOKEN=OTHER)
    c.env.pop("LAUNCHER_SEED", None)
    return c


def test_a_launch_records_its_provenance_and_lineage_needs_only_the_checkpoint_root(cli, project, tmp_path):
    root = tmp_path / "ckpt"
    spec = write_spec(project, root)
    (project / "train.py").write_text((project / "train.py").read_text() + "\n# local change\n")
    job = cli.launch(spec, "local")
    cli.wait_state(job, "COMPLETED", timeout=120, interval=0.2)

    run_json = root / ".launcher" / "runs" / job / "RUN.json"
    rec = json.loads(run_json.read_text())
    assert rec["run"] == job and rec["name"] == "prov" and rec["target"] == "local"
    assert rec["spec"]["path"] == str(spec) and rec["spec"]["text"] == spec.read_text()
    assert rec["spec"]["resolved"]["workdir"] == str(project)
    assert rec["code"]["commit"] == git(project, "rev-parse", "HEAD") and rec["code"]["dirty"] is True
    assert rec["code"]["diff_sha256"] and rec["code"]["remote"] == "https://example.invalid/team/proj.git"
    assert rec["python"]["package_count"] == len(rec["python"]["packages"]) > 10
    assert rec["versions"]["launcher"] and rec["versions"]["backend"]["name"] == "local"
    assert rec["image"]["name"] is None and rec["image"]["reason"]
    assert rec["secrets"] == {"names": ["HF_TOKEN"], "set_at_launch": {"HF_TOKEN": True}}
    assert rec["rendered"]["kind"] == "script" and f"export LAUNCHER_SEED={rec['seed']}" in rec["rendered"]["text"]

    # the same record in the state store
    from launcher.provenance.record import load_record
    from launcher.state.store import StateStore

    st = StateStore(cli.home)
    stored = load_record(st, job)
    st.close()
    assert stored.pop("_location") == str(run_json) and stored == rec

    # the job saw the recorded seed; the node recorded itself; every commit names the run
    assert (project / f"seed-{job}.txt").read_text().strip() == str(rec["seed"])
    g1 = json.loads((root / ".launcher" / "attempts" / "g1.json").read_text())
    assert g1["seed"] == str(rec["seed"]) and g1["node"]["hostname"] == socket.gethostname()
    assert g1["node"]["python"] and g1["node"]["packages_sha256"]
    commits = sorted(root.glob("step-*/COMMIT.json"))
    assert len(commits) == 3 and all(json.loads(c.read_text())["run"] == job for c in commits)

    # no secret value in anything under LAUNCHER_HOME or the checkpoint root
    for f in files_under(cli.home, root):
        data = f.read_bytes()
        assert HF.encode() not in data and OTHER.encode() not in data, f

    # lineage from the checkpoint root alone: the state store is gone
    shutil.rmtree(cli.home)
    fresh = {"LAUNCHER_HOME": str(tmp_path / "elsewhere")}
    ckpt = commits[-1].parent
    out = cli.run("lineage", ckpt, env=fresh).stdout
    assert job in out and rec["code"]["commit"] in out and str(spec) in out and "dirty" in out
    assert "step 12 g1" in out and "fresh start" in out
    d = json.loads(cli.run("lineage", ckpt, "--json", env=fresh).stdout)
    assert d["run_id"] == job and d["run"] == rec and d["record_location"] == str(run_json)
    assert d["checkpoint"]["step"] == 12 and d["generation"]["node"]["hostname"] == socket.gethostname()
    assert cli.run("lineage", ckpt, "--spec", env=fresh).stdout == spec.read_text()
    # a checkpoint root means its latest committed checkpoint
    assert json.loads(cli.run("lineage", root, "--json", env=fresh).stdout)["checkpoint"]["path"] == str(ckpt)
    assert not (tmp_path / "elsewhere" / "state.db").exists()  # lineage never creates a state store


def test_diff_of_two_launches_and_a_fixed_seed(cli, project, tmp_path):
    root = tmp_path / "ckpt"
    spec = write_spec(project, root, steps=8)
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "spec")
    a = cli.launch(spec, "local")
    cli.wait_state(a, "COMPLETED", timeout=120, interval=0.2)
    write_spec(project, tmp_path / "ckpt2", steps=16)
    (project / "extra.py").write_text("X = 1\n")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "two")
    b = job_id_of(cli.run("launch", spec, "--target", "local", env={"LAUNCHER_SEED": "1234"}))
    cli.wait_state(b, "COMPLETED", timeout=120, interval=0.2)
    assert (project / f"seed-{b}.txt").read_text().strip() == "1234"

    d = json.loads(cli.run("diff", a, b, "--json").stdout)
    cfg = {r["key"]: r for r in d["config"]}
    assert set(cfg) == {"run", "checkpoint.root"}
    assert "--steps 8" in cfg["run"]["a"] and "--steps 16" in cfg["run"]["b"]
    code = {r["key"]: r for r in d["code"]}
    assert code["commit"]["b"] == git(project, "rev-parse", "HEAD") and "dirty" not in code
    assert d["packages"] == {"added": [], "removed": [], "changed": []} and d["versions"] == []
    assert {r["key"]: r["b"] for r in d["run"]}["seed"] == 1234
    text = cli.run("diff", a, b).stdout
    assert text.startswith(f"--- {a}\n+++ {b}\n") and "~ seed:" in text and "~ commit:" in text
    # the same runs named by their RUN.json files and by a checkpoint
    ra = tmp_path / "ckpt" / ".launcher" / "runs" / a / "RUN.json"
    d2 = json.loads(cli.run("diff", ra, tmp_path / "ckpt2", "--json").stdout)
    assert d2["config"] == d["config"] and d2["code"] == d["code"]
    assert "no differences" in cli.run("diff", a, ra).stdout


def test_a_secret_value_written_into_the_spec_env_is_redacted_in_the_record(cli, tmp_path):
    root = tmp_path / "ck"
    spec = cli.spec("leaky", {"run": "true", "env": {"WANDB_API_KEY": "wandb-0123456789abcdef"},
                              "checkpoint": {"root": str(root)}})
    job = cli.launch(spec, "local")
    cli.wait_state(job, "COMPLETED", timeout=60, interval=0.2)
    raw = (root / ".launcher" / "runs" / job / "RUN.json").read_text()
    assert "wandb-0123456789abcdef" not in raw
    resolved = json.loads(raw)["spec"]["resolved"]  # delivered as a secret: a name, never a value
    assert "WANDB_API_KEY" in resolved["secrets"] and "WANDB_API_KEY" not in resolved["env"]
