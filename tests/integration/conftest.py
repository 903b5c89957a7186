"""The `cli` fixture most integration modules share: the real `launcher` command with its own
LAUNCHER_HOME and config under tmp_path. Its target follows the module's markers:

- no marker: no target configured (the built-in local one only);
- ``slurm``: the test cluster as target ``testcl`` (through ``clean_queue``: an empty queue);
- ``slurm`` and ``sshd``: the test cluster reached only over SSH (see launcher_cli.ssh_cli).

A module whose launcher needs more (other targets, environment) defines its own `cli`."""

from __future__ import annotations

import pytest

from .launcher_cli import LauncherCLI, ssh_cli


@pytest.fixture
def cli(request, tmp_path) -> LauncherCLI:
    marks = {m.name for m in request.node.iter_markers()}
    if "slurm" not in marks:
        return LauncherCLI(tmp_path)
    cluster = request.getfixturevalue("clean_queue")
    if "sshd" in marks:
        return ssh_cli(tmp_path, cluster, request.getfixturevalue("sshd_server"))
    return LauncherCLI(tmp_path, cluster)
