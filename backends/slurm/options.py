"""Config keys of a ``backend: slurm`` target (validated with their config path)."""

from __future__ import annotations

import re
from typing import Optional

from pydantic import ConfigDict, Field, field_validator

from launcher.transport.sshconfig import SSHTargetOptions


class SlurmOptions(SSHTargetOptions):
    """A Slurm target: on this login node, or on one reached over SSH (``ssh_*`` keys,
    inherited from SSHTargetOptions: ssh_host, ssh_port, ssh_user, ssh_key, known_hosts,
    ssh_config, ssh_agent, ssh_connect_timeout, ssh_keepalive)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    slurm_conf: Optional[str] = None  # exported as SLURM_CONF for every Slurm command
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    gpu_hour_usd: Optional[float] = Field(None, ge=0)
    python: str = "python3"  # interpreter on the compute nodes for the job-side helper
    # job dirs on the cluster (absolute); default: $LAUNCHER_HOME/jobs on a login node,
    # ~/.launcher/jobs (the remote home, probed) over SSH
    remote_dir: Optional[str] = None
    facts_ttl: int = Field(3600, ge=0)  # seconds a probe result is reused
    command_timeout: float = Field(60, gt=0)

    @field_validator("partition", "account", "qos")
    @classmethod
    def _plain(cls, v):
        # these become #SBATCH lines: a newline would end the directives and start shell code
        if v is not None and not _SLURM_NAME.match(v):
            raise ValueError("expected a Slurm name (letters, digits and _ . , : -)")
        return v

    @field_validator("remote_dir")
    @classmethod
    def _abs(cls, v):
        if v is not None and not v.startswith("/"):
            raise ValueError("remote_dir must be an absolute path on the cluster")
        if v is not None and not _PLAIN_PATH.match(v):
            # job dirs appear in #SBATCH --output, which cannot quote
            raise ValueError("remote_dir must be a plain path (letters, digits and _ . / + @ , : = -; "
                             "no spaces, quotes or $)")
        return v

    @field_validator("python", "slurm_conf")
    @classmethod
    def _one_line(cls, v):
        if v is not None and (not v.strip() or any(c in v for c in "\n\r\0")):
            raise ValueError("expected a non-empty one-line value")
        return v


_SLURM_NAME = re.compile(r"^[A-Za-z0-9_.,:-]+$")
_PLAIN_PATH = re.compile(r"^[A-Za-z0-9_./+@,:=~-]+$")
