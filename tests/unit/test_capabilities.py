"""What each built-in backend declares it is: the core asks these (``can``), never a name."""

import pytest

from launcher.backend.config import Target
from launcher.backend.protocols import (Backend, ChoosesPlacement, Host, Pricing, Scheduler, SetsEnv, SpecOwner,
                                        StartsSubmit, can)
from launcher.core.errors import NotSupported
from launcher_backends.local.backend import LocalBackend
from launcher_backends.skypilot.backend import SkyPilotBackend
from launcher_backends.slurm.backend import SlurmBackend

OPTIONAL = (Scheduler, Pricing, ChoosesPlacement, SpecOwner, SetsEnv, Host, StartsSubmit)
EXPECTED = {
    LocalBackend: {Pricing, SpecOwner, Host},
    SlurmBackend: {Scheduler, Pricing, SpecOwner, SetsEnv, Host, StartsSubmit},
    SkyPilotBackend: {Pricing, ChoosesPlacement, SpecOwner, SetsEnv, Host},
}


def _instance(cls):
    return cls(Target(name="t", backend=cls.name, options=None, raw={}), None)


@pytest.mark.parametrize("cls", list(EXPECTED), ids=lambda c: c.__name__)
def test_each_builtin_declares_exactly_its_protocols(cls):
    declared = {cap for cap in OPTIONAL if can(cls, cap)}
    assert declared == EXPECTED[cls], sorted(c.__name__ for c in declared ^ EXPECTED[cls])
    # an instance declares what its class does, and is a Backend
    inst = _instance(cls)
    assert {cap for cap in OPTIONAL if can(inst, cap)} == declared
    assert can(inst, Backend)


def test_the_no_answers_of_a_backend_that_is_not_what_a_protocol_asks():
    # SpecOwner: the local backend owns no section of the spec
    assert LocalBackend.spec_section is None and LocalBackend.spec_options is None
    # Pricing: this machine is free and reads no price file
    assert LocalBackend.price_section is None and LocalBackend.price_options is None
    with pytest.raises(NotSupported):
        LocalBackend.merge_prices(None, {}, "prices.yaml")
    # Host: no submit host for SkyPilot (its API server starts the jobs), nothing remote for local
    assert _instance(SkyPilotBackend).runner is None
    assert not SkyPilotBackend.workdir_is_remote({}) and not LocalBackend.workdir_is_remote({})
    assert LocalBackend.available() is None and SlurmBackend.available() is None
    assert _instance(LocalBackend).version(None) is None


def test_remote_workdir_follows_the_target_options():
    assert SlurmBackend.workdir_is_remote({"ssh_host": "login"})
    assert not SlurmBackend.workdir_is_remote({"partition": "gpu"})


def test_a_local_submit_host_is_this_machine():
    b = LocalBackend(Target(name="local", backend="local"), None)
    assert b.runner.where == "localhost"
    s = SlurmBackend(Target(name="c", backend="slurm", options=None, raw={}), None)
    assert s.runner.where == "localhost"


def test_the_protocols_are_a_handful():
    """19 single-method capabilities were folded into these (issue 19 §5)."""
    import launcher.backend.protocols as mod

    protocols = sorted(v.__name__ for v in vars(mod).values() if isinstance(v, type)
                       and getattr(v, "_is_runtime_protocol", False) and v.__module__ == mod.__name__)
    # LogFile (issue 33): where an attempt's output is on this machine, asked of the backend's class by the
    # read-only web view, which builds no backend; not folded into Host, whose third-party declarations it
    # would silently undo (a runtime protocol needs every member). Egress (issue 32): a move's checkpoint
    # transfer, priced per GB. SetsEnv (issue 34): the env prefixes a backend's scheduler sets, for the spec's
    # loader; not folded into SpecOwner for the same reason as LogFile. ReachesRun (issue 31): a hung run's
    # processes, signalled and dumped where the backend reaches them (recovery.hang). ExcludesNodes (issue 31):
    # keeping a job off quarantined nodes; not folded into Scheduler for the same reason. RemoteStarts (issue 29):
    # an attempt's start claim read and claimed where the job folders are (a login node over SSH); not folded
    # into Host for the same reason. ReadsLog (issue 33): a slice of an attempt's output read where it is written
    # (a login node over SSH), by a built backend and its connection; not folded into LogFile, a classmethod
    # the web view asks without building one
    assert protocols == ["Backend", "ChoosesPlacement", "Egress", "ExcludesNodes", "Host", "LogFile", "Pricing",
                         "ReachesRun", "ReadsLog", "RemoteStarts",
                         "Scheduler", "SetsEnv", "SpecOwner", "StartsSubmit"]
