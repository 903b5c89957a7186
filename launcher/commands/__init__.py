"""CLI commands beyond the core ones in ``launcher.cli``, one module per feature.

Each module defines click commands and a ``register(group)`` function. Modules
are imported when the CLI starts, so they must keep heavy imports inside the
command functions.
"""

MODULES = [
    "plan",
    "ssh",
    "checkpoints",
    "watch",
    "report",
    "provenance",
]


def register_all(group) -> None:
    import importlib

    for name in MODULES:
        importlib.import_module(f"{__name__}.{name}").register(group)
