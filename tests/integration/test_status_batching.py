"""A status poll of many jobs is one remote command, not one per job (issue 4)."""

from __future__ import annotations

import pytest

from launcher.backend.protocols import Handle
from launcher.backend.config import Target
from launcher.transport import close_all
from launcher_backends.slurm import SlurmBackend
from launcher_backends.slurm.options import SlurmOptions
from tests.fixtures.recording import RecordingRunner

pytestmark = [pytest.mark.slurm, pytest.mark.sshd]




def test_polling_sixty_jobs_over_ssh_is_one_command(clean_queue, sshd_server, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    close_all()
    ids = [clean_queue.sbatch("--hold", "-o", "/dev/null", script="#!/bin/bash\ntrue\n") for _ in range(60)]
    opts = SlurmOptions(ssh_host=sshd_server.host, ssh_port=sshd_server.port, ssh_user=sshd_server.user,
                        ssh_key=str(sshd_server.client_key), known_hosts=str(sshd_server.known_hosts),
                        ssh_config="", ssh_agent=False, slurm_conf=str(clean_queue.conf))
    backend = SlurmBackend(Target("remote", "slurm", opts))
    counting = RecordingRunner(backend.runner)
    backend._runner = counting
    handles = [Handle("slurm", "remote", f"j{i}", jid) for i, jid in enumerate(ids)]
    statuses = backend.status(handles)
    assert [s.state.value for s in statuses] == ["PENDING"] * 60
    assert len(counting.argvs) == 1, counting.argvs
    clean_queue.run("scancel", *ids)
    backend.close()
