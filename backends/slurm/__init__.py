"""The ``slurm`` backend: spec -> sbatch script (templates/sbatch.sh.j2), submitted
through a command runner (local subprocess on a login node, SSH from elsewhere)."""

from launcher_backends.slurm.backend import SlurmBackend

__all__ = ["SlurmBackend"]
