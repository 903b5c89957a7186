"""paramiko, loaded here and nowhere else, the first time a connection needs it.

Every module of the transport is imported by the fast paths (``launcher status`` and ``render``
build runners for the targets they name), while paramiko and the cryptography under it cost
about as much as the rest of a cold start. So no transport module imports paramiko at its top:
each function that drives a connection asks ``paramiko_module()`` for it, and the one lazy
import of the SDK is this module's reason to exist (tests/unit/test_import_hygiene.py keeps
the fast paths free of it).
"""

from __future__ import annotations


def paramiko_module():
    """The paramiko package (imported on the first call; later calls are a dict lookup)."""
    import paramiko

    return paramiko
