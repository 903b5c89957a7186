"""The application context without the watch pass's parts (``BaseApp``): what reading,
validating and rendering a spec use (``launcher.api.specs.SpecReader`` and
``launcher.api.rendering.SpecLauncher``: ``launcher validate`` and ``launcher render``).
``launcher.api.context.App`` is this and the parts every other verb may reach through a watch
pass: the sweep layer's hooks, and notifications ended before the store closes. Every member is
lazy, so `launcher --help` and `launcher render` touch as little as possible."""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Optional

from launcher.backend.protocols import Backend, Facts
from launcher.backend.config import Config, Target, launcher_home, load_config, resolve_target
from launcher.backend.registry import Registry, default_registry
from launcher.recovery.outcome import NO_HOOKS, WatchHooks
from launcher.state.engines import STATE_URL_ENV, state_url
from launcher.state.store import StateStore


class BaseApp:
    """An ``AppContext`` (``launcher.backend.context``) whose watch hooks are none: a watch pass
    through it does nothing for sweeps, and resubmitting a sweep's element raises (use ``App``)."""

    def __init__(self, config_path: Optional[Path] = None, home: Optional[Path] = None,
                 registry: Optional[Registry] = None):
        self._config_path = config_path
        self.home = Path(home) if home else launcher_home()
        self._registry = registry
        self._backends: dict = {}
        self._facts: dict = {}
        self._store = None  # opened on first use (``store``), or given (``use_store``)

    @cached_property
    def config(self) -> Config:
        return load_config(self._config_path)

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = default_registry()
        return self._registry

    @cached_property
    def state_url(self) -> str:
        """The state store's PostgreSQL URL, or "" for the SQLite file under the home:
        $LAUNCHER_STATE_URL, else the config's ``state_url`` (the config is read only then)."""
        # read on first use of the store: `launcher --help` and `validate` never need it
        configured = None if os.environ.get(STATE_URL_ENV, "").strip() else self.config.file.state_url
        return state_url(configured)

    @property
    def store(self):
        """The state store: the one given to ``use_store``, else this home's, opened on first use."""
        if self._store is None:
            self._store = StateStore(self.home, url=self.state_url)
        return self._store

    def opened_store(self):
        """The state store if it was opened or given, else None (opens none)."""
        return self._store

    def use_store(self, store) -> None:
        """Take STORE as the state store instead of opening one (the read view's read-only store,
        ``launcher.api.readview``): every reader of ``store`` gets it."""
        self._store = store

    def has_store(self) -> bool:
        """Is there a store to read, without creating one? (A server's always is; a SQLite
        store once its file exists.)"""
        return bool(self.state_url) or (self.home / "state.db").exists()

    @property
    def watch_hooks(self) -> WatchHooks:
        """None lent (``App``'s are the sweep layer's)."""
        return NO_HOOKS

    def target(self, name: str) -> Target:
        return resolve_target(self.config, name, self.registry)

    def backend(self, target_name: str) -> Backend:
        if target_name not in self._backends:
            t = self.target(target_name)
            cls = self.registry.load(t.backend)
            self._backends[target_name] = cls(t, self)
        return self._backends[target_name]

    def backend_class(self, target_name: str) -> type[Backend]:
        """TARGET_NAME's backend class, without building it or checking that it can run jobs
        (``Registry.load(check=False)``): for what the class declares about itself."""
        return self.registry.load(self.config.raw_target(target_name)["backend"], check=False)

    def facts(self, target_name: str) -> Facts:
        if target_name not in self._facts:
            self._facts[target_name] = self.backend(target_name).probe()
        return self._facts[target_name]

    def use_facts(self, target_name: str, facts: Facts) -> None:
        """Take FACTS for the target instead of probing it (``render --facts``)."""
        self._facts[target_name] = facts

    def close(self):
        for b in self._backends.values():
            b.close()

    def close_store(self) -> None:
        """Close the state store if it was opened (a later use opens it again)."""
        store, self._store = self._store, None
        if store is not None:
            store.close()
