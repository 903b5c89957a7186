"""Reaching a login node over SSH (paramiko, or the system ssh): the Runner protocol on the far side of a
connection. ``ssh_runner`` has the overview; one module per concern:

- ``sshconfig``: target options, ~/.ssh/config, the route (jump hosts) to a login node
- ``known_hosts``: OpenSSH known_hosts files (read, append)
- ``connect``: TCP / ProxyCommand, jump hosts, host-key checks, public-key authentication
- ``pool``: one shared connection per target per process
- ``frame``: the markers that keep login-shell noise out of command output
- ``shell``: persistent shells; ``ssh_runner``: SSHRunner (exec channels, the LocalRunner interface)
- ``remote``: what both SSH runners share (``run``, unframing, ``put_tree``); ``openssh``:
  OpenSSHRunner, ``transport: openssh`` (the system ssh over a shared ControlMaster connection,
  ``launcher targets login``)
- ``runner``: the command-runner protocol and LocalRunner (a subprocess on this machine); ``watchdog``
  kills local commands past their deadline
- ``transfer``: put_file (SFTP, else the shell) and put_tree (one tar stream)
- ``errors``, ``retry`` (the caller brings its retry policy), ``cmdline``
- ``sdk``: the one place paramiko is imported (on first use)

Names are imported on first use: importing ``launcher.transport`` (or its ``sshconfig``,
which target options use) loads neither paramiko nor the connection machinery.
"""

from __future__ import annotations

import importlib

_PUBLIC = {
    "SSHRunner": "ssh_runner", "runner_for_target": "ssh_runner", "make_runner": "ssh_runner",
    "trust_host_keys": "connect", "close_all": "pool", "pool_stats": "pool",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
