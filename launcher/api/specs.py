"""The part of the library facade that reads specs (``SpecLauncher``: ``load``, ``validate``,
``render``), which ``launcher.api.facade.Launcher`` extends with jobs, sweeps, reports and the
rest. ``launcher validate`` and ``launcher render`` use it alone: it imports what reading and
rendering a spec need, not the modules of launching, watching, sweeps and reports that the whole
facade imports (``launcher validate`` loads about 120 of the package's modules instead of about 210).
A spec is a path, YAML text (a str with a line break) or a ``JobSpec``, as for ``Launcher``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Union

from launcher.api.arguments import checked_arguments
from launcher.api.base_context import BaseApp
from launcher.api.errors import WrongKind
from launcher.api.spec_results import Rendered, Validated
from launcher.backend.factsfile import use_facts_file
from launcher.backend.protocols import JobRef
from launcher.backend.support import spec_target_problems
from launcher.core.errors import SpecError
from launcher.launching.identity import plan_identity
from launcher.launching.specinput import SpecInput, SpecLike, require_local_workdir, spec_input, unknown_targets
from launcher.launching.submission import excluded_nodes
from launcher.launching.targeting import pick_target, render_for
from launcher.provenance.seed import with_run_env
from launcher.spec.integrations import notify_env_problems
from launcher.sweep.elements import spec_to_render

if TYPE_CHECKING:
    from launcher.spec.model import JobSpec

Note = Callable[[str], None]


@checked_arguments  # wrong argument types: one LauncherError naming the argument (launcher.api.arguments)
class SpecLauncher:
    """One launcher home and config, like the CLI's, for reading specs. Lazy: nothing is read until
    a method needs it. Close it (or use it as a context manager) to close backends' connections."""

    app_class = BaseApp  # Launcher's: launcher.api.context.App, with what a watch pass needs too

    def __init__(self, config: Optional[Union[str, Path]] = None, home: Optional[Union[str, Path]] = None,
                 note: Optional[Note] = None, registry=None):
        self.app = self.app_class(Path(config) if config else None, Path(home) if home else None, registry)
        self._note = note

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close every backend (SSH connections) and the state store."""
        self.app.close()
        self.app.close_store()

    def _sayer(self, notes: list) -> Note:
        def say(line: str) -> None:
            notes.append(line)
            if self._note is not None:
                self._note(line)

        return say

    def _load(self, spec: SpecLike, say: Note, single: bool = False) -> SpecInput:
        """SPEC read, its warnings said; SINGLE: a sweep is refused (WrongKind) before anything is said."""
        si = spec_input(spec)
        problems = notify_env_problems(si.spec, os.environ)  # the operator's rule for webhooks, in this environment
        if problems:
            raise SpecError(si.source, problems)
        if single and si.spec.sweep is not None:
            named = isinstance(spec, (str, Path)) and "\n" not in str(spec)  # a path, else text or a JobSpec
            raise WrongKind(str(spec) if named else si.spec.name, "follow", True, si.spec.sweep.size)
        for w in si.warnings:
            say(f"warning: {w}")
        return si

    # ------------------------------------------------------------ specs
    def load(self, spec: SpecLike) -> "JobSpec":
        """A spec as a JobSpec, relative workdir and checkpoint root resolved against its
        file's folder: the base for variants made in Python."""
        return self._load(spec, self._sayer([])).spec

    def validate(self, spec: SpecLike) -> Validated:
        """Check a spec and its target names against the config; SpecError lists every problem."""
        notes: list = []
        si = self._load(spec, self._sayer(notes))
        config = self.app.config
        require_local_workdir(si.spec, si.source, config, [*si.spec.targets] or [config.default_target()], si.base)
        problems = unknown_targets(si.spec, config)
        problems += spec_target_problems(si.spec, config)  # fields a target cannot honour
        if problems:
            raise SpecError(si.source, problems)
        return Validated(si.spec, notes)

    def render(self, spec: SpecLike, target: Optional[str] = None, fresh: bool = False,
               facts_file: Union[str, Path, None] = None) -> Rendered:
        """Exactly what a launch now would submit, with what it would resume (in notes).
        FACTS_FILE (`launcher targets --json` output or a captured probe) stands in for
        probing TARGET: render for a cluster this machine cannot reach."""
        notes: list = []
        say = self._sayer(notes)
        si = self._load(spec, say)
        app = self.app
        if facts_file:
            use_facts_file(app, target, facts_file)
        name = pick_target(app, si.spec, target)
        require_local_workdir(si.spec, si.source, app.config, [name], si.base)
        ident = plan_identity(app, si.spec, name, fresh=fresh, subject="a launch now", read_s3=False)
        seed = ident.seed.seed
        job = JobRef(job_id="JOB_ID", attempt=1, job_dir=str(app.home / "jobs" / "JOB_ID"), seed=seed,
                     exclude_nodes=self._quarantined(name))
        shape = None
        if si.spec.sweep is not None:  # a sweep: the array, or element 0 where the backend runs no arrays
            def shape(s):
                return spec_to_render(app.backend(name), s, job)
        req = render_for(app, with_run_env(si.spec, seed, fresh), name, job, shape=shape)
        for line in ident.lines:  # the notes only once the render succeeded
            say(line)
        if ident.seed.source == "random":
            say(f"note: LAUNCHER_SEED={seed} was drawn for this render only; `launch` draws its own (set seed: "
                "in the spec, or LAUNCHER_SEED in the environment, to fix it)")
        return Rendered(name, req.text, req, seed, notes)

    def _quarantined(self, target: str) -> tuple:
        """The nodes quarantined on TARGET, which a launch now keeps off (docs/bad-nodes.md); () without
        a store to read (a render never creates one)."""
        if not self.app.has_store():
            return ()
        return excluded_nodes(self.app, target, time.time())
