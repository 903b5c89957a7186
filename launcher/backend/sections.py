"""Loading a job spec: YAML -> the portable ``JobSpec`` plus the sections of the installed
backends (``load_spec``, ``spec_from_text``, ``parse_spec``).

Each backend owns its section of the job spec (``slurm:``, ``skypilot:``, a plugin's own).

A backend class names its section and the pydantic model validating it (``spec_section``,
``spec_options``, like ``target_options``). A spec is validated by the portable JobSpec plus
the sections it has; a section's backend is found by its name first (``slurm:`` -> the
``slurm`` backend), so a spec without sections imports no backend at all. Only an unknown key
(or a plugin whose section is named differently) brings in every backend, so that the error
can list every section this installation has.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, Field, create_model

from launcher.backend.protocols import SpecOwner, can
from launcher.backend.registry import default_registry
from launcher.core.errors import LauncherError, SpecError
from launcher.spec.model import JobSpec
from launcher.spec.validation import validate_model
from launcher.spec.yamlio import load_yaml, read_text


def spec_model(registry=None) -> type[JobSpec]:
    """The JobSpec model with every installed backend's section (what a spec may contain)."""
    reg = _registry(registry)
    return _assemble(reg, _all_sections(reg))


def section_models(registry=None) -> dict[str, type[BaseModel]]:
    """{section key: model} of every installed backend that owns a section."""
    return dict(_all_sections(_registry(registry)))


def model_for(data, registry=None) -> type[JobSpec]:
    """The model that validates DATA: the portable fields plus the sections DATA has."""
    keys = sorted(k for k in data if isinstance(k, str) and k not in JobSpec.model_fields) \
        if isinstance(data, dict) else []
    if not keys:
        return JobSpec
    reg = _registry(registry)
    found = _by_name(reg, keys)
    if found is None:  # an unknown key: with every section, so its error can name them all
        return spec_model(reg)
    return _assemble(reg, tuple(sorted(found.items())))


def unknown_section_hint(path: str, msg: str, model) -> tuple[str, str]:
    """An unknown top-level key may be the section of a backend that is not installed: say so."""
    if "." in path or "[" in path or not msg.startswith("unknown key") or "did you mean" in msg:
        return path, msg
    sections = sorted(k for k in model.model_fields if k not in JobSpec.model_fields)
    text, sep, where = msg.partition(" [")
    hint = (f" (backend sections: {', '.join(sections) or 'none'}; a backend's section is accepted only "
            "when that backend is installed, see `launcher backends`)")
    return path, text + hint + sep + where


def _registry(registry):
    return registry if registry is not None else default_registry()


def _by_name(reg, keys) -> Optional[dict]:
    """{key: model} when every key is the section of the backend of the same name, else None."""
    out = {}
    for key in keys:
        if key not in reg.entries:
            return None
        try:
            cls = reg.load_class(key)
        except LauncherError:
            return None
        if not can(cls, SpecOwner) or cls.spec_section != key or cls.spec_options is None:
            return None
        out[key] = cls.spec_options
    return out


@lru_cache(maxsize=8)
def _all_sections(reg) -> tuple:
    return tuple((key, model) for key, (_backend, model) in reg.spec_sections().items()
                 if key not in JobSpec.model_fields and key.isidentifier())  # no backend takes a portable field


@lru_cache(maxsize=64)
def _assemble(reg, sections: tuple) -> type[JobSpec]:
    fields = {key: (model, Field(default_factory=model)) for key, model in sections}
    return create_model("JobSpec", __base__=JobSpec, __module__=JobSpec.__module__, **fields)


def parse_spec(data, source: str = "<spec>", line_of=None, registry=None) -> JobSpec:
    """Validate DATA (a spec's YAML as Python data) into a JobSpec with the sections it has."""
    model = model_for(data, registry)
    try:
        return validate_model(model, data, source, line_of)
    except SpecError as e:
        raise SpecError(source, [unknown_section_hint(p, m, model) for p, m in e.problems]) from None


def load_spec(path: str | Path) -> JobSpec:
    """Read and validate a job spec file. Raises SpecError listing every problem."""
    text = read_text(path, "job spec")
    data, line_of = load_yaml(text, str(path))
    return parse_spec(data, str(path), line_of)


def spec_from_text(text: str, source: str = "<spec>") -> JobSpec:
    data, line_of = load_yaml(text, source)
    return parse_spec(data, source, line_of)
