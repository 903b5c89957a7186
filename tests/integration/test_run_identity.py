"""Run identity end to end on the local backend, on a POSIX root and on an s3:// root (a
real moto_server): launch, complete, launch again -> the launch says it resumes that
finished run at its last step, keeps its LAUNCHER_SEED and trains nothing new; launch
--fresh -> trains from step 0, the old checkpoints are still there, stale, with a reason
naming the fresh run; and what `render` shows as LAUNCHER_SEED is what the next launch runs
with."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from .launcher_cli import LauncherCLI, job_id_of

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "train.py"


def spec_for(cli: LauncherCLI, root: str, tmp: Path, seed=None) -> Path:
    body = {"run": f"{sys.executable} {TRAIN} --steps 12 --every 4 --result {tmp / 'result.json'}",
            "checkpoint": {"root": root, "keep": 5}}
    if seed is not None:
        body["seed"] = seed
    return cli.spec("ident", body)


def launch(cli, spec, *extra, env=None):
    p = cli.run("launch", spec, "--target", "local", *extra, env=env)
    return job_id_of(p), p.stderr


def checkpoints(cli, root, env=None) -> list:
    return json.loads(cli.run("checkpoints", root, "--json", env=env).stdout)


def attempt_record(cli, root, gen, env=None) -> dict:
    """ROOT/.launcher/attempts/g<G>.json, as the job itself wrote it (through the store: POSIX or S3)."""
    code = ("import json,sys; from launcher.checkpoint import open_store, read_attempt; "
            "print(json.dumps(read_attempt(open_store(sys.argv[1]), int(sys.argv[2]))))")
    import subprocess

    p = subprocess.run([sys.executable, "-c", code, root, str(gen)], capture_output=True, text=True,
                       env={**cli.env, **(env or {})}, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def rendered_seed(cli, spec, *extra, env=None) -> int:
    p = cli.run("render", spec, "--target", "local", *extra, env=env)
    m = re.search(r"^export LAUNCHER_SEED=(\d+)$", p.stdout, re.M)
    assert m, p.stdout
    return int(m.group(1))


def relaunch_resumes_then_fresh_starts_over(cli, root, tmp, env=None, other_home=None):
    spec = spec_for(cli, root, tmp)
    first, err = launch(cli, spec, env=env)
    assert "resumes" not in err and "LAUNCHER_SEED" not in err  # a plain first launch says nothing more
    cli.wait_state(first, "COMPLETED", timeout=120, interval=0.2)
    before = [(e["step"], e["generation"], e["state"]) for e in checkpoints(cli, root, env)]
    assert before == [(12, 1, "committed"), (8, 1, "committed"), (4, 1, "committed")]
    seed1 = int(attempt_record(cli, root, 1, env)["seed"])

    # launch again, from this state store or from another one (the root's records suffice)
    env2 = {**(env or {}), **({"LAUNCHER_HOME": str(other_home)} if other_home else {})}
    if not (other_home and root.startswith("s3://")):  # render never reads s3:// (it stays light): store only
        assert rendered_seed(cli, spec, env=env2) == seed1
    second, err = launch(cli, spec, env=env2)
    state = "(not in this state store)" if other_home else "(COMPLETED)"
    assert f"this launch resumes run {first} {state} from step 12" in err, err
    if not other_home:
        assert f"run {first} had already finished (COMPLETED)" in err and "--fresh" in err
    assert f"LAUNCHER_SEED={seed1} (kept from run {first}, which this launch resumes)" in err
    st = _with_env(cli, env2).wait_state(second, "COMPLETED", timeout=120, interval=0.2)
    ev = [e for e in st["events"] if e["kind"] == "resumes"]
    assert ev and ev[0]["run"] == first and ev[0]["step"] == 12 and ev[0]["seed"] == seed1
    g2 = attempt_record(cli, root, 2, env)
    assert g2["resume_step"] == 12 and int(g2["seed"]) == seed1          # same seed, resumed at the end
    assert [(e["step"], e["generation"], e["state"]) for e in checkpoints(cli, root, env)] == before  # nothing new

    # --fresh: from step 0, the old checkpoints kept and stale
    third, err = launch(cli, spec, "--fresh", env=env)
    assert "--fresh: starting over from step 0" in err and "stay on disk and become stale" in err
    st = _with_env(cli, env).wait_state(third, "COMPLETED", timeout=120, interval=0.2)
    assert [e["kind"] for e in st["events"]].count("fresh") == 1
    g3 = attempt_record(cli, root, 3, env)
    assert g3["resume_step"] == -1 and g3["job_id"] == third
    after = checkpoints(cli, root, env)
    assert [(e["step"], e["generation"], e["state"]) for e in after] == [
        (12, 3, "committed"), (12, 1, "stale"), (8, 3, "committed"), (8, 1, "stale"), (4, 3, "committed"),
        (4, 1, "stale")]
    for e in after:
        if e["state"] == "stale":
            assert "superseded by a fresh run" in e["reason"] and f"job {third}" in e["reason"]
    out = cli.run("logs", third, env=env).stdout
    assert "train: resumed from" not in out and "starts over" in out and "step 1 loss" in out
    # the next plain launch continues the fresh run with its seed, and render says so first
    seed3 = int(g3["seed"])
    assert rendered_seed(cli, spec, env=env) == seed3
    fourth, err = launch(cli, spec, env=env)
    assert f"resumes run {third} (COMPLETED) from step 12" in err and f"LAUNCHER_SEED={seed3}" in err
    return first, third


def _with_env(cli, env):
    import copy

    c = copy.copy(cli)
    c.env = {**cli.env, **(env or {})}
    return c


def test_relaunch_resumes_and_says_so_fresh_starts_over_on_a_posix_root(tmp_path):
    cli = LauncherCLI(tmp_path)
    relaunch_resumes_then_fresh_starts_over(cli, str(tmp_path / "ckpt"), tmp_path)
    # the files of the superseded run are still on disk, committed
    assert sorted(p.parent.name for p in (tmp_path / "ckpt").glob("step-*.g1/COMMIT.json")) == [
        "step-000000004.g1", "step-000000008.g1", "step-000000012.g1"]


def test_relaunch_and_fresh_on_an_s3_root_from_another_state_store(s3_env, tmp_path):
    bucket = s3_env.new_bucket("ident")
    root = f"s3://{bucket}/runs/ident"
    cli = LauncherCLI(tmp_path)
    cli.env.update(s3_env.env())
    relaunch_resumes_then_fresh_starts_over(cli, root, tmp_path, other_home=tmp_path / "other-home")
    keys = {o["Key"] for o in s3_env.client().list_objects_v2(Bucket=bucket, Prefix="runs/ident/")["Contents"]}
    assert {f"runs/ident/step-00000000{s}.g1/COMMIT.json" for s in (4, 8)} <= keys


def test_an_explicit_spec_seed_wins_and_the_launch_says_it_differs(tmp_path):
    cli = LauncherCLI(tmp_path)
    root = str(tmp_path / "ckpt")
    first, _ = launch(cli, spec_for(cli, root, tmp_path, seed=5))
    cli.wait_state(first, "COMPLETED", timeout=120, interval=0.2)
    spec = spec_for(cli, root, tmp_path, seed=7)
    assert rendered_seed(cli, spec) == 7
    second, err = launch(cli, spec)
    assert f"the spec's seed (7) differs from LAUNCHER_SEED=5 that run {first} ran with" in err
    assert "LAUNCHER_SEED=7 (the spec's seed)" in err
    cli.wait_state(second, "COMPLETED", timeout=120, interval=0.2)
    assert attempt_record(cli, root, 2)["seed"] == "7"
