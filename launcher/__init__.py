"""launcher: one declarative job spec onto Slurm, SkyPilot or this machine.

The core (this package) never imports a concrete backend: backends are found
through the ``launcher.backends`` entry-point group (see ``launcher.backend.registry``).
"""

__version__ = "0.1.0"
