"""The checkpoint contract on S3, against a real moto_server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner

from launcher import jobside
from launcher.checkpoint import (COMMIT, GENERATIONS, AlreadyCommitted, Conflict, RootUnavailable, Superseded,
                                 commit, gc, latest, open_store, read_attempt, read_generations, scan,
                                 start_generation, step_dir)
from launcher.cli import main as cli

pytestmark = pytest.mark.s3


def keys(client, bucket):
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            out[o["Key"]] = o["ETag"]
    return out


def put(client, bucket, key, data=b"d" * 100):
    client.put_object(Bucket=bucket, Key=key, Body=data)


def s3ckpt(client, bucket, prefix, step, gen, do_commit=True, files=None):
    files = files or {"model.bin": b"m" * 500, "opt/state.bin": b"o" * 50}
    name = step_dir(step, gen)
    for rel, data in files.items():
        put(client, bucket, "%s/%s/%s" % (prefix, name, rel), data)
    if do_commit:
        commit(open_store("s3://%s/%s" % (bucket, prefix)), step, gen, fence=False)


def job_env(moto_server, **kw):
    e = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHER_")}
    e.update(moto_server.env())
    e.update(kw)
    return e


def test_moto_really_enforces_conditional_writes(s3_bucket, s3_env):
    """The premise of the S3 contract: If-None-Match / If-Match return 412 here."""
    from botocore.exceptions import ClientError

    c = s3_env.client()
    c.put_object(Bucket=s3_bucket, Key="k", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as ei:
        c.put_object(Bucket=s3_bucket, Key="k", Body=b"2", IfNoneMatch="*")
    assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    with pytest.raises(ClientError) as ei:
        c.put_object(Bucket=s3_bucket, Key="k", Body=b"2", IfMatch='"0000"')
    assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    store = open_store("s3://%s/p" % s3_bucket)
    store.put_if_absent("x", b"1")
    with pytest.raises(Conflict, match="s3://%s/p/x" % s3_bucket):
        store.put_if_absent("x", b"2")
    assert c.get_object(Bucket=s3_bucket, Key="p/x")["Body"].read() == b"1"


def test_commit_discovery_and_fencing_on_s3(s3_bucket, s3_env):
    c = s3_env.client()
    root = "s3://%s/runs/a" % s3_bucket
    store = open_store(root)
    g1, found, _ = start_generation(store, job_id="job")
    assert (g1.generation, found) == (1, None)
    s3ckpt(c, s3_bucket, "runs/a", 100, 1)
    s3ckpt(c, s3_bucket, "runs/a", 200, 1)
    with pytest.raises(AlreadyCommitted):
        commit(store, 200, 1)
    s3ckpt(c, s3_bucket, "runs/a", 300, 1, do_commit=False)                         # torn
    s3ckpt(c, s3_bucket, "runs/a", 400, 1)
    put(c, s3_bucket, "runs/a/%s/model.bin" % step_dir(400, 1), b"short")          # resized
    log = []
    e = latest(store, log=log)
    assert (e.step, e.generation, e.path) == (200, 1, "s3://%s/runs/a/%s" % (s3_bucket, step_dir(200, 1)))
    assert [x.reason for x in log[:2]] == ["model.bin: size 5, COMMIT.json lists 500",
                                          "no COMMIT.json (uncommitted or torn)"]

    g2, found, _ = start_generation(store)
    assert (g2.generation, found.step) == (2, 200)
    s3ckpt(c, s3_bucket, "runs/a", 500, 1, do_commit=False)
    with pytest.raises(Superseded):
        commit(store, 500, 1)                                                       # zombie refused
    s3ckpt(c, s3_bucket, "runs/a", 600, 1)                                          # raced the fence
    states = {(x.step, x.generation): x.state for x in scan(store)}
    # above the fork point (200) everything of generation 1 is stale, torn or not
    assert states == {(600, 1): "stale", (500, 1): "stale", (400, 1): "stale", (300, 1): "stale",
                      (200, 1): "committed", (100, 1): "committed"}
    assert latest(store).step == 200
    # stale generation token: CAS on GENERATIONS.json via If-Match refuses
    from launcher.checkpoint import bump_generation
    with pytest.raises(Conflict):
        bump_generation(store, g1)
    assert read_generations(store).generation == 2


def test_listing_is_by_prefix_not_per_object(s3_bucket, s3_env):
    c = s3_env.client()
    n = 1500
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda s: put(c, s3_bucket, "r/%s/w.bin" % step_dir(s, 1), b"w"), range(n)))
    s3ckpt(c, s3_bucket, "r", n, 1)
    store = open_store("s3://%s/r" % s3_bucket)
    e = latest(store)
    assert e.step == n
    req = dict(store.requests)
    # 1,501 directories: 2 delimiter pages + 1 listing of the chosen checkpoint; no per-object HEAD
    assert req.get("ListObjectsV2") == 3, req
    assert "HeadObject" not in req
    assert sum(req.values()) <= 6, req
    store2 = open_store("s3://%s/r" % s3_bucket)
    ents = scan(store2)
    assert len(ents) == n + 1 and sum(x.state == "torn" for x in ents) == n
    # the full scan lists the whole tree once: 3,002 keys = 4 pages (+2 delimiter pages)
    assert store2.requests["ListObjectsV2"] <= 7, dict(store2.requests)
    assert store2.requests["GetObject"] <= 2, dict(store2.requests)     # GENERATIONS.json + one COMMIT.json


def test_missing_bucket_is_a_clear_error_and_creates_nothing(s3_env, tmp_path):
    c = s3_env.client()
    before = sorted(b["Name"] for b in c.list_buckets()["Buckets"])
    root = "s3://no-such-bucket-x1/runs"
    with pytest.raises(RootUnavailable, match="s3://no-such-bucket-x1: bucket does not exist"):
        latest(open_store(root))
    with pytest.raises(RootUnavailable, match="bucket does not exist"):
        open_store(root).check_root()
    r = CliRunner().invoke(cli, ["checkpoints", root, "--gc", "--keep", "1"])
    assert r.exit_code == 1 and "s3://no-such-bucket-x1: bucket does not exist" in r.output
    p = subprocess.run([sys.executable, "-m", "launcher.jobside", "resume-env", "--root", root],
                       capture_output=True, text=True, timeout=60, env=job_env(s3_env))
    assert p.returncode == 1 and p.stdout == "" and "bucket does not exist" in p.stderr
    p = subprocess.run([sys.executable, "-m", "launcher.jobside", "wait-commit", "--root", root, "--since-step", "0",
                        "--timeout", "1"], capture_output=True, text=True, timeout=60, env=job_env(s3_env))
    assert p.returncode == 2 and "bucket does not exist" in p.stderr
    with jobside_env(LAUNCHER_CKPT_ROOT=root, LAUNCHER_ATTEMPT="1"):
        with pytest.raises(RootUnavailable):
            with jobside.save(1) as d:
                open(os.path.join(d, "x"), "w").write("x")
    assert sorted(b["Name"] for b in c.list_buckets()["Buckets"]) == before


def test_malformed_commit_json_on_s3(s3_bucket, s3_env):
    c = s3_env.client()
    s3ckpt(c, s3_bucket, "m", 1, 1)
    s3ckpt(c, s3_bucket, "m", 2, 1, do_commit=False)
    put(c, s3_bucket, "m/%s/%s" % (step_dir(2, 1), COMMIT), b"{not json")
    store = open_store("s3://%s/m" % s3_bucket)
    before = keys(c, s3_bucket)
    bad = [x for x in scan(store) if x.step == 2][0]
    assert bad.state == "torn" and "s3://%s/m/%s/%s" % (s3_bucket, step_dir(2, 1), COMMIT) in bad.reason
    assert latest(store).step == 1
    rep = gc(store, keep=1)
    assert rep["quarantined"] == [] and rep["deleted"] == []
    assert keys(c, s3_bucket) == before


class jobside_env:
    def __init__(self, **kw):
        self.kw = kw

    def __enter__(self):
        self.saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("LAUNCHER_")}
        os.environ.update(self.kw)

    def __exit__(self, *exc):
        for k in [k for k in os.environ if k.startswith("LAUNCHER_")]:
            del os.environ[k]
        os.environ.update(self.saved)


def test_writer_api_on_s3_with_multipart_and_restore(s3_bucket, s3_env, tmp_path):
    tuning = {"LAUNCHER_S3_MULTIPART_THRESHOLD": str(5 << 20), "LAUNCHER_S3_MULTIPART_CHUNKSIZE": str(5 << 20),
              "LAUNCHER_STAGING_DIR": str(tmp_path)}
    root = "s3://%s/w" % s3_bucket
    store = open_store(root)
    gens, _, _ = start_generation(store)
    big = os.urandom(6 << 20)
    with jobside_env(LAUNCHER_CKPT_ROOT=root, LAUNCHER_ATTEMPT=str(gens.generation), LAUNCHER_JOB_ID="j1",
                     **tuning):
        with jobside.save(10, sha256=True) as d:
            assert d.startswith(str(tmp_path))                 # local staging for S3 roots
            with open(os.path.join(d, "big.bin"), "wb") as f:
                f.write(big)
            os.makedirs(os.path.join(d, "sub"))
            with open(os.path.join(d, "sub", "small.json"), "w") as f:
                f.write("{}")
        with pytest.raises(ValueError):
            with jobside.save(11) as d:
                open(os.path.join(d, "x"), "w").write("x")
                raise ValueError("no")
    # staging cleaned up both times: only the per-root folder (and its ROOT note) stays
    (user,) = os.listdir(tmp_path)
    (per_root,) = os.listdir(tmp_path / user)
    assert os.listdir(tmp_path / user / per_root) == ["ROOT"]
    c = s3_env.client()
    head = c.head_object(Bucket=s3_bucket, Key="w/%s/big.bin" % step_dir(10, 1))
    assert "-" in head["ETag"]                                  # really a multipart upload
    assert not any(k.startswith("w/%s" % step_dir(11, 1)) for k in keys(c, s3_bucket))
    doc = json.loads(c.get_object(Bucket=s3_bucket, Key="w/%s/%s" % (step_dir(10, 1), COMMIT))["Body"].read())
    assert doc["run"] == "j1"
    assert {f["path"]: f["sha256"] for f in doc["files"]} == {
        "big.bin": hashlib.sha256(big).hexdigest(), "sub/small.json": hashlib.sha256(b"{}").hexdigest()}
    assert latest(store, verify=True).step == 10
    rec = read_attempt(store, 1)
    assert [(s["step"], s["committed"]) for s in rec["saves"]] == [(10, True), (11, False)]

    p = subprocess.run([sys.executable, "-m", "launcher.jobside", "resume-env", "--root", root],
                       capture_output=True, text=True, timeout=60, env=job_env(s3_env))
    assert p.returncode == 0, p.stderr
    assert "export LAUNCHER_RESUME_FROM=s3://%s/w/%s\n" % (s3_bucket, step_dir(10, 1)) in p.stdout
    assert "export LAUNCHER_GENERATION=2\n" in p.stdout
    with jobside_env(**tuning):
        with jobside.restore("s3://%s/w/%s" % (s3_bucket, step_dir(10, 1)), verify=True) as d:
            assert d.startswith(str(tmp_path))
            with open(os.path.join(d, "big.bin"), "rb") as f:
                assert f.read() == big
            restored = d
    assert not os.path.exists(restored)


def test_gc_on_s3_quarantines_under_a_prefix(s3_bucket, s3_env):
    c = s3_env.client()
    root = "s3://%s/g" % s3_bucket
    store = open_store(root)
    start_generation(store)
    for s in (1, 2, 3):
        s3ckpt(c, s3_bucket, "g", s, 1)
    s3ckpt(c, s3_bucket, "g", 0, 1, do_commit=False, files={"torn.bin": b"t" * 7})
    r = CliRunner().invoke(cli, ["checkpoints", root, "--gc", "--keep", "2", "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["deleted"] == ["s3://%s/g/%s" % (s3_bucket, step_dir(1, 1))]
    q = rep["quarantined"][0]["to"]
    assert q.startswith("s3://%s/g/.quarantine/%s." % (s3_bucket, step_dir(0, 1)))
    k = keys(c, s3_bucket)
    qkey = q[len("s3://%s/" % s3_bucket):] + "/torn.bin"
    assert c.get_object(Bucket=s3_bucket, Key=qkey)["Body"].read() == b"t" * 7
    assert not any(x.startswith("g/%s/" % step_dir(0, 1)) for x in k)
    assert not any(x.startswith("g/%s/" % step_dir(1, 1)) for x in k)
    assert [x.step for x in scan(store)] == [3, 2]
    assert "g/" + GENERATIONS in k                          # gc never touches the fencing record


def test_framework_layout_on_s3(s3_bucket, s3_env):
    c = s3_env.client()
    put(c, s3_bucket, "f/step_10/.metadata")
    put(c, s3_bucket, "f/step_20/__0_0.distcp")
    put(c, s3_bucket, "f/30/_CHECKPOINT_METADATA")          # Orbax on S3 needs commit_success.txt
    st = {x.name: x.state for x in scan(open_store("s3://%s/f" % s3_bucket))}
    assert st == {"30": "torn", "step_20": "torn", "step_10": "committed"}
    r = CliRunner().invoke(cli, ["checkpoints", "s3://%s/f" % s3_bucket, "--json"])
    assert [x["state"] for x in json.loads(r.output)] == ["torn", "torn", "committed"]
