"""``SpecLauncher``: ``launcher.api.specs.SpecReader`` (``load``, ``validate``) and ``render``, the
part of the library facade ``launcher render`` uses alone (``launcher.api.facade.Launcher`` extends
it with every other verb). It imports what rendering needs (the target's choice, what a launch now
would resume, the backend's render), not the modules of launching, watching, sweeps and reports.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional, Union

from launcher.api.arguments import checked_arguments
from launcher.api.spec_results import Rendered
from launcher.api.specs import SpecReader
from launcher.backend.factsfile import use_facts_file
from launcher.backend.protocols import JobRef
from launcher.launching.identity import plan_identity
from launcher.launching.specinput import SpecLike, require_local_workdir
from launcher.launching.submission import excluded_nodes
from launcher.launching.targeting import pick_target, render_for
from launcher.provenance.seed import with_run_env
from launcher.sweep.elements import spec_to_render


@checked_arguments  # wrong argument types: one LauncherError naming the argument (launcher.api.arguments)
class SpecLauncher(SpecReader):
    """``SpecReader`` and ``render``."""

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
