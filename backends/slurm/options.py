"""Config keys of a ``backend: slurm`` target (validated with their config path)."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator


class SlurmOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    slurm_conf: Optional[str] = None  # exported as SLURM_CONF for every Slurm command
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    gpu_hour_usd: Optional[float] = Field(None, ge=0)
    python: str = "python3"  # interpreter on the compute nodes for the job-side helper
    remote_dir: Optional[str] = None  # job dirs on the cluster (absolute); default: $LAUNCHER_HOME/jobs
    facts_ttl: int = Field(3600, ge=0)  # seconds a probe result is reused
    command_timeout: float = Field(60, gt=0)
    # reaching the login node over SSH (see launcher.ssh)
    ssh_host: Optional[str] = None
    ssh_port: Optional[int] = Field(None, ge=1, le=65535)
    ssh_user: Optional[str] = None
    ssh_key: Optional[str] = None
    known_hosts: Optional[str] = None
    ssh_config: Optional[str] = None
    use_pyslurm: bool = False

    @field_validator("remote_dir")
    @classmethod
    def _abs(cls, v):
        if v is not None and not v.startswith("/"):
            raise ValueError("remote_dir must be an absolute path on the cluster")
        return v
