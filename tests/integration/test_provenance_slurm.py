"""Run provenance on the real Slurm test cluster: a run launched from a git checkout with
secrets in the submitting environment; after it finished and with the state store gone,
`launcher lineage` names the run, commit and spec of its checkpoints from the checkpoint
root alone, and no secret value is anywhere under LAUNCHER_HOME or the root."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from tests.fixtures.gitrepo import git

from .launcher_cli import job_id_of

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
HF = "hf_" + "Zk3vT" * 7
OTHER = "plain-looking-value-51e0c3aa"  # secret only by its variable's name (CI_TOKEN)


def test_lineage_of_a_slurm_checkpoint_from_the_root_alone_and_no_secret_written(cli, clean_queue, tmp_path):
    repo = clean_queue.shared_dir / f"proj-{time.time_ns()}"
    repo.mkdir()
    shutil.copy(ROOT / "examples" / "train.py", repo / "train.py")
    root = clean_queue.shared_dir / f"ckpt-prov-{time.time_ns()}"
    spec = repo / "train.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "prov-slurm", "workdir": ".",
        "run": "python3 train.py --steps 12 --every 4 --result result.json",
        "secrets": ["HF_TOKEN"], "checkpoint": {"root": str(root)},
        "resources": {"nodes": 1, "time_limit": "5m"}}, sort_keys=False))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    head = git(repo, "rev-parse", "HEAD")

    env = {"HF_TOKEN": HF, "CI_TOKEN": OTHER}
    job = job_id_of(cli.run("launch", spec, "--target", "testcl", env=env))
    st = cli.wait_state(job, "COMPLETED", timeout=180, interval=1)
    native = st["attempts"][-1]["native_id"]

    commits = sorted(root.glob("step-*/COMMIT.json"))
    assert [p.parent.name for p in commits] == ["step-000000004.g1", "step-000000008.g1", "step-000000012.g1"]
    assert all(json.loads(p.read_text())["run"] == job for p in commits)
    g1 = json.loads((root / ".launcher" / "attempts" / "g1.json").read_text())
    assert g1["node"]["hostname"] in clean_queue.nodes and g1["scheduler"]["SLURM_JOB_ID"] == native

    # nothing under LAUNCHER_HOME (state store, job dir, logs) or the root holds a secret value
    for d in (cli.home, root):
        for dirpath, _, names in os.walk(d):
            for n in names:
                data = (Path(dirpath) / n).read_bytes()
                assert HF.encode() not in data and OTHER.encode() not in data, Path(dirpath) / n

    # the state store is gone (copied elsewhere, or never there): the root suffices
    shutil.move(str(cli.home), str(tmp_path / "old-home"))
    fresh = {"LAUNCHER_HOME": str(tmp_path / "new-home")}
    ck = commits[1].parent
    d = json.loads(cli.run("lineage", ck, "--json", env=fresh).stdout)
    assert d["run_id"] == job and d["checkpoint"]["step"] == 8 and d["checkpoint"]["state"] == "committed"
    run = d["run"]
    assert run["spec"]["path"] == str(spec) and run["spec"]["text"] == spec.read_text()
    assert run["code"]["commit"] == head and run["code"]["dirty"] is False
    assert run["backend"] == "slurm" and run["native_id"] == native
    sinfo = clean_queue.run("sinfo", "--version").stdout.split()[-1]
    assert run["versions"]["backend"] == {"name": "slurm", "version": sinfo}
    assert run["secrets"]["names"] == ["HF_TOKEN"]
    assert f"export LAUNCHER_SEED={run['seed']}" in run["rendered"]["text"]
    assert d["generation"]["node"]["hostname"] == g1["node"]["hostname"]
    out = cli.run("lineage", ck, env=fresh).stdout
    for s in (job, head, str(spec), g1["node"]["hostname"], f"slurm {sinfo}"):
        assert s in out, (s, out)
    assert cli.run("lineage", ck, "--spec", env=fresh).stdout == spec.read_text()
    assert not (tmp_path / "new-home" / "state.db").exists()
