"""What the layers below ``launcher.api`` may use of the application they run in: the typed
context every ``app`` parameter is (``AppContext``). ``launcher.api.context.App`` is the one
implementation; a test passes its own object with these members.

It names the user's home, targets and store, the backends and their probed facts, and the
hooks the layers above lend the watch pass (``watch_hooks``: a ``launcher.recovery.outcome.
WatchHooks``, named here only as an object, since the seam sits below recovery). Nothing else
of ``App`` is reached from below: a new need is a member added here first, where a reader sees
what the lower layers depend on.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # names for the annotations only: importing this module costs nothing (`launcher --help`)
    from launcher.backend.config import Config, Target
    from launcher.backend.protocols import Backend, Facts
    from launcher.backend.registry import Registry
    from launcher.state.store import StateStore


class AppContext(Protocol):
    """The application as the lower layers see it (``launcher.api.context.App`` implements it)."""

    home: Path  # $LAUNCHER_HOME: the store's folder and the jobs' folders

    @property
    def config(self) -> Config: ...  # the user's targets (launcher.backend.config)

    @property
    def registry(self) -> Registry: ...  # the installed backends (the launcher.backends entry points)

    @property
    def store(self) -> StateStore: ...  # the state store, opened on first use

    @property
    def watch_hooks(self) -> Any: ...  # the layers above's WatchHooks (launcher.recovery.outcome)

    def has_store(self) -> bool: ...  # whether a store is there to read (nothing is created to ask)

    def target(self, name: str) -> Target: ...

    def backend(self, target_name: str) -> Backend: ...

    def backend_class(self, target_name: str) -> type: ...

    def facts(self, target_name: str) -> Facts: ...  # the target's probed facts (cached per target)

    def use_facts(self, target_name: str, facts: Facts) -> None: ...  # facts given (a facts file)
