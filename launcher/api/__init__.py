"""The library's door: ``from launcher.api import Launcher``.

``facade`` holds ``Launcher``, ``results`` the typed results its methods return, ``errors`` the
errors it raises and the CLI's exit codes, ``context`` the application context it works in
(config, registry, state store, backends) and ``status_view`` what ``status`` gathers and shows.

    with Launcher() as lx:
        job = lx.launch("train.yaml", target="local")
        print(lx.status(job.job_id).state)
"""

from launcher.api.facade import Launcher
from launcher.api.results import CheckpointListing, LogStream, Rendered, Submitted, TargetInfo, Validated

__all__ = ["Launcher", "CheckpointListing", "LogStream", "Rendered", "Submitted", "TargetInfo", "Validated"]
