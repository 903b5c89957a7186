"""Each backend owns its section of the job spec (``slurm:``, ``skypilot:``, a plugin's own):
declared on its class like its target options, validated by its own model, strict."""

from __future__ import annotations

from typing import ClassVar, Optional

import pytest
from pydantic import Field

from launcher.core.errors import SpecError
from launcher.spec.model import JobSpec, Section
from launcher.backend.sections import parse_spec, spec_from_text, spec_model
from launcher_backends.skypilot.options import SkyPilotSection
from launcher_backends.slurm.options import SlurmSection

from .test_registry import ep


class RackSection(Section):
    """A third-party backend's own section."""

    rack: Optional[str] = None
    slots: int = Field(1, ge=1)


class RackBackend:  # launcher.backend.protocols.SpecOwner
    name: ClassVar[str] = "rack"
    spec_section: ClassVar[str] = "rack"
    spec_options: ClassVar = RackSection
    spec_fields: ClassVar = None  # honours every portable request

    @classmethod
    def unsupported(cls, spec):
        return []


class GreedyBackend(RackBackend):
    """A plugin that tries to take a portable field and a built-in's key as its section."""

    name: ClassVar[str] = "greedy"
    spec_section: ClassVar[str] = "resources"


def registry(*extra):
    from launcher.backend.registry import Registry

    return Registry([ep("local", "launcher_backends.local:LocalBackend", "launcher"),
                     ep("slurm", "launcher_backends.slurm:SlurmBackend", "launcher"), *extra])


def problems(text: str, reg=None) -> dict:
    from launcher.spec.yamlio import load_yaml

    data, line_of = load_yaml(text, "job.yaml")
    with pytest.raises(SpecError) as ei:
        parse_spec(data, "job.yaml", line_of, registry=reg)
    return dict(ei.value.problems)


def test_a_misspelt_key_inside_a_backend_section_names_it_with_a_did_you_mean():
    probs = problems("name: x\nrun: y\nslurm: {partitionn: gpu}\n")
    assert probs == {"slurm.partitionn": "unknown key; did you mean 'partition'? [line 3]"}


def test_a_misspelt_section_name_is_an_unknown_top_level_key_with_a_did_you_mean():
    assert problems("name: x\nrun: y\nslrum: {partition: gpu}\n")["slrum"].startswith(
        "unknown key; did you mean 'slurm'?")


def test_an_unknown_top_level_key_lists_the_installed_backends_sections():
    msg = problems("name: x\nrun: y\nzzz: 1\n")["zzz"]
    assert "backend sections: skypilot, slurm" in msg and "launcher backends" in msg and msg.endswith("[line 3]")


def test_the_section_of_a_backend_that_is_not_installed_is_refused_naming_the_field():
    msg = problems("name: x\nrun: y\nskypilot: {managed: true}\n", registry())["skypilot"]
    assert msg.startswith("unknown key") and "backend sections: slurm" in msg and "installed" in msg


def test_a_section_value_error_names_its_path():
    probs = problems("name: x\nrun: y\nskypilot: {job_recovery: {strategy: sideways}}\n")
    assert list(probs) == ["skypilot.job_recovery.strategy"]
    assert "FAILOVER or EAGER_NEXT_REGION" in probs["skypilot.job_recovery.strategy"]


def test_sections_are_typed_through_the_accessor_and_defaulted_when_absent():
    spec = spec_from_text("name: x\nrun: y\nslurm: {partition: gpu, extra: ['--exclusive']}\n")
    assert spec.section(SlurmSection) == SlurmSection(partition="gpu", extra=["--exclusive"])
    assert spec.section(SkyPilotSection) == SkyPilotSection()  # not in the spec: the backend's defaults
    assert isinstance(spec, JobSpec)


def test_a_bare_core_spec_still_answers_the_accessor_with_defaults():
    spec = JobSpec(name="x", run="y")
    assert spec.section(SlurmSection).partition is None


def test_the_resolved_spec_dumps_the_sections_it_has():
    dumped = spec_from_text("name: x\nrun: y\nslurm: {qos: high}\n").model_dump(mode="json")
    assert dumped["slurm"]["qos"] == "high" and "skypilot" not in dumped


def test_an_absent_section_reads_as_its_backends_defaults():
    spec = spec_from_text("name: x\nrun: y\n")
    assert spec.section(SlurmSection) == SlurmSection()
    assert spec.section(SkyPilotSection).managed is False
    with pytest.raises(AttributeError):
        spec.slurm  # a section the spec does not have is not an attribute: ask with spec.section(Model)


def test_a_spec_without_sections_imports_no_backend():
    import subprocess
    import sys

    code = ("import sys\nfrom launcher.backend.sections import spec_from_text\n"
            "spec_from_text('name: x\\nrun: y\\nresources: {nodes: 2}\\n')\n"
            "print(sorted(m for m in sys.modules if m.startswith('launcher_backends')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_third_party_backend_section_is_validated_by_its_own_model():
    reg = registry(ep("rack", "tests.unit.test_spec_sections:RackBackend", "thirdparty"))
    data = {"name": "x", "run": "y", "rack": {"rack": "r7", "slots": 4}}
    assert parse_spec(data, "job.yaml", registry=reg).section(RackSection) == RackSection(rack="r7", slots=4)
    from launcher.spec.yamlio import load_yaml

    bad, line_of = load_yaml("name: x\nrun: y\nrack: {slot: 0}\n", "job.yaml")
    with pytest.raises(SpecError) as ei:
        parse_spec(bad, "job.yaml", line_of, registry=reg)
    assert dict(ei.value.problems) == {"rack.slot": "unknown key; did you mean 'slots'? [line 3]"}


def test_a_plugin_cannot_take_a_portable_field_or_a_builtin_section():
    reg = registry(ep("greedy", "tests.unit.test_spec_sections:GreedyBackend", "thirdparty"))
    model = spec_model(reg)
    assert model.model_fields["resources"].annotation is JobSpec.model_fields["resources"].annotation
    assert "greedy" not in model.model_fields


def test_a_broken_plugin_does_not_break_the_spec():
    reg = registry(ep("broken", "no_such_module_xyz:Backend", "thirdparty"))
    assert parse_spec({"name": "x", "run": "y", "slurm": {"qos": "q"}}, registry=reg).section(SlurmSection).qos == "q"
