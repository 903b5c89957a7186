"""sbatch's retry policy (backends/slurm/retry.py): the transport retries what the backend's
policy accepts, and sbatch is retried only where it surely did not start."""

from __future__ import annotations

import pytest

from launcher.core.errors import TransientError
from launcher.transport.errors import ConnectionLostError, HostUnreachableError, may_have_run
from launcher_backends.slurm.retry import retry_unstarted


def test_retry_unstarted_retries_only_what_surely_did_not_run():
    seq = [HostUnreachableError("refused"), ConnectionLostError("mid-command")]
    calls = []

    def fn():
        calls.append(1)
        raise seq[len(calls) - 1]

    with pytest.raises(ConnectionLostError) as e:
        retry_unstarted(fn, sleep=lambda s: None)
    assert len(calls) == 2 and may_have_run(e.value) and not may_have_run(seq[0])
    assert may_have_run(TransientError("unknown origin"))
