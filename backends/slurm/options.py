"""What the ``slurm`` backend validates: a target's config keys (``SlurmOptions``) and the job
spec's ``slurm:`` section (``SlurmSection``), each reported with its path."""

from __future__ import annotations

import re
from typing import Annotated, Optional

from pydantic import AfterValidator, ConfigDict, Field, field_validator

from launcher.spec.model import Section
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


# sbatch options the launcher sets itself, with why a spec may not change them
# (sbatch takes any unambiguous prefix of a long option, so prefixes are refused too)
RESERVED_SBATCH = {
    "comment": "carries the launcher's dedupe token (how a job is found after an unclear submit)",
    "output": "the launcher reads the job's log from its own path",
    "error": "the launcher reads the job's log (stdout and stderr together) from its own path",
    "open-mode": "a requeued job must append to its log, not truncate it",
    "requeue": "the launcher's recovery relies on Slurm requeueing the job",
    "no-requeue": "the launcher's recovery relies on Slurm requeueing the job",
    "signal": "the preemption notice is set from recovery.signal and recovery.grace",
    "job-name": "set from the spec's name",
    "array": "one spec is one job: the launcher tracks a single job id per attempt",
    "export": "the job's environment is the spec's env and secrets (and secrets travel through it over SSH)",
    "parsable": "the launcher parses sbatch's output itself",
    "wrap": "the launcher submits its own script",
}


# sbatch's short options for what the launcher sets (-o FILE, -e FILE, -J NAME, -a RANGE)
RESERVED_SHORT = {"o": "output", "e": "error", "J": "job-name", "a": "array"}
# sbatch reads an #SBATCH line as shell-like words: quotes and backslashes group or escape,
# an unquoted '#' starts a comment. None of them may appear in an item (what sbatch would
# read would not be what the item says).
SBATCH_LINE_SPECIALS = "'\"\\#"
_WHITESPACE = " \t\n\v\f\r"  # C isspace(), what sbatch splits an #SBATCH line on


def sbatch_words(item: str) -> list[str]:
    """ITEM split as sbatch splits an #SBATCH line (quotes, backslashes and '#' are refused
    before this is relied on, so whitespace is the only separator)."""
    for c in _WHITESPACE[1:]:
        item = item.replace(c, " ")
    return item.split(" ")


def check_sbatch_option(item: str) -> str:
    """Raise ValueError unless ITEM is exactly one '--option[=value]' the launcher leaves to the
    spec; return it. ITEM is split first as sbatch splits an #SBATCH line, and every word is
    checked against the reserved options, so '--mail-type=END --comment=x' cannot slip a
    reserved option in behind an allowed one; then an item of more than one word is refused."""
    words = [w for w in sbatch_words(item) if w]
    for w in words:
        _check_not_reserved(w)
    bad = sorted({c for c in item if c in SBATCH_LINE_SPECIALS})
    if bad:
        raise ValueError(f"an extra sbatch option may not contain {' '.join(bad)} (sbatch reads quotes and "
                         f"backslashes on an #SBATCH line as quoting, and '#' as the start of a comment), "
                         f"got {item!r}")
    if len(words) != 1:
        raise ValueError(f"each slurm.extra item must be exactly one option, e.g. '--exclusive' or "
                         f"'--mail-type=END' (a value joined with '='), got {len(words)} words in {item!r}: "
                         f"give each option its own item")
    name = item[2:].split("=", 1)[0].strip().lower()
    if not item.startswith("--") or not name or not item.isprintable():
        raise ValueError(f"each extra sbatch option must be one '--option[=value]' item (long form), got {item!r}")
    return item


def _check_not_reserved(word: str) -> None:
    if word.startswith("--"):
        name = word[2:].split("=", 1)[0].lower()
        for reserved, why in RESERVED_SBATCH.items():
            if name and reserved.startswith(name):
                shown = f"--{reserved}" if reserved == name else f"--{name} (read by sbatch as --{reserved})"
                raise ValueError(f"{shown} is set by the launcher and cannot be overridden in slurm.extra: {why}")
    elif word.startswith("-") and word[1:2] in RESERVED_SHORT:
        reserved = RESERVED_SHORT[word[1]]
        raise ValueError(f"-{word[1]} (sbatch's --{reserved}) is set by the launcher and cannot be overridden in "
                         f"slurm.extra: {RESERVED_SBATCH[reserved]}")


class SlurmSection(Section):
    """The job spec's ``slurm:`` section."""

    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    exclude: Optional[str] = None
    reservation: Optional[str] = None
    extra: list[Annotated[str, AfterValidator(check_sbatch_option)]] = Field(default_factory=list, max_length=256)

    @field_validator("partition", "account", "qos", "constraint", "exclude", "reservation")
    @classmethod
    def _plain(cls, v):
        if v is not None and not re.match(r"^[A-Za-z0-9_.,:\[\]|&*()!-]+$", v):
            raise ValueError("expected a Slurm name (letters, digits and _ . , : [ ] | & * ( ) ! -)")
        return v
