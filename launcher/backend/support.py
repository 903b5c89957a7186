"""What a target can do with a spec: asking a backend for something it cannot honour is an
error, never a silent drop.

Each backend declares the portable requests it honours (``spec_fields``, a ClassVar set of
the field paths in ``REQUESTS``; optionally ``spec_scope``, what the backend is, and
``spec_instead``, {field: what to do instead}, for the messages) and may add value-dependent
limits (``unsupported(spec)``, a classmethod returning ``Unsupported`` items: the
``SpecOwner`` protocol of ``launcher.backend.protocols``); a backend whose scheduler sets
variables of its own in every job declares their prefixes (``SetsEnv``), which the spec's
``env`` and ``secrets`` may then not use. A spec that sets a request to anything
but its default on a backend that does not declare it fails at ``launcher validate``,
``render`` and ``launch``, naming the field, the target and what would work; the planner
excludes such a target's offers with the same words. A backend that
declares no ``spec_fields`` is taken to honour every request (nothing is known about it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Optional

from launcher.backend.protocols import Request, SetsEnv, SpecOwner, can
from launcher.backend.registry import default_registry
from launcher.core.errors import LauncherError, SpecError
from launcher.backend.context import AppContext


def secret_values(request: Request, names: Iterable[str]) -> tuple[dict, list]:
    """({name: value}, [names without a value]) of the secrets NAMES a backend delivers for REQUEST:
    this process's environment first, then the values given with the request
    (``Request.secret_values``). What every backend's submit reads; nothing is written."""
    given = request.secret_values or {}
    values, missing = {}, []
    for n in names:
        if n in os.environ:
            values[n] = os.environ[n]
        elif n in given:
            values[n] = given[n]
        else:
            missing.append(n)
    return values, missing

# The portable fields that ask a target for something (resources, placement, a container);
# the rest of the spec (run, env, checkpoint, recovery, cost ...) is the core's, on every backend.
# time_limit is a cap the planner also reads as the work estimate: Slurm enforces it; elsewhere
# it bounds nothing but the estimate (the SkyPilot backend warns), so it is not listed here.
REQUESTS = (
    "resources.nodes", "resources.tasks_per_node", "resources.gpus_per_node", "resources.accelerator",
    "resources.cpus_per_node", "resources.memory_per_node", "resources.disk_per_node",
    "topology.max_switches", "topology.switch_wait", "topology.segment", "image", "sweep",
    # multi-tier checkpoints: a node-local disk to commit on, and other nodes to copy it to
    "checkpoint.local", "checkpoint.peers",
)


@dataclass(frozen=True)
class Unsupported:
    """One thing a spec asks that a backend cannot do."""

    field: str    # the spec's field path, as validation errors print it
    why: str      # what the backend cannot do
    instead: str  # what would work


def requested(spec) -> dict[str, object]:
    """{field path: value} of the REQUESTS that SPEC sets to something other than the default."""
    out = {}
    for path in REQUESTS:
        section, _, key = path.rpartition(".")
        owner = getattr(spec, section) if section else spec
        value = getattr(owner, key)
        if value != _default(type(owner), key):
            out[path] = value
    return out


def _default(model, key: str):
    """MODEL's default for field KEY."""
    return model.model_fields[key].get_default(call_default_factory=True)


def unsupported(spec, backend_cls) -> list[Unsupported]:
    """Everything SPEC asks that BACKEND_CLS (a backend class) cannot honour."""
    out = reserved_env(spec, backend_cls)
    if not can(backend_cls, SpecOwner):
        return out  # honours every request
    honoured = backend_cls.spec_fields
    if honoured is not None:
        out += [_not_honoured(backend_cls, path, value) for path, value in requested(spec).items()
                if path not in honoured]
    return out + list(backend_cls.unsupported(spec))


def reserved_env(spec, backend_cls) -> list[Unsupported]:
    """SPEC's env and secret names that BACKEND_CLS's scheduler sets in every job itself
    (``SetsEnv.env_prefixes``): the job would not see the spec's value."""
    if not can(backend_cls, SetsEnv):
        return []
    prefixes = tuple(str(p) for p in backend_cls.env_prefixes)
    name = getattr(backend_cls, "name", "?")
    named = [(f"env.{k}", k) for k in spec.env] + [(f"secrets[{i}]", k) for i, k in enumerate(spec.secrets)]
    return [Unsupported(path, f"{k} is reserved: the {name} backend's scheduler sets "
                              f"{', '.join(p + '*' for p in prefixes)} in every job",
                        "rename it, or use a target of another backend")
            for path, k in named if k.startswith(prefixes)]


def _not_honoured(backend_cls, path: str, value) -> Unsupported:
    name = getattr(backend_cls, "name", "?")
    scope = getattr(backend_cls, "spec_scope", "")
    instead = getattr(backend_cls, "spec_instead", {}).get(path, "")
    others = [b for b in honoured_by(path) if b != name]
    return Unsupported(path, f"the {name} backend {scope + ', and ' if scope else ''}does not honour "
                             f"{_show(path, value)}",
                       (instead + ", or " if instead else "") + "remove it, or use a target whose backend "
                       "honours it" + (f" ({', '.join(others)})" if others else ""))


def honoured_by(path: str, registry=None) -> list[str]:
    """Installed backends that declare they honour PATH (for "what would work")."""
    reg = registry if registry is not None else default_registry()
    names = []
    for name in reg.names():
        try:
            cls = reg.load_class(name)
        except LauncherError:
            continue
        if can(cls, SpecOwner) and cls.spec_fields is not None and path in cls.spec_fields:
            names.append(name)
    return names


def message(item: Unsupported, target: str, role: str = "target") -> str:
    return f"{role} {target}: {item.why}; {item.instead}"


def target_problems(spec, names: Iterable[tuple[str, str]], backend_of) -> list[tuple[str, str]]:
    """(field, message) for every (role, target name) in NAMES; BACKEND_OF(name) gives the
    target's backend class (or raises LauncherError, which is left to the caller's own checks)."""
    problems = []
    for role, name in names:
        try:
            cls = backend_of(name)
        except LauncherError:
            continue  # unknown target or broken backend: reported where targets are resolved
        problems += [(u.field, message(u, name, role)) for u in unsupported(spec, cls)]
    return problems


def roles(spec, chosen: Optional[str] = None) -> list[tuple[str, str]]:
    """The targets a spec will run on, with how each is named in messages: the chosen target
    (else every target the spec lists) and its burst targets."""
    out = [("target", chosen)] if chosen else [("target", n) for n in spec.targets]
    return out + [("burst target", n) for n in spec.burst.to if n != chosen]


def backend_of(config, registry):
    """BACKEND_OF for ``target_problems``: a target's backend class, from the config alone
    (no backend is instantiated, nothing is probed, the backend's SDK need not be installed)."""
    return lambda name: registry.load_class(config.raw_target(name)["backend"])


def spec_target_problems(spec, config, registry=None) -> list[tuple[str, str]]:
    """For ``launcher validate``: what SPEC asks of every target it lists (else the default
    target) and of its burst targets that they cannot do."""
    names = roles(spec) if spec.targets else roles(spec, config.default_target())
    return target_problems(spec, names, backend_of(config, registry or default_registry()))


def require_supported(app: AppContext, spec, target: str, source: str = "") -> None:
    """Raise SpecError when SPEC asks TARGET (or one of its burst targets) for something it
    cannot do. Called by render and launch; ``launcher validate`` checks every target."""
    problems = target_problems(spec, roles(spec, target), backend_of(app.config, app.registry))
    if problems:
        raise SpecError(source or f"spec {spec.name!r}", problems)


def offer_filter(spec, registry=None):
    """For the planner: offer -> why its target cannot run SPEC (the same words as validate),
    or None. Worked out once per backend and target, not per offer."""
    reg = registry if registry is not None else default_registry()
    by_backend: dict[str, list] = {}
    seen: dict[tuple, Optional[str]] = {}

    def why(offer) -> Optional[str]:
        key = (offer.backend, offer.target)
        if key not in seen:
            if offer.backend not in by_backend:
                try:
                    by_backend[offer.backend] = unsupported(spec, reg.load_class(offer.backend))
                except LauncherError:
                    by_backend[offer.backend] = []  # not a backend this installation knows: no opinion
            items = by_backend[offer.backend]
            seen[key] = "; ".join(f"{u.field}: {message(u, offer.target)}" for u in items) or None
        return seen[key]

    return why


def _show(path: str, value) -> str:
    key = path.rpartition(".")[2]
    if path in ("resources.memory_per_node", "resources.disk_per_node"):
        value = size_text(value)
    if hasattr(value, "model_dump"):  # a whole section (sweep:): named, not dumped
        return f"the {key}: section"
    return f"{key}: {value}"


def size_text(nbytes: int) -> str:
    """Bytes as the spec writes them (binary units, as Slurm reads them)."""
    for unit, n in (("TB", 1024 ** 4), ("GB", 1024 ** 3), ("MB", 1024 ** 2)):
        if nbytes >= n:
            return f"{nbytes / n:.4g}{unit}"
    return f"{nbytes}B"
