"""put_file / put_tree against a real sshd (SFTP and the shell fallback), including a
remote disk that fills up (a 256 KiB tmpfs mounted for the test). The login is the
server's throw-away (noisy) user: remote paths are scratch directories it owns."""

from __future__ import annotations

import os
import subprocess

import pytest

from launcher.transport import SSHRunner
from launcher.transport.errors import RemoteDiskFullError, StagingError

pytestmark = [pytest.mark.sshd, pytest.mark.usefixtures("fresh_ssh_pool")]


def runner(server):
    return SSHRunner(dict(ssh_host=server.host, ssh_port=server.port, ssh_user=server.user,
                          ssh_key=str(server.client_key), known_hosts=str(server.known_hosts), ssh_config="",
                          ssh_agent=False))


def leftovers(d):
    return sorted(n for n in os.listdir(d) if ".tmp-" in n or ".old-" in n)


@pytest.fixture(params=["sftp", "shell"])
def server(request, sshd_server, sshd_factory):
    """The same tests with SFTP and with a server that has no SFTP subsystem."""
    return sshd_server if request.param == "sftp" else sshd_factory(sftp=False)


def test_put_file_creates_parents_sets_the_mode_and_leaves_no_temp_file(server):
    dest = server.scratch("put") / "a" / "b" / "job.sh"
    runner(server).put_file(str(dest), b"#!/bin/sh\necho hi\n", 0o750)
    assert dest.read_bytes() == b"#!/bin/sh\necho hi\n"
    assert oct(dest.stat().st_mode & 0o777) == "0o750"
    assert leftovers(dest.parent) == []


def test_put_file_replaces_by_rename_so_a_reader_never_sees_a_partial_file(server):
    remote = server.scratch("rename")
    dest = remote / "script.sh"
    dest.write_text("old")
    server.give(dest)
    with open(dest) as reader:  # a job already reading the old script keeps the old content
        r = runner(server)
        r.put_file(str(dest), b"new" * 100000)
        assert reader.read() == "old"
    assert dest.read_bytes() == b"new" * 100000 and leftovers(remote) == []


def test_put_file_to_an_impossible_path_is_a_staging_error_not_a_full_disk(server):
    remote = server.scratch("impossible")
    (remote / "plain-file").write_text("")
    with pytest.raises(StagingError) as e:
        runner(server).put_file(str(remote / "plain-file" / "job.sh"), b"x")
    assert not isinstance(e.value, RemoteDiskFullError) and "plain-file" in str(e.value)


def test_put_tree_copies_modes_mtimes_and_symlinks_and_honours_excludes(server, tmp_path):
    src = tmp_path / "src"
    (src / "pkg" / "__pycache__").mkdir(parents=True)
    (src / "pkg" / "train.py").write_text("print('train')\n")
    (src / "pkg" / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0")
    (src / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(src / "run.sh", 0o755)
    os.utime(src / "pkg" / "train.py", (1_600_000_000, 1_600_000_000))
    os.symlink("pkg/train.py", src / "link.py")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref")
    (src / "name with space; $(x)").write_text("odd")
    dest = server.scratch("tree") / "remote" / "workdir"
    stats = runner(server).put_tree(str(src), str(dest), exclude=[".git", "__pycache__"])
    assert stats.files == 3  # regular files; the symlink is a link
    assert sorted(os.listdir(dest)) == ["link.py", "name with space; $(x)", "pkg", "run.sh"]
    assert os.listdir(dest / "pkg") == ["train.py"]
    assert (dest / "pkg" / "train.py").stat().st_mtime == 1_600_000_000
    assert os.access(dest / "run.sh", os.X_OK) and os.readlink(dest / "link.py") == "pkg/train.py"
    assert leftovers(dest.parent) == []


def test_put_tree_replaces_an_existing_directory_whole(server, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "new.txt").write_text("new")
    remote = server.scratch("replace")
    dest = remote / "workdir"
    dest.mkdir()
    (dest / "stale.txt").write_text("stale")
    server.give(dest)
    runner(server).put_tree(str(src), str(dest))
    assert os.listdir(dest) == ["new.txt"] and leftovers(remote) == []


@pytest.fixture
def tiny_disk(server):
    """A 256 KiB tmpfs owned by the login user: a remote file system that fills up for real."""
    from tests.fixtures.policy import service_unavailable

    d = server.scratch("tiny")
    owner = f",uid={d.stat().st_uid},gid={d.stat().st_gid}"
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755" + owner, "tmpfs", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        service_unavailable("tmpfs mount (for the disk-full tests)", r.stderr.strip() or "mount failed")
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=True)


def test_put_file_on_a_full_disk_says_so_and_leaves_the_old_file(server, tiny_disk):
    dest = tiny_disk / "job.sh"
    dest.write_text("old")
    server.give(dest)
    with pytest.raises(RemoteDiskFullError, match="full"):
        runner(server).put_file(str(dest), os.urandom(1024 * 1024))
    assert dest.read_text() == "old" and leftovers(tiny_disk) == []


def test_put_tree_on_a_full_disk_says_so_and_leaves_the_old_tree(server, tiny_disk, tmp_path):
    src = tmp_path / "big"
    src.mkdir()
    for i in range(4):
        (src / f"blob{i}").write_bytes(os.urandom(200 * 1024))
    dest = tiny_disk / "workdir"
    dest.mkdir()
    (dest / "old.txt").write_text("old")
    server.give(dest)
    with pytest.raises(RemoteDiskFullError, match="full"):
        runner(server).put_tree(str(src), str(dest))
    assert os.listdir(dest) == ["old.txt"] and leftovers(tiny_disk) == []
