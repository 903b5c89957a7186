"""What ``validate`` and ``render`` return (``launcher.api.specs.SpecReader``,
``launcher.api.rendering.SpecLauncher``): results that need none of the modules of jobs and sweeps
which the other results (``launcher.api.results``, which re-exports these two) use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.backend.protocols import Request


@dataclass(frozen=True)
class Validated:
    spec: object  # the JobSpec, relative paths resolved
    notes: list = field(default_factory=list)


@dataclass(frozen=True)
class Rendered:
    target: str
    text: str  # exactly what would be submitted (sbatch script, task YAML)
    request: "Request"
    seed: int  # the LAUNCHER_SEED the text carries
    notes: list = field(default_factory=list)
