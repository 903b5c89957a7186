"""Paths from storage are hostile (POSIX roots): links are never followed out of ROOT,
FIFOs and devices are never opened in a way that blocks, manifests are capped, and every
command (`launcher checkpoints`, the job-side `resume-env`) answers in bounded time with
one clear line instead of hanging or printing a traceback."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys

import pytest

from launcher import jobside
from launcher.checkpoint import scratch
from launcher.checkpoint import (COMMIT, GENERATIONS, CheckpointError, commit, gc, latest, open_store, scan,
                                 step_dir)
from launcher.checkpoint.contract import (MAX_MANIFEST_BYTES, build_manifest, manifest_bytes, parse_manifest,
                                          unsafe_rel_path)
from launcher.checkpoint.errors import ManifestError, UnsafePath
from tests.fixtures.policy import service_unavailable

# Every test here would hang forever (or for minutes) without the fix: bound them, generously
# (a hang is forever; a CLI call on a machine at load 20 has taken 20 s: a tight bound only
# fails the slow, not the hung).
pytestmark = pytest.mark.timeout(600)


def run(args, env=None, timeout=120):
    e = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHER_")}
    e.update(env or {})
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=e)


def launcher_cli(*args, env=None):
    return run([os.path.join(os.path.dirname(sys.executable), "launcher"), *args], env=env)


def resume_env(root, env=None):
    return run([sys.executable, "-m", "launcher.jobside", "resume-env", "--root", str(root)], env=env)


def ckpt(root, step, gen=1, files=None, do_commit=True):
    d = root / step_dir(step, gen)
    d.mkdir(parents=True, exist_ok=True)
    for rel, data in (files or {"model.bin": b"m" * 100, "opt/state.bin": b"o" * 10}).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)
    if do_commit:
        commit(open_store(str(root)), step, gen, fence=False)
    return d


def one_line_error(p):
    assert p.returncode != 0, p.stdout
    assert "Traceback" not in p.stderr, p.stderr
    lines = [x for x in p.stderr.splitlines() if "error" in x]
    assert len(lines) == 1, p.stderr
    return lines[0]


# ---------------------------------------------------------------- manifest paths
@pytest.mark.parametrize("bad", ["../x", "a/../../x", "/etc/passwd", "a//b", "a/", "./a", "a/./b", "..", "",
                                 "a\\..\\b", "a\x00b", "a\nb"])
def test_a_manifest_path_that_could_leave_its_checkpoint_is_malformed(bad):
    assert unsafe_rel_path(bad)
    doc = build_manifest(1, 1, [("ok.bin", 1, None)])
    doc["files"].append({"path": bad, "size": 1, "sha256": None})
    with pytest.raises(ManifestError, match=r"files\[1\]\.path"):
        parse_manifest(manifest_bytes(doc), "w", 1, 1)


@pytest.mark.parametrize("good", ["a", "a/b/c.bin", "..a", "a..b/c", "shard-00001-of-00008.safetensors"])
def test_plain_relative_paths_are_accepted(good):
    assert unsafe_rel_path(good) == ""


# ---------------------------------------------------------------- symbolic links
def test_a_symlinked_file_in_a_committed_checkpoint_makes_it_torn_and_restore_refuses(tmp_path):
    root = tmp_path / "ck"
    ckpt(root, 1)
    d = ckpt(root, 2)
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"s" * 100)  # same size as the listed file: a size check alone would pass
    (d / "model.bin").unlink()
    (d / "model.bin").symlink_to(secret)
    entries = {e.step: e for e in scan(open_store(str(root)))}
    assert entries[2].state == "torn" and "symbolic link" in entries[2].reason
    assert latest(open_store(str(root))).step == 1
    with pytest.raises(CheckpointError, match="symbolic link"):
        with jobside.restore(str(d)):
            pass


def test_save_refuses_to_commit_a_symlink_the_program_wrote(tmp_path, monkeypatch):
    root = tmp_path / "ck"
    monkeypatch.setenv("LAUNCHER_ATTEMPT", "1")
    with pytest.raises(CheckpointError, match="symbolic link.*regular files only"):
        with jobside.save(3, root=str(root)) as d:
            open(os.path.join(d, "model.bin"), "wb").write(b"x")
            os.symlink("/etc/hostname", os.path.join(d, "link"))
    assert not (root / step_dir(3, 1) / COMMIT).exists()


def test_a_symlinked_step_dir_is_reported_never_resumed_and_gc_leaves_its_target_alone(tmp_path):
    root, outside = tmp_path / "ck", tmp_path / "outside"
    ckpt(root, 1)
    ckpt(root, 2)
    target = ckpt(outside, 9)  # a valid committed checkpoint outside ROOT
    (root / step_dir(9, 1)).symlink_to(target)
    (root / step_dir(8, 1)).symlink_to(outside / "nowhere")  # dangling
    store = open_store(str(root))
    entries = {e.step: e for e in scan(store)}
    assert entries[9].state == "torn" and entries[9].foreign and "symbolic link" in entries[9].reason
    assert entries[8].state == "torn" and entries[8].foreign
    assert latest(store).step == 2
    p = launcher_cli("checkpoints", str(root), "--gc", "--keep", "1")
    assert p.returncode == 0, p.stderr
    assert (target / COMMIT).exists() and (target / "model.bin").exists()
    assert (root / step_dir(9, 1)).is_symlink()  # left in place, not moved or deleted
    assert not (root / step_dir(1, 1)).exists()  # the ordinary gc still happened
    assert "left in place: not a checkpoint" in p.stdout


def test_gc_never_quarantines_through_a_symlinked_quarantine_dir(tmp_path):
    root, elsewhere = tmp_path / "ck", tmp_path / "elsewhere"
    elsewhere.mkdir()
    ckpt(root, 1)
    ckpt(root, 2)
    ckpt(root, 0, do_commit=False)  # torn, older than the newest commit: quarantined normally
    (root / ".quarantine").symlink_to(elsewhere)
    rep = gc(open_store(str(root)), keep=2)
    assert list(elsewhere.iterdir()) == []
    assert (root / step_dir(0, 1)).is_dir()
    assert any("could not quarantine" in s["reason"] and "symbolic link" in s["reason"] for s in rep["skipped"])


def test_writes_never_go_through_a_symlinked_metadata_dir(tmp_path, monkeypatch):
    root, elsewhere = tmp_path / "ck", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (root / ".launcher").symlink_to(elsewhere)
    store = open_store(str(root))
    with pytest.raises(UnsafePath, match="symbolic link"):
        store.put(".launcher/attempts/g1.json", b"{}")
    p = resume_env(root)  # the advisory attempt record is skipped; the start itself works
    assert p.returncode == 0, p.stderr
    assert list(elsewhere.iterdir()) == []


# ---------------------------------------------------------------- FIFOs, devices, huge files
def _fifo(path):
    os.mkfifo(path)


def _dev_zero_link(path):
    os.symlink("/dev/zero", path)


def _dev_zero_node(path):
    if os.geteuid() != 0:
        service_unavailable("this test's prerequisite", "mknod of a character device needs root (the symlink-to-/dev/zero case covers non-root)")
    os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 5))  # what /dev/zero is


SPECIALS = {"fifo": _fifo, "dev-zero-link": _dev_zero_link, "dev-zero-node": _dev_zero_node}


@pytest.mark.parametrize("kind", sorted(SPECIALS))
def test_a_special_file_named_commit_json_is_torn_and_no_command_hangs(tmp_path, kind):
    root = tmp_path / "ck"
    ckpt(root, 1)
    d = ckpt(root, 2, do_commit=False)
    SPECIALS[kind](str(d / COMMIT))
    p = launcher_cli("checkpoints", str(root), "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["step"]: r for r in json.loads(p.stdout)}
    assert rows[2]["state"] == "torn" and "not a regular file" in rows[2]["reason"]
    assert rows[1]["state"] == "committed"
    p = resume_env(root)
    assert p.returncode == 0, p.stderr
    assert "LAUNCHER_RESUME_STEP=1" in p.stdout
    # resume-env started generation 2 from step 1: step 2 of generation 1 is now a stale
    # fork, so gc moves it aside whole (a rename: the special file is never opened)
    p = launcher_cli("checkpoints", str(root), "--gc", "--keep", "1")
    assert p.returncode == 0, p.stderr
    moved = list((root / ".quarantine").glob(step_dir(2, 1) + ".*/" + COMMIT))
    assert len(moved) == 1 and not moved[0].is_file()


@pytest.mark.parametrize("kind", sorted(SPECIALS))
def test_a_special_file_named_generations_json_is_one_clear_error(tmp_path, kind):
    root = tmp_path / "ck"
    ckpt(root, 1)
    SPECIALS[kind](str(root / GENERATIONS))
    line = one_line_error(launcher_cli("checkpoints", str(root)))
    assert "GENERATIONS.json" in line and "not a regular file" in line
    line = one_line_error(resume_env(root))
    assert "GENERATIONS.json" in line and "not a regular file" in line


@pytest.mark.parametrize("marker", ["latest", "latest_checkpointed_iteration.txt"])
def test_a_fifo_framework_tracker_is_reported_not_read(tmp_path, marker):
    root = tmp_path / "ck"
    d = root / ("global_step5" if marker == "latest" else "iter_0000005")
    d.mkdir(parents=True)
    (d / "mp_rank_00_model_states.pt").write_bytes(b"x" * 10)
    (d / "model_optim_rng.pt").write_bytes(b"x" * 10)
    os.mkfifo(root / marker)
    p = launcher_cli("checkpoints", str(root), "--json")
    assert p.returncode == 0, p.stderr
    (row,) = json.loads(p.stdout)
    assert row["state"] == "torn" and "FIFO" in row["reason"]
    assert resume_env(root).returncode == 0


def test_a_fifo_dcp_metadata_marker_does_not_count_as_a_commit(tmp_path):
    root = tmp_path / "ck"
    d = root / "step_5"
    d.mkdir(parents=True)
    (d / "__0_0.distcp").write_bytes(b"x")
    os.mkfifo(d / ".metadata")
    (e,) = scan(open_store(str(root)))
    assert e.state == "torn"


def test_an_oversized_commit_json_is_refused_without_reading_it(tmp_path):
    root = tmp_path / "ck"
    ckpt(root, 1)
    d = ckpt(root, 2, do_commit=False)
    with open(d / COMMIT, "wb") as f:  # sparse: costs no disk
        f.truncate(MAX_MANIFEST_BYTES + 1)
    e = {e.step: e for e in scan(open_store(str(root)))}[2]
    assert e.state == "torn" and "larger than" in e.reason


# ---------------------------------------------------------------- full disk
def test_resume_env_on_a_full_checkpoint_disk_prints_one_line(tmp_path):
    if shutil.which("unshare") is None:
        service_unavailable("this test's prerequisite", "needs unshare(1) to mount a tiny tmpfs")
    mnt = tmp_path / "full"
    mnt.mkdir()
    ns = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    script = ('mount -t tmpfs -o size=64k tmpfs "$1" && mkdir "$1/ck" && '
              '(dd if=/dev/zero of="$1/fill" bs=4k count=64 2>/dev/null; true) && '
              'exec "$2" -m launcher.jobside resume-env --root "$1/ck"')
    p = run(ns + ["sh", "-c", script, "_", str(mnt), sys.executable])
    if "mount" in p.stderr and "permission" in p.stderr.lower():
        service_unavailable("this test's prerequisite", "cannot mount a tmpfs here: %s" % p.stderr.strip())
    line = one_line_error(p)
    assert "No space left on device" in line and "GENERATIONS.json" in line
    assert p.stdout == ""


# ---------------------------------------------------------------- staging owners
def test_staging_of_a_dead_or_reused_pid_counts_as_dead():
    """Owner = pid + process start time + boot id: a pid now held by another process
    does not keep a dead writer's staging alive."""
    me = {"pid": os.getpid(), "start": scratch.process_start(os.getpid()), "boot": scratch._boot_id(),
          "host": socket.gethostname()}
    assert scratch.owner_alive(me)
    assert not scratch.owner_alive(dict(me, start=(me["start"] or 0) + 12345))
    assert not scratch.owner_alive(dict(me, boot="another-boot"))
    assert scratch.owner_alive(dict(me, host="another-host"))  # cannot tell: never removed
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert not scratch.owner_alive(dict(me, pid=gone.pid, start=None))


def test_a_directory_nested_absurdly_deep_is_reported_not_walked(tmp_path):
    root = tmp_path / "ck"
    ckpt(root, 1)
    d = ckpt(root, 2, do_commit=False)
    deep = d
    for _ in range(200):
        deep = deep / "d"
    deep.mkdir(parents=True)
    with pytest.raises(CheckpointError, match="nested more than"):
        commit(open_store(str(root)), 2, 1, fence=False)
    p = launcher_cli("checkpoints", str(root))
    assert p.returncode == 0 and "Traceback" not in p.stderr


def test_save_never_writes_through_a_symlinked_step_dir(tmp_path, monkeypatch):
    root, elsewhere = tmp_path / "ck", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (root / step_dir(4, 1)).symlink_to(elsewhere)
    monkeypatch.setenv("LAUNCHER_ATTEMPT", "1")
    with pytest.raises(UnsafePath, match="symbolic link"):
        with jobside.save(4, root=str(root)) as d:
            open(os.path.join(d, "model.bin"), "wb").write(b"x")
    assert list(elsewhere.iterdir()) == []


def test_a_manifest_listing_a_path_as_file_and_directory_is_malformed():
    doc = build_manifest(1, 1, [("a", 1, None), ("a/b", 1, None)])
    with pytest.raises(ManifestError, match="as a file and as a directory"):
        parse_manifest(manifest_bytes(doc), "w", 1, 1)
