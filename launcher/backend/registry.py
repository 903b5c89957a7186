"""Backends are found only through the ``launcher.backends`` entry-point group.

Built-in backends are registered in that group by this project's own metadata,
exactly like third-party ones; a third-party plugin can add backends but never
replace a built-in one. A backend that fails to import is listed with its error,
never silently dropped.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from importlib import metadata
from typing import Optional, cast

from launcher.backend.protocols import Backend, Host, SpecOwner, can
from launcher.core.errors import BackendUnavailable, ConfigError

GROUP = "launcher.backends"
OWN_DIST = "launcher"


@dataclass
class BackendEntry:
    name: str
    value: str  # "module:Class"
    dist: str
    builtin: bool
    error: Optional[str] = None
    shadowed: list = None  # third-party entries refused because a built-in has the name


class Registry:
    def __init__(self, entry_points=None):
        eps = entry_points if entry_points is not None else metadata.entry_points(group=GROUP)
        self.entries: dict[str, BackendEntry] = {}
        self._eps = {}
        for ep in sorted(eps, key=lambda e: (self._dist(e) != OWN_DIST, e.name)):
            dist = self._dist(ep)
            builtin = dist == OWN_DIST
            if ep.name in self.entries:
                existing = self.entries[ep.name]
                existing.shadowed = (existing.shadowed or []) + [f"{dist}:{ep.value}"]
                continue
            self.entries[ep.name] = BackendEntry(ep.name, ep.value, dist, builtin, shadowed=[])
            self._eps[ep.name] = ep
        self._loaded: dict[str, type[Backend]] = {}  # available
        self._classes: dict[str, type[Backend]] = {}  # imported

    @staticmethod
    def _dist(ep) -> str:
        d = getattr(ep, "dist", None)
        return d.metadata["Name"] if d is not None else "?"

    def names(self) -> list[str]:
        return sorted(self.entries)

    def load(self, name: str, check: bool = True) -> type[Backend]:
        """The backend class NAME (a ``launcher.backend.protocols.Backend``). CHECK=False skips its
        ``available()`` (what it needs to run jobs, e.g. an SDK): for what a backend declares about
        itself (capabilities, offers priced from catalogs), which it can answer without it."""
        if name in self._loaded:
            return self._loaded[name]
        cls = self.load_class(name)
        if not check:
            return cls
        if can(cls, Host):
            problem = cls.available()
            if problem:
                self.entries[name].error = problem
                raise BackendUnavailable(f"backend '{name}' is unavailable: {problem}")
        self._loaded[name] = cls
        return cls

    def load_class(self, name: str) -> type[Backend]:
        """The backend's class, imported but not checked for availability (its SDK may be
        missing): enough to read what it declares, such as its spec section."""
        if name not in self._eps:
            guess = difflib.get_close_matches(name, self.names(), n=1)
            hint = f"; did you mean '{guess[0]}'?" if guess else ""
            raise ConfigError(f"unknown backend '{name}'{hint} (installed: {', '.join(self.names()) or 'none'})")
        if name in self._classes:
            return self._classes[name]
        try:
            cls = self._eps[name].load()
        except Exception as e:  # any import failure is reported, with the plugin's hint
            self.entries[name].error = f"{type(e).__name__}: {e}"
            raise BackendUnavailable(f"backend '{name}' is unavailable: {type(e).__name__}: {e}") from e
        cls = cast("type[Backend]", cls)  # what the entry point names: a Backend class, by the plugin contract
        self._classes[name] = cls
        return cls

    def spec_sections(self) -> dict:
        """{section key: (backend name, pydantic model)} for every backend that owns a section
        of the job spec (``spec_section`` / ``spec_options`` on its class). A backend that cannot
        be imported owns none (``launcher backends`` shows why); built-ins come first, so a
        third-party backend cannot take a built-in's key."""
        out: dict = {}
        for name in self.entries:  # built-ins first (see __init__)
            try:
                cls = self.load_class(name)
            except BackendUnavailable:
                continue
            if not can(cls, SpecOwner):
                continue
            key, model = cls.spec_section, cls.spec_options
            if key and model is not None and key not in out:
                out[key] = (name, model)
        return out

    def describe(self) -> list[dict]:
        """Try to load every backend; report each with its error (for `launcher backends`)."""
        rows = []
        for name in self.names():
            e = self.entries[name]
            try:
                self.load(name)
                status, err = "ok", None
            except BackendUnavailable:
                status, err = "unavailable", e.error
            rows.append({"name": name, "source": "built-in" if e.builtin else e.dist, "entry_point": e.value,
                         "status": status, "error": err, "shadowed": e.shadowed or []})
        return rows


_default: Optional[Registry] = None


def default_registry() -> Registry:
    global _default
    if _default is None:
        _default = Registry()
    return _default
