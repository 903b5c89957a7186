"""Provenance and the report with an s3:// checkpoint root (a real moto_server on
127.0.0.1): RUN.json goes through the checkpoint store to S3, `launcher lineage` reads it
back from S3 alone, and `launcher report` reads the attempt records from S3."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from .launcher_cli import LauncherCLI

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "train.py"


def test_run_record_lineage_and_report_on_an_s3_root(s3_env, tmp_path):
    bucket = s3_env.new_bucket("prov")
    root = f"s3://{bucket}/runs/exp1"
    cli = LauncherCLI(tmp_path)  # built after s3_env: the launcher and the job reach moto
    cli.env.update(s3_env.env())
    spec = cli.spec("s3prov", {"run": f"{sys.executable} {TRAIN} --steps 9 --every 3 --result {tmp_path / 'r.json'}",
                               "checkpoint": {"root": root}})
    job = cli.launch(spec, "local")
    cli.wait_state(job, "COMPLETED", timeout=120, interval=0.2)

    s3 = s3_env.client()
    rec = json.loads(s3.get_object(Bucket=bucket, Key=f"runs/exp1/.launcher/runs/{job}/RUN.json")["Body"].read())
    assert rec["run"] == job and rec["checkpoint_root"] == root
    manifest = json.loads(s3.get_object(Bucket=bucket, Key="runs/exp1/step-000000009.g1/COMMIT.json")["Body"].read())
    assert manifest["run"] == job

    rep = json.loads(cli.run("report", job, "--json").stdout)
    assert abs(rep["sum_s"] - rep["wall_s"]) < 1e-6
    assert rep["attempts"][0]["program_start"] is not None and len(rep["attempts"][0]["saves"]) == 3

    shutil.rmtree(cli.home)
    fresh = {"LAUNCHER_HOME": str(tmp_path / "fresh")}
    d = json.loads(cli.run("lineage", f"{root}/step-000000006.g1", "--json", env=fresh).stdout)
    assert d["run_id"] == job and d["run"]["run"] == job and d["checkpoint"]["step"] == 6
    assert d["record_location"] == f"{root}/.launcher/runs/{job}/RUN.json"
    out = cli.run("lineage", root, env=fresh).stdout
    assert job in out and "step 9 g1" in out
