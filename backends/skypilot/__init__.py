"""SkyPilot backend (entry point ``skypilot``). Importing it does not import SkyPilot."""

from .backend import INSTALL_HINT, SkyPilotBackend

__all__ = ["SkyPilotBackend", "INSTALL_HINT"]
