"""The part of the library facade that reads specs (``SpecReader``: ``load``, ``validate``), which
``launcher.api.rendering.SpecLauncher`` extends with ``render`` and ``launcher.api.facade.Launcher``
with everything else. ``launcher validate`` uses it alone: it imports what reading and checking
a spec need, and neither the modules of rendering (identity, the planner) nor those of launching,
watching, sweeps and reports that the whole facade imports. A spec is a path, YAML text (a str
with a line break) or a ``JobSpec``, as for ``Launcher``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Union

from launcher.api.arguments import checked_arguments
from launcher.api.base_context import BaseApp
from launcher.api.errors import WrongKind
from launcher.api.spec_results import Validated
from launcher.backend.support import spec_target_problems
from launcher.core.errors import SpecError
from launcher.launching.specinput import SpecInput, SpecLike, require_local_workdir, spec_input, unknown_targets
from launcher.spec.integrations import notify_env_problems

if TYPE_CHECKING:
    from launcher.spec.model import JobSpec

Note = Callable[[str], None]


@checked_arguments  # wrong argument types: one LauncherError naming the argument (launcher.api.arguments)
class SpecReader:
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
