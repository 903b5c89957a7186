"""The CLI's verbs, one module per verb (``launcher.cli`` only assembles them).

Each module defines click commands and a ``register(group)`` function; it parses
arguments and prints, and leaves the work to ``launcher.api.facade.Launcher`` (``common``
holds what the verbs share). Modules are imported when the CLI starts, so they must
keep heavy imports inside the command functions. A new verb: a module here, and its
name in MODULES.
"""

import importlib

MODULES = [
    "validate",
    "render",
    "launch",
    "status",
    "logs",
    "cancel",
    "targets",
    "ssh",  # `targets trust`: after targets
    "backends",
    "plan",
    "checkpoints",
    "watch",
    "report",
    "peaks",
    "provenance",
    "serve",
    "state",
    "gc",
    "nodes",
]


def register_all(group) -> None:
    for name in MODULES:
        importlib.import_module(f"{__name__}.{name}").register(group)
