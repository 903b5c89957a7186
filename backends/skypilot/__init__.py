"""SkyPilot backend (entry point ``skypilot``). Importing it does not import SkyPilot."""

from launcher_backends.skypilot.backend import INSTALL_HINT, SkyPilotBackend

__all__ = ["SkyPilotBackend", "INSTALL_HINT"]
