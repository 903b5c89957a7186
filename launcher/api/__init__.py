"""The library's door: ``from launcher.api import Launcher``.

``facade`` holds ``Launcher``; ``specs`` its part that reads specs (``SpecReader``, which the CLI's
``validate`` uses alone) and ``rendering`` that part and ``render`` (``SpecLauncher``, which
``launcher render`` uses alone). ``results`` holds the typed results its methods return, ``errors``
the errors it raises and the CLI's exit codes, ``context`` the application context it works in
(config, registry, state store, backends; ``base_context`` its part without the watch pass's) and
``status_view`` what ``status`` gathers and shows.

    with Launcher() as lx:
        job = lx.launch("train.yaml", target="local")
        print(lx.status(job.job_id).state)

The names below are imported on first use (PEP 562): every CLI verb imports
``launcher.api.errors`` when ``launcher --help`` starts, and that must not import the facade
and everything a verb uses.
"""

from __future__ import annotations

import importlib

_PUBLIC = {
    "Launcher": "facade",
    "SpecReader": "specs",  # Launcher's load and validate, without the modules of rendering, jobs and sweeps
    "SpecLauncher": "rendering",  # SpecReader and render, without the modules of jobs and sweeps
    **{name: "results" for name in ("BackendInfo", "CheckpointListing", "ConfigInfo", "GcResult", "Lineage",
                                    "LogStream", "Rendered", "RunDiff", "Submitted", "SweepCancelled", "SweepReport",
                                    "SweepStatus", "TargetInfo", "Validated")},
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
