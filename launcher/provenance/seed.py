"""The seed a run gets as ``LAUNCHER_SEED``.

A seed belongs to a *run* (a checkpoint root's line of checkpoints), not to a launch:

1. the spec's ``seed`` field, if the spec has one (it always wins);
2. else ``$LAUNCHER_SEED`` in the launching environment (an explicit choice too);
3. else, when the launch resumes an earlier run's checkpoint (and not ``--fresh``), the
   seed that run was launched with, from its record (state store, RUN.json under the
   root, or the attempt record the job itself wrote);
4. else a random 31-bit integer.

When an explicit seed (1 or 2) differs from the seed of the run being resumed, the
explicit one is used and the launch says so: the resumed run continues with different
random streams from then on.

The choice is recorded in the run's provenance and in ``jobs.meta["seed"]``, and every
submission of the job (Slurm requeues rerun the same script; resubmissions re-render
from the state store) exports the same value.

The seed reaches the job through the spec's ``env`` (a copy of the spec, never the
file): every backend already exports ``env`` quoted (sbatch, local script, SkyPilot
task ``envs``), and ``LAUNCHER_`` names are reserved, so a user's env cannot clash.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from typing import Callable, Optional

from launcher.core.errors import LauncherError

ENV = "LAUNCHER_SEED"
FRESH_ENV = "LAUNCHER_FRESH"  # "1": the job was launched with --fresh (read by the job-side resume-env)


@dataclass(frozen=True)
class SeedChoice:
    seed: int
    source: str  # "spec", "env", "resumed" or "random"
    warning: Optional[str] = None

    def describe(self, run: Optional[str] = None, subject: str = "this launch") -> str:
        where = {"spec": "the spec's seed", "env": "$LAUNCHER_SEED of this shell",
                 "resumed": f"kept from run {run}, which {subject} resumes" if run else "kept from the resumed run",
                 "random": "drawn at random"}[self.source]
        return f"{ENV}={self.seed} ({where})"


def parse_env_seed(environ=None) -> Optional[int]:
    environ = os.environ if environ is None else environ
    raw = (environ.get(ENV) or "").strip()
    if not raw:
        return None
    try:
        return int(raw, 0)
    except ValueError:
        raise LauncherError(f"{ENV}={raw!r} is not an integer") from None


def decide_seed(spec_seed: Optional[int], env_seed: Optional[int], recorded: Optional[int],
                resumed_run: Optional[str] = None, resuming: bool = False, fresh: bool = False,
                draw: Optional[Callable[[], int]] = None) -> SeedChoice:
    """Pure: the seed rule above. RESUMING: this launch continues an earlier run's
    checkpoint (RESUMED_RUN, whose recorded seed is RECORDED, None if unknown)."""
    draw = draw or (lambda: secrets.randbelow(2 ** 31))
    resuming = resuming and not fresh
    for value, source, what in ((spec_seed, "spec", "the spec's seed"),
                                (env_seed, "env", f"${ENV} of this shell")):
        if value is None:
            continue
        warning = None
        if resuming and recorded is not None and int(recorded) != int(value):
            warning = (f"{what} ({value}) differs from {ENV}={recorded} that run {resumed_run or '?'} ran with: "
                       f"the resumed run continues with {value} (an explicit seed wins; "
                       f"launch --fresh to start over with it)")
        return SeedChoice(int(value), source, warning)
    if resuming and recorded is not None:
        return SeedChoice(int(recorded), "resumed")
    warning = None
    if resuming:
        warning = (f"the seed of run {resumed_run or '?'} is not recorded anywhere this launcher can read: "
                   f"the resumed run gets a new random {ENV} (set seed: in the spec to fix it)")
    return SeedChoice(int(draw()), "random", warning)


def choose_seed(spec=None, environ=None) -> tuple[int, str]:
    """(seed, where it came from: "spec", "env" or "random") for a launch that resumes nothing."""
    c = decide_seed(getattr(spec, "seed", None) if spec is not None else None, parse_env_seed(environ), None)
    return c.seed, c.source


def with_seed(spec, seed: Optional[int]):
    """A copy of SPEC whose env exports LAUNCHER_SEED (SPEC itself is unchanged)."""
    if seed is None:
        return spec
    return spec.model_copy(update={"env": {**spec.env, ENV: str(int(seed))}})


def with_run_env(spec, seed: Optional[int], fresh: bool = False):
    """A copy of SPEC exporting LAUNCHER_SEED and, for a run launched with --fresh,
    LAUNCHER_FRESH=1 (the job's first start then starts over; see ``resume-env``)."""
    spec = with_seed(spec, seed)
    if fresh:
        spec = spec.model_copy(update={"env": {**spec.env, FRESH_ENV: "1"}})
    return spec
