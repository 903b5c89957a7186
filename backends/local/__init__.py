"""The ``local`` backend: run the job on this machine, as its own process group,
with the same env and checkpoint contract as every other backend. It is the
built-in default target, so the quickstart needs no cluster and no config."""

from launcher_backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
