"""Reaching a login node over SSH (paramiko): see ``runner`` for the overview."""
