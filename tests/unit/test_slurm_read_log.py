"""The Slurm backend reads a slice of an attempt's output where Slurm writes it (``ReadsLog``,
``launcher serve`` on a cluster behind SSH): one `sh` command on the login node, here this
machine's real shell through the backend's local runner (the SSH path runs the same command:
tests/integration/test_serve_remote_log.py)."""

from __future__ import annotations

import pytest

from launcher.backend.config import Target
from launcher.backend.protocols import Handle, ReadsLog, can
from launcher.core.errors import TransientError
from launcher_backends.slurm import SlurmBackend
from launcher_backends.slurm.options import SlurmOptions

OUTPUT = b"line 1\nline 2\n\xff\xfe not UTF-8\n" + b"x" * 5000 + b"\nlast line\n"


def backend() -> SlurmBackend:
    return SlurmBackend(Target("testcl", "slurm", SlurmOptions()))


def handle(job_dir) -> Handle:
    return Handle("slurm", "testcl", "j1", "4242", 1, extra={"job_dir": str(job_dir)})


def test_a_slice_arrives_byte_for_byte_from_an_offset_or_from_the_end(tmp_path):
    assert can(SlurmBackend, ReadsLog)
    (tmp_path / "slurm-4242.out").write_bytes(OUTPUT)
    b, h = backend(), handle(tmp_path)
    whole = b.read_log(h, 0, 1 << 20, 30)
    assert (whole.size, whole.start, whole.data) == (len(OUTPUT), 0, OUTPUT)
    assert whole.where == f"testcl:{tmp_path}/slurm-4242.out"
    mid = b.read_log(h, 7, 9, 30)
    assert (mid.start, mid.data) == (7, OUTPUT[7:16])
    tail = b.read_log(h, -10, 1 << 20, 30)
    assert (tail.start, tail.data) == (len(OUTPUT) - 10, OUTPUT[-10:])
    past = b.read_log(h, len(OUTPUT) + 50, 100, 30)  # a reader ahead of a replaced, shorter file
    assert (past.start, past.data) == (len(OUTPUT), b"")
    before = b.read_log(h, -(len(OUTPUT) + 50), 4, 30)  # more than the file from its end: its start
    assert (before.start, before.data) == (0, b"line")


def test_no_output_yet_is_file_not_found_and_an_unreadable_answer_is_transient(tmp_path):
    b, h = backend(), handle(tmp_path)
    with pytest.raises(FileNotFoundError):
        b.read_log(h, 0, 100, 30)
    (tmp_path / "slurm-4242.out").mkdir()  # stat gives a size, tail cannot read it: an empty slice, no error
    assert b.read_log(h, 0, 100, 30).data == b""
    broken = handle(tmp_path / "elsewhere")

    class Garbled:
        def run(self, argv, **kw):
            from launcher.transport.runner import Result

            return Result(argv, 0, "a banner, not a size\n###", "")

    b = SlurmBackend(Target("testcl", "slurm", SlurmOptions()), runner=Garbled())
    with pytest.raises(TransientError, match="could not read .*slurm-4242.out on testcl"):
        b.read_log(broken, 0, 100, 30)


def test_logs_over_a_connection_count_bytes_not_decoded_text(tmp_path, monkeypatch):
    """`launcher logs` through a login node: in slices of the file's bytes, so a byte that is not
    UTF-8 or a character cut between two slices neither skips nor repeats output (the offset
    counted the decoded text re-encoded: U+FFFD is 3 bytes for the 1 it replaced)."""
    import launcher_backends.slurm.backend as slurm_backend

    monkeypatch.setattr(slurm_backend, "REMOTE_LOG_CHUNK", 5)  # "é" (2 bytes) falls across slices
    out = tmp_path / "slurm-4242.out"
    out.write_bytes(b"abc\xff d\xc3\xa9f\nnext line\n")
    b, h = backend(), handle(tmp_path)
    assert "".join(b._remote_logs(h, False, None)) == "abc\ufffd d\u00e9f\nnext line\n"

    out.write_bytes(b"")
    writes = iter([b"one \xe2\x82", b"\xac two\n", b"three\n"])  # "€" cut between two writes

    def done():  # each poll appends the next write; done once all are written
        try:
            with open(out, "ab") as f:
                f.write(next(writes))
            return False
        except StopIteration:
            return True

    assert "".join(b._remote_logs(h, True, done, poll=0)) == "one \u20ac two\nthree\n"


def test_logs_of_an_attempt_without_output_yet_follow_until_there_is_some(tmp_path):
    b, h = backend(), handle(tmp_path)
    assert list(b._remote_logs(h, False, None)) == []
    calls = []

    def done():
        calls.append(1)
        if len(calls) == 2:
            (tmp_path / "slurm-4242.out").write_bytes(b"late\n")
        return len(calls) > 2

    assert "".join(b._remote_logs(h, True, done, poll=0)) == "late\n"
