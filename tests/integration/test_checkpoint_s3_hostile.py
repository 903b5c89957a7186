"""Keys in a bucket are hostile: restore fetches exactly what COMMIT.json lists and never
writes outside its copy; a save killed with -9 leaves staging that the next save or start
removes (a live writer's staging is never touched). Against a real moto_server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from launcher import jobside
from launcher.checkpoint import COMMIT, CheckpointError, latest, open_store, scan, step_dir
from launcher.checkpoint import scratch
from launcher.checkpoint.contract import build_manifest, manifest_bytes
from launcher.checkpoint.errors import UnsafePath

pytestmark = [pytest.mark.s3, pytest.mark.timeout(120)]


def put(client, bucket, key, data=b"d" * 10):
    client.put_object(Bucket=bucket, Key=key, Body=data)


@pytest.fixture
def stage(tmp_path, monkeypatch):
    d = tmp_path / "stage"
    d.mkdir()
    monkeypatch.setenv("LAUNCHER_STAGING_DIR", str(d))
    for k in ("LAUNCHER_ATTEMPT", "LAUNCHER_CKPT_ROOT", "LAUNCHER_BACKEND", "LAUNCHER_CKPT_KEEP"):
        monkeypatch.delenv(k, raising=False)
    return d


def files_under(d):
    out = set()
    for dirpath, _dirs, files in os.walk(d):
        for f in files:
            out.add(os.path.relpath(os.path.join(dirpath, f), d))
    return out


def test_restore_downloads_exactly_the_listed_files_never_planted_ones(s3_bucket, s3_env, stage, tmp_path):
    c = s3_env.client()
    root = "s3://%s/run" % s3_bucket
    with jobside.save(4, root=root, generation=1) as d:
        os.makedirs(os.path.join(d, "opt"))
        open(os.path.join(d, "model.bin"), "wb").write(b"m" * 100)
        open(os.path.join(d, "opt", "state.bin"), "wb").write(b"o" * 10)
    name = step_dir(4, 1)
    # someone with write access to the bucket plants keys after the commit
    put(c, s3_bucket, "run/%s/evil.sh" % name, b"#!/bin/sh\nrm -rf ~\n")
    put(c, s3_bucket, "run/%s/opt/extra.pt" % name)
    put(c, s3_bucket, "run/%s/../../escape.txt" % name)
    put(c, s3_bucket, "run/%s/a/../../../../escape2.txt" % name)
    e = latest(open_store(root))
    assert e is not None and e.step == 4
    outside_before = files_under(tmp_path)
    with jobside.restore(e.path) as local:
        assert files_under(local) == {"model.bin", os.path.join("opt", "state.bin"), COMMIT}
        assert open(os.path.join(local, "model.bin"), "rb").read() == b"m" * 100
    new = files_under(tmp_path) - outside_before
    assert not [p for p in new if "escape" in p or "evil" in p], new
    assert not os.path.exists(os.path.join(str(stage), "..", "escape.txt"))


@pytest.mark.parametrize("bad", ["../../escape.txt", "/etc/evil", "a//b", "x\\..\\..\\y"])
def test_a_manifest_listing_a_path_outside_the_checkpoint_is_never_restored(s3_bucket, s3_env, stage, bad):
    c = s3_env.client()
    root = "s3://%s/run" % s3_bucket
    name = step_dir(7, 1)
    put(c, s3_bucket, "run/%s/model.bin" % name)
    put(c, s3_bucket, "run/%s/%s" % (name, bad))
    doc = build_manifest(7, 1, [("model.bin", 10, None)])
    doc["files"].append({"path": bad, "size": 10, "sha256": None})
    put(c, s3_bucket, "run/%s/%s" % (name, COMMIT), manifest_bytes(doc))
    (e,) = scan(open_store(root))
    assert e.state == "torn" and "plain relative path" in e.reason
    with pytest.raises(CheckpointError, match="plain relative path"):
        with jobside.restore("%s/%s" % (root, name)):
            pass
    assert files_under(stage) == set() or all("escape" not in p for p in files_under(stage))


def test_a_framework_checkpoint_with_a_dotdot_key_is_refused_on_restore(s3_bucket, s3_env, stage, tmp_path):
    c = s3_env.client()
    root = "s3://%s/run" % s3_bucket
    put(c, s3_bucket, "run/step_5/.metadata")
    put(c, s3_bucket, "run/step_5/__0_0.distcp")
    put(c, s3_bucket, "run/step_5/a/../../../../../escape.txt")
    before = files_under(tmp_path)
    with pytest.raises(UnsafePath, match="'..' part"):
        with jobside.restore(root + "/step_5"):
            pass
    assert [p for p in files_under(tmp_path) - before if "escape" in p or "distcp" in p] == []


def test_a_framework_checkpoint_on_s3_restores_whole_skipping_folder_markers(s3_bucket, s3_env, stage):
    c = s3_env.client()
    root = "s3://%s/run" % s3_bucket
    put(c, s3_bucket, "run/step_5/", b"")  # the "folder" object consoles create
    put(c, s3_bucket, "run/step_5/.metadata")
    put(c, s3_bucket, "run/step_5/shards/", b"")
    put(c, s3_bucket, "run/step_5/shards/__0_0.distcp")
    (e,) = scan(open_store(root))
    assert e.state == "committed"
    with jobside.restore(e.path) as local:
        assert files_under(local) == {".metadata", os.path.join("shards", "__0_0.distcp")}


def test_an_oversized_commit_json_on_s3_is_torn(s3_bucket, s3_env, monkeypatch):
    from launcher.checkpoint import contract, store as store_mod

    c = s3_env.client()
    root = "s3://%s/run" % s3_bucket
    name = step_dir(2, 1)
    put(c, s3_bucket, "run/%s/model.bin" % name)
    doc = build_manifest(2, 1, [("model.bin", 10, None)])
    doc["pad"] = "x" * 5000
    put(c, s3_bucket, "run/%s/%s" % (name, COMMIT), manifest_bytes(doc))
    monkeypatch.setattr(contract, "MAX_MANIFEST_BYTES", 4096)
    monkeypatch.setattr(store_mod.S3Store.read, "__defaults__", (4096,))
    (e,) = scan(open_store(root))
    assert e.state == "torn" and "larger than" in e.reason


# ---------------------------------------------------------------- staging after kill -9
_WRITER = r"""
import os, sys, time
from launcher import jobside
with jobside.save(int(sys.argv[2]), root=sys.argv[1], generation=1) as d:
    open(os.path.join(d, "model.bin"), "wb").write(b"m" * (1 << 20))
    print(d, flush=True)
    time.sleep(600)
"""


def start_writer(root, step, env):
    p = subprocess.Popen([sys.executable, "-c", _WRITER, root, str(step)], stdout=subprocess.PIPE, text=True,
                         env=env)
    line = p.stdout.readline().strip()
    assert line and os.path.isfile(os.path.join(line, "model.bin")), line
    return p, line


def writer_env(moto, stage):
    e = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHER_")}
    e.update(moto.env())
    e["LAUNCHER_STAGING_DIR"] = str(stage)
    return e


def test_kill_9_mid_s3_save_leaves_staging_that_the_next_save_removes(s3_bucket, s3_env, stage):
    root = "s3://%s/run" % s3_bucket
    env = writer_env(s3_env, stage)
    dead, dead_dir = start_writer(root, 1, env)
    live, live_dir = start_writer(root, 2, env)
    try:
        os.kill(dead.pid, signal.SIGKILL)
        dead.wait(timeout=30)
        entry = os.path.dirname(dead_dir)
        assert os.path.isdir(entry)  # what a kill -9 leaves behind
        assert os.path.dirname(entry) == scratch.root_dir(root)  # in the well-known per-root place
        with jobside.save(3, root=root, generation=1) as d:
            open(os.path.join(d, "model.bin"), "wb").write(b"x")
        assert not os.path.exists(entry)  # the dead writer's copy is gone
        assert os.path.isfile(os.path.join(live_dir, "model.bin"))  # the live writer's is not
        assert latest(open_store(root)).step == 3
        assert [os.path.basename(p) for p in os.listdir(scratch.root_dir(root)) if p != "ROOT"] == \
            [os.path.basename(os.path.dirname(live_dir))]
    finally:
        live.kill()
        live.wait(timeout=30)


def test_kill_9_mid_s3_save_is_cleaned_by_the_next_start(s3_bucket, s3_env, stage):
    root = "s3://%s/run" % s3_bucket
    env = writer_env(s3_env, stage)
    dead, dead_dir = start_writer(root, 1, env)
    os.kill(dead.pid, signal.SIGKILL)
    dead.wait(timeout=30)
    p = subprocess.run([sys.executable, "-m", "launcher.jobside", "resume-env", "--root", root], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert not os.path.exists(os.path.dirname(dead_dir))
    assert "removed stale staging" in p.stderr
