"""Errors of the checkpoint contract. Stdlib only: this package runs on compute nodes.

The CLI (``launcher.commands.checkpoints``) turns them into ``LauncherError``; the
job-side helper (``launcher.jobside``) prints them and exits non-zero.
"""

from __future__ import annotations


class CheckpointError(Exception):
    """Base class. The message always names the path (local path or s3:// URL) at fault."""


class RootUnavailable(CheckpointError):
    """ROOT cannot be read: missing, not a directory, permission denied, bucket missing,
    endpoint unreachable, no credentials."""


class ManifestError(CheckpointError):
    """A COMMIT.json or GENERATIONS.json that does not parse or does not match its place."""


class UnsafePath(CheckpointError):
    """A path under ROOT that the launcher refuses to follow or read: a symbolic link, a
    FIFO, a device or socket where a file or directory belongs, a name that escapes its
    checkpoint ('..', absolute), or a manifest larger than the cap. Never followed, never
    opened in a way that could block."""


class Conflict(CheckpointError):
    """A create-only or compare-and-swap write lost: the object exists / changed meanwhile."""


class AlreadyCommitted(CheckpointError):
    """The checkpoint directory already has a COMMIT.json (checkpoints are write-once)."""


class Superseded(CheckpointError):
    """Fencing: this writer's generation was superseded by a newer start of the job; its
    commit is refused (or, if it raced the newer start, the commit is a stale fork that
    discovery ignores). The writer should stop."""

    def __init__(self, msg: str, generation: int, current: int, fork_step=None):
        super().__init__(msg)
        self.generation = generation
        self.current = current
        self.fork_step = fork_step
