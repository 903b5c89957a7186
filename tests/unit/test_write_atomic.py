"""write_atomic: the one atomic replace of a local file (scripts, caches, records)."""

import os
import stat

import pytest

from launcher.checkpoint.posix_io import write_atomic


def test_replaces_the_file_whole_with_the_mode_and_creates_parents(tmp_path):
    p = tmp_path / "a" / "b" / "script.sh"
    write_atomic(p, "echo one\n", 0o700)
    write_atomic(p, b"echo two\n", 0o700)
    assert p.read_bytes() == b"echo two\n"
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o700
    assert os.listdir(p.parent) == ["script.sh"]  # no temp file left behind


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    p = tmp_path / "cache.json"
    write_atomic(p, "old", durable=True)
    with pytest.raises(TypeError):
        write_atomic(p, 12345)  # neither bytes nor str: fails inside, after the temp file exists
    assert p.read_text() == "old"
    assert os.listdir(tmp_path) == ["cache.json"]


def test_another_writers_temp_file_is_left_alone(tmp_path):
    # a temp file of a write in progress elsewhere (same directory, same target) is not reused
    p = tmp_path / "probe.json"
    theirs = tmp_path / ".probe.json.tmp-inprogress"
    theirs.write_text("half of")
    write_atomic(p, "mine")
    assert p.read_text() == "mine" and theirs.read_text() == "half of"
    assert sorted(os.listdir(tmp_path)) == [".probe.json.tmp-inprogress", "probe.json"]
