"""The application context shared by CLI commands and the watch loop (``App``): config,
backend registry, state store and per-target backend instances (``BaseApp``'s, all lazy), and
what a watch pass needs of it: the sweep layer's hooks, and notifications ended before the store
closes."""

from __future__ import annotations

from functools import cached_property

from launcher.api.base_context import BaseApp
from launcher.recovery import notify
from launcher.sweep.watching import watch_hooks as sweep_watch_hooks


class App(BaseApp):
    @cached_property
    def watch_hooks(self):
        """What sweeps add to every watch pass and to a resubmission of one of their elements
        (``launcher.recovery.outcome.WatchHooks``), made once."""
        return sweep_watch_hooks()

    def close_store(self) -> None:
        """Close the state store if it was opened (a later use opens it again)."""
        store = self.opened_store()
        if store is not None:
            # notifications: only a store that was opened has a deliverer to end before it closes
            notify.stop(store)  # its thread must not be inside the store when it closes
        super().close_store()
