"""`launcher watch` never blocks on one job's storage: reading a checkpoint root is
bounded in time, so a hung S3 endpoint or a FIFO under one job's root leaves the other
jobs' progress recorded in the same cycle. Real local jobs, a real TCP endpoint that
accepts and never answers (what a hung S3 endpoint looks like to a client)."""

from __future__ import annotations

import os
import socket

import pytest

from launcher.api.context import App
from launcher.checkpoint import commit, open_store, step_dir
from launcher.launching.launch import launch
from launcher.recovery import watch
from launcher.recovery.progress import read_progress
from launcher.backend.sections import spec_from_text

# Without the bound, the hung root blocks for botocore's 4 tries x 60 s read timeout.
pytestmark = [pytest.mark.s3, pytest.mark.timeout(200)]  # under the unbounded 240 s, over a slow machine's launch


def hang_s3(monkeypatch):
    """Point S3 at an endpoint on 127.0.0.1 that accepts connections and never answers.
    Returns the listening socket (close it to end the hung reads)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:%d" % s.getsockname()[1])
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull,
                 "AWS_SHARED_CREDENTIALS_FILE": os.devnull}.items():
        monkeypatch.setenv(k, v)
    return s


@pytest.fixture
def hung_s3(monkeypatch):
    s = hang_s3(monkeypatch)
    yield s
    s.close()  # resets the pending connections: hung reads end at once


@pytest.fixture
def app(launcher_env, monkeypatch):
    monkeypatch.setenv("LAUNCHER_STORAGE_TIMEOUT", "2")
    a = App()
    yield a
    a.close()


def committed_root(path, steps):
    for s in steps:
        d = path / step_dir(s, 1)
        d.mkdir(parents=True)
        (d / "model.bin").write_bytes(b"m" * 10)
        commit(open_store(str(path)), s, 1, fence=False)
    return path


def test_read_progress_of_a_hung_root_returns_unknown_in_bounded_time(hung_s3):
    p = read_progress("s3://bucket/run", timeout=1)
    assert p.unknown and "no answer" in p.error and p.committed_step is None
    again = read_progress("s3://bucket/run", timeout=1)  # the first read is still hung: not piled up
    assert again.unknown and "still waiting" in again.error


def test_read_progress_of_a_healthy_root_is_unchanged(tmp_path):
    p = read_progress(str(committed_root(tmp_path / "ck", [3, 5])), timeout=10)
    assert not p.unknown and p.error == "" and p.committed_step == 5


def test_a_watch_cycle_records_every_other_job_while_one_root_hangs(app, s3_bucket, monkeypatch, tmp_path):
    healthy = committed_root(tmp_path / "healthy", [4, 7])
    fifo = committed_root(tmp_path / "fifo", [1])
    d = fifo / step_dir(2, 1)
    d.mkdir()
    (d / "model.bin").write_bytes(b"x")
    os.mkfifo(d / "COMMIT.json")
    jobs = {}
    for name, root in (("hung", "s3://%s/run" % s3_bucket), ("healthy", str(healthy)), ("fifo", str(fifo))):
        text = "name: %s\nrun: sleep 300\ncheckpoint: {root: '%s'}\n" % (name, root)
        jobs[name] = launch(app, spec_from_text(text), text, None, "local")  # launched while S3 answers
    hung = hang_s3(monkeypatch)  # ... and now the S3 endpoint hangs
    try:
        outcomes = {o.job_id: o for o in watch.cycle(app)}
        assert set(outcomes) == {j.job_id for j in jobs.values()}
        assert app.store.get_job(jobs["healthy"].job_id).last_step == 7
        assert app.store.get_job(jobs["fifo"].job_id).last_step == 1
        assert app.store.get_job(jobs["hung"].job_id).last_step is None
    finally:
        for j in jobs.values():
            app.backend("local").cancel(j.handle)
        hung.close()
