"""SkyPilot's SDK, loaded here and nowhere else, the first time the backend talks to SkyPilot.

``import sky`` takes 1-2 s and the backend's module is loaded by every command that lists the
targets (``launcher --help`` and ``render`` must stay fast, tests/unit/test_import_hygiene.py).
So no module of this backend imports sky at its top: each function that calls SkyPilot asks
``sky_module()`` for it, and uses the submodules as attributes of the package (``sky.exceptions``,
``sky.catalog.common``, ...), which ``import sky`` loads."""

from __future__ import annotations


def sky_module():
    """The sky package (imported on the first call; later calls are a dict lookup)."""
    import sky

    return sky
