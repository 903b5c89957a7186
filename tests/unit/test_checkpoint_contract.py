"""The committed-checkpoint contract on a real POSIX directory: COMMIT.json, write-once,
discovery order, size/sha checks, malformed input, generations and fencing."""

from __future__ import annotations

import datetime
import hashlib
import json
import multiprocessing
import os
import threading

import pytest

from launcher.checkpoint import (COMMIT, GENERATIONS, AlreadyCommitted, CheckpointError, Conflict, ManifestError,
                                 RootUnavailable, Superseded, bump_generation, commit, latest, open_store,
                                 parse_step_dir, read_generations, scan, start_generation, step_dir)


def write_ckpt(root, step, gen, files=None, do_commit=True, **kw):
    """Write files into ROOT/step-N.gG and (optionally) commit them."""
    files = files if files is not None else {"model.bin": b"m" * 1000, "sub/opt.bin": b"o" * 300}
    d = os.path.join(str(root), step_dir(step, gen))
    for rel, data in files.items():
        p = os.path.join(d, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
    if do_commit:
        commit(open_store(str(root)), step, gen, fence=False, **kw)
    return d


def tree_snapshot(root):
    out = {}
    for dp, _dn, fn in os.walk(str(root)):
        for f in fn:
            p = os.path.join(dp, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, str(root))] = hashlib.sha256(fh.read()).hexdigest()
    return out


def test_names_round_trip():
    assert step_dir(42, 3) == "step-000000042.g3"
    assert parse_step_dir("step-000000042.g3") == (42, 3)
    assert parse_step_dir("step-1234567890.g12") == (1234567890, 12)
    for bad in ("step-42.g3", "step-000000042", "step-000000042.gx", "xstep-000000042.g3"):
        assert parse_step_dir(bad) is None
    with pytest.raises(ValueError):
        step_dir(-1, 0)


def test_commit_json_has_exactly_the_contract_keys(tmp_path):
    d = write_ckpt(tmp_path, 7, 2, sha256=True, run="job-1")
    with open(os.path.join(d, COMMIT)) as f:
        doc = json.load(f)
    assert set(doc) == {"step", "generation", "files", "created", "run"}
    assert (doc["step"], doc["generation"], doc["run"]) == (7, 2, "job-1")
    assert datetime.datetime.fromisoformat(doc["created"]).tzinfo is not None
    assert [f["path"] for f in doc["files"]] == ["model.bin", "sub/opt.bin"]
    for f in doc["files"]:
        assert set(f) == {"path", "size", "sha256"}
        with open(os.path.join(d, f["path"]), "rb") as fh:
            data = fh.read()
        assert f["size"] == len(data)
        assert f["sha256"] == hashlib.sha256(data).hexdigest()
    d2 = write_ckpt(tmp_path, 8, 2)
    with open(os.path.join(d2, COMMIT)) as f:
        doc2 = json.load(f)
    assert set(doc2) == {"step", "generation", "files", "created"}
    assert all(f["sha256"] is None for f in doc2["files"])
    # no temp file left next to COMMIT.json
    assert sorted(os.listdir(d2)) == [COMMIT, "model.bin", "sub"]


def test_commit_is_create_only_and_write_once(tmp_path):
    d = write_ckpt(tmp_path, 1, 1)
    before = open(os.path.join(d, COMMIT), "rb").read()
    with pytest.raises(AlreadyCommitted, match=str(d)):
        commit(open_store(str(tmp_path)), 1, 1, fence=False)
    assert open(os.path.join(d, COMMIT), "rb").read() == before


def test_racing_committers_have_exactly_one_winner(tmp_path):
    store = open_store(str(tmp_path))
    for rnd in range(20):
        write_ckpt(tmp_path, rnd, 1, do_commit=False)
        wins, barrier = [], threading.Barrier(6)

        def w():
            barrier.wait()
            try:
                commit(store, rnd, 1, fence=False, durable=False)
                wins.append(1)
            except AlreadyCommitted:
                pass
        ts = [threading.Thread(target=w) for _ in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert len(wins) == 1, rnd


def test_commit_of_nothing_is_an_error(tmp_path):
    os.makedirs(tmp_path / step_dir(5, 1))
    with pytest.raises(CheckpointError, match="nothing to commit"):
        commit(open_store(str(tmp_path)), 5, 1, fence=False)


def test_latest_orders_by_step_then_generation_never_mtime(tmp_path):
    for step, gen in ((100, 1), (200, 1), (200, 2), (50, 3)):
        write_ckpt(tmp_path, step, gen)
    # make the oldest checkpoints look the newest on disk
    for i, (step, gen) in enumerate(((200, 2), (200, 1), (100, 1), (50, 3))):
        os.utime(tmp_path / step_dir(step, gen), (1_000_000 + i * 1000, 1_000_000 + i * 1000))
    e = latest(open_store(str(tmp_path)))
    assert (e.step, e.generation) == (200, 2)
    assert e.path == str(tmp_path / step_dir(200, 2))
    names = [x.name for x in scan(open_store(str(tmp_path)))]
    assert names == [step_dir(200, 2), step_dir(200, 1), step_dir(100, 1), step_dir(50, 3)]


def test_torn_missing_and_resized_files_are_skipped(tmp_path):
    write_ckpt(tmp_path, 100, 1)
    write_ckpt(tmp_path, 200, 1, do_commit=False)                      # torn: no COMMIT.json
    d3 = write_ckpt(tmp_path, 300, 1)
    with open(os.path.join(d3, "model.bin"), "ab") as f:               # resized after commit
        f.write(b"x")
    d4 = write_ckpt(tmp_path, 400, 1)
    os.unlink(os.path.join(d4, "sub", "opt.bin"))                      # missing file
    log = []
    e = latest(open_store(str(tmp_path)), log=log)
    assert e.step == 100
    reasons = {x.step: (x.state, x.reason) for x in log}
    assert reasons[400] == ("torn", "sub/opt.bin: listed in COMMIT.json but missing")
    assert reasons[300] == ("torn", "model.bin: size 1001, COMMIT.json lists 1000")
    assert reasons[200] == ("torn", "no COMMIT.json (uncommitted or torn)")


def test_sha256_checked_only_when_asked(tmp_path):
    write_ckpt(tmp_path, 1, 1, sha256=True)
    d = write_ckpt(tmp_path, 2, 1, sha256=True)
    with open(os.path.join(d, "model.bin"), "r+b") as f:               # same size, other bytes
        f.write(b"X")
    store = open_store(str(tmp_path))
    assert latest(store).step == 2
    log = []
    assert latest(store, verify=True, log=log).step == 1
    assert log[0].reason == "model.bin: sha256 mismatch"


MALFORMED = {
    "not json": b"{\"step\": 3, ",
    "not an object": b"[1, 2]",
    "missing key": json.dumps({"step": 3, "generation": 1, "files": [{"path": "model.bin", "size": 1000}]}).encode(),
    "wrong step": json.dumps({"step": 4, "generation": 1, "created": "x",
                              "files": [{"path": "model.bin", "size": 1000, "sha256": None}]}).encode(),
    "escaping path": json.dumps({"step": 3, "generation": 1, "created": "x",
                                 "files": [{"path": "../step-000000001.g1/model.bin", "size": 1000,
                                            "sha256": None}]}).encode(),
    "bad size": json.dumps({"step": 3, "generation": 1, "created": "x",
                            "files": [{"path": "model.bin", "size": "1000", "sha256": None}]}).encode(),
    "bad sha": json.dumps({"step": 3, "generation": 1, "created": "x",
                           "files": [{"path": "model.bin", "size": 1000, "sha256": "abc"}]}).encode(),
    "empty files": json.dumps({"step": 3, "generation": 1, "created": "x", "files": []}).encode(),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_commit_json_is_reported_with_its_path_and_never_chosen(tmp_path, kind):
    write_ckpt(tmp_path, 1, 1)
    d = write_ckpt(tmp_path, 3, 1, do_commit=False)
    with open(os.path.join(d, COMMIT), "wb") as f:
        f.write(MALFORMED[kind])
    store = open_store(str(tmp_path))
    entries = {e.step: e for e in scan(store)}
    bad = entries[3]
    assert bad.state == "torn" and bad.malformed
    assert os.path.join(d, COMMIT) in bad.reason
    assert latest(store).step == 1
    before = tree_snapshot(tmp_path)
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "launcher.cli", "checkpoints", str(tmp_path), "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert [(r["step"], r["state"]) for r in rows] == [(3, "torn"), (1, "committed")]
    assert "warning: %s" % os.path.join(d, COMMIT) in p.stderr
    assert tree_snapshot(tmp_path) == before


def test_unusable_roots_give_clear_errors(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(RootUnavailable, match="%s: no such directory" % missing):
        scan(open_store(str(missing)))
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(RootUnavailable, match="%s: not a directory" % afile):
        latest(open_store(str(afile)))
    with pytest.raises(RootUnavailable, match="not a directory"):
        open_store(str(afile)).check_root(create=True)
    with pytest.raises(RootUnavailable, match="POSIX path or s3"):
        open_store("gs://bucket/x")


def test_unreadable_root_is_a_clear_error_and_nothing_changes():
    """A mode-000 ROOT, read by an unprivileged user (as root the test drops to nobody)."""
    import shutil
    import subprocess
    import sys
    import tempfile

    base = tempfile.mkdtemp(prefix="ckpt-unreadable-")
    try:
        os.chmod(base, 0o755)
        r = os.path.join(base, "root")
        write_ckpt(r, 1, 1)
        before = tree_snapshot(r)
        os.chmod(r, 0)
        argv = [sys.executable, "-m", "launcher.jobside", "latest", "--root", r]
        if os.geteuid() == 0:
            setpriv = shutil.which("setpriv")
            if not setpriv:
                pytest.fail("running as root without setpriv: cannot test an unreadable root")
            argv = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"] + argv
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=base)
        assert p.returncode == 1, (p.stdout, p.stderr)
        assert p.stdout == ""
        assert "%s: cannot read checkpoint root: Permission denied" % r in p.stderr
        os.chmod(r, 0o755)
        assert tree_snapshot(r) == before
    finally:
        for dp, dn, _fn in os.walk(base):
            for x in dn:
                os.chmod(os.path.join(dp, x), 0o755)
        shutil.rmtree(base)


def test_malformed_generations_json_is_an_error(tmp_path):
    write_ckpt(tmp_path, 1, 1)
    (tmp_path / GENERATIONS).write_text("{oops")
    with pytest.raises(ManifestError, match=str(tmp_path / GENERATIONS)):
        latest(open_store(str(tmp_path)))
    (tmp_path / GENERATIONS).write_text('{"generation": "2"}')
    with pytest.raises(ManifestError, match="malformed"):
        read_generations(open_store(str(tmp_path)))


def test_generation_cas_refuses_a_stale_token(tmp_path):
    store = open_store(str(tmp_path))
    g0 = read_generations(store)
    g1 = bump_generation(store, g0)
    assert g1.generation == 1
    with pytest.raises(Conflict):
        bump_generation(store, g0)                          # lost the race: token is old
    assert read_generations(store).generation == 1
    g2 = bump_generation(store, read_generations(store), hint=5)
    assert g2.generation == 5
    assert [h["generation"] for h in read_generations(store).history] == [1, 5]


def _start(root, q):
    gens, found, _ = start_generation(open_store(root), job_id="j")
    q.put(gens.generation)


def test_concurrent_starts_get_distinct_generations(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_start, args=(str(tmp_path), q)) for _ in range(6)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(180)  # six spawned interpreters; slow on a loaded machine
        assert p.exitcode == 0
    got = sorted(q.get(timeout=5) for _ in ps)
    assert got == [1, 2, 3, 4, 5, 6]
    hist = read_generations(open_store(str(tmp_path))).history
    assert [h["generation"] for h in hist] == [1, 2, 3, 4, 5, 6]


def test_zombie_generation_is_fenced_and_its_fork_ignored(tmp_path):
    store = open_store(str(tmp_path))
    g1, found, _ = start_generation(store)
    assert (g1.generation, found) == (1, None)
    for step in (100, 200):
        write_ckpt(tmp_path, step, 1, do_commit=False)
        commit(store, step, 1)                               # fenced commit passes: g1 is current
    g2, found, _ = start_generation(store)                   # the job restarts elsewhere
    assert (g2.generation, found.step, found.generation) == (2, 200, 1)
    assert g2.history[-1]["resume_step"] == 200

    # the zombie (generation 1) keeps going: its commit is refused, nothing committed
    write_ckpt(tmp_path, 300, 1, do_commit=False)
    with pytest.raises(Superseded, match="generation 1 was superseded by generation 2"):
        commit(store, 300, 1)
    assert not (tmp_path / step_dir(300, 1) / COMMIT).exists()

    # ... and a zombie commit that raced past the fence check is a stale fork
    write_ckpt(tmp_path, 400, 1)                             # commit without the fence
    entries = {(e.step, e.generation): e for e in scan(store)}
    assert entries[(400, 1)].state == "stale"
    assert "generation 2 resumed from step 200" in entries[(400, 1)].reason
    assert entries[(300, 1)].state == "stale"
    assert (latest(store).step, latest(store).generation) == (200, 1)

    write_ckpt(tmp_path, 250, 2, do_commit=False)
    commit(store, 250, 2)
    assert (latest(store).step, latest(store).generation) == (250, 2)
    # the next start forks from 250: the zombie's 400 stays stale
    g3, found, _ = start_generation(store)
    assert (g3.generation, found.step) == (3, 250)


def test_fork_point_is_the_lowest_later_resume(tmp_path):
    store = open_store(str(tmp_path))
    write_ckpt(tmp_path, 10, 1)
    write_ckpt(tmp_path, 20, 1)
    g = bump_generation(store, read_generations(store), hint=1)          # g1 fresh
    g = bump_generation(store, g, resume=latest(store), hint=4)          # g4 resumes at 20 (g2, g3 skipped)
    gens = read_generations(store)
    assert gens.fork_point(1) == (20, 4)
    assert gens.fork_point(3) == (20, 4)
    assert gens.fork_point(4) is None
    assert gens.stale_reason(21, 2) and not gens.stale_reason(20, 2)


def test_new_generation_is_above_every_generation_on_disk(tmp_path):
    # GENERATIONS.json lost (or never written), but generation 7 left checkpoints
    write_ckpt(tmp_path, 10, 7)
    gens, found, _ = start_generation(open_store(str(tmp_path)))
    assert gens.generation == 8 and found.step == 10
