"""A FIFO, a device or an endless file named as an input never hangs the launcher nor is read
without bound (issue 20, §9). Before the fix a FIFO given as the spec, as ``--facts`` or as
``state.db`` blocked in open() forever, and ``--facts /dev/zero`` read until memory ran out.
Each case runs in a child process with a time and memory bound, so a regression fails
instead of hanging the suite."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

LAUNCHER = str(Path(sys.executable).parent / "launcher")
MEMORY = 1 << 30  # bytes: far more than any refusal needs


def _bounded():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY + (2 << 30), MEMORY + (2 << 30)))


def run(tmp_path, *args, home=None):
    cfg = tmp_path / "c.yaml"
    if not cfg.exists():
        cfg.write_text("targets:\n  cl: {backend: slurm}\n")
    env = {**os.environ, "LAUNCHER_HOME": str(home or tmp_path / "home"), "LAUNCHER_CONFIG": str(cfg)}
    env.pop("LAUNCHER_DEBUG", None)
    try:
        return subprocess.run([LAUNCHER, *map(str, args)], env=env, capture_output=True, text=True, timeout=120,
                              cwd=str(tmp_path), preexec_fn=_bounded)
    except subprocess.TimeoutExpired:
        pytest.fail(f"launcher {' '.join(map(str, args))} did not end within 120 s (waited for it to refuse a FIFO or an endless file): it hung")


def refused(p, *words):
    assert p.returncode not in (0, 70), (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr, p.stderr
    for w in words:
        assert w in p.stderr, (w, p.stderr)


def test_a_fifo_as_the_spec_is_refused(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    refused(run(tmp_path, "validate", fifo), "FIFO")


def test_a_fifo_as_the_config_is_refused(tmp_path):
    os.mkfifo(tmp_path / "c.yaml")
    (tmp_path / "j.yaml").write_text("name: j\nrun: echo hi\n")
    refused(run(tmp_path, "validate", tmp_path / "j.yaml", ), "FIFO")


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_facts_from_a_fifo_or_dev_zero_are_refused(tmp_path, kind):
    (tmp_path / "j.yaml").write_text("name: j\nrun: echo hi\n")
    facts = tmp_path / "facts.json"
    if kind == "fifo":
        os.mkfifo(facts)
    else:
        facts = Path("/dev/zero")
    refused(run(tmp_path, "render", tmp_path / "j.yaml", "-t", "cl", "--facts", facts),
            str(facts), "FIFO" if kind == "fifo" else "character device")


def test_a_fifo_as_state_db_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    os.mkfifo(home / "state.db")
    p = run(tmp_path, "status", home=home)
    refused(p, "state.db", "FIFO")
    assert p.returncode == 3


def test_read_regular_bounds_what_it_reads(tmp_path):
    from launcher.core.regular import NotReadable, read_regular

    f = tmp_path / "big"
    f.write_bytes(b"x" * 101)
    assert read_regular(f, limit=101) == b"x" * 101
    with pytest.raises(NotReadable, match="more than the 100"):
        read_regular(f, limit=100)
