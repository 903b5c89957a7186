"""What each built-in backend declares it can do: the core asks these (``can``), never a name."""

import pytest

from launcher.backend.protocols import (CancelsMany, ChecksInstall, ChoosesPlacement, Closes, FindsSubmissions, HasSubmitHost,
                              IdentifiesRuns, KeepsRunHistory, MeasuresQueueWait, OwnsPriceSection, PricesOffers,
                              RemoteWorkdir, ReportsVersion, RunsArrays, can)
from launcher.backend.config import Target
from launcher_backends.local.backend import LocalBackend
from launcher_backends.skypilot.backend import SkyPilotBackend
from launcher_backends.slurm.backend import SlurmBackend

EXPECTED = {
    LocalBackend: {FindsSubmissions, HasSubmitHost, PricesOffers, CancelsMany},
    SlurmBackend: {FindsSubmissions, MeasuresQueueWait, KeepsRunHistory, HasSubmitHost, ReportsVersion,
                   RemoteWorkdir, PricesOffers, Closes, RunsArrays, CancelsMany, IdentifiesRuns,
                   OwnsPriceSection},
    SkyPilotBackend: {CancelsMany, FindsSubmissions, ChoosesPlacement, ReportsVersion, PricesOffers, ChecksInstall, Closes,
                      OwnsPriceSection},
}
ALL = (CancelsMany, ChecksInstall, ChoosesPlacement, Closes, FindsSubmissions, HasSubmitHost, KeepsRunHistory,
       MeasuresQueueWait, PricesOffers, RemoteWorkdir, ReportsVersion, RunsArrays, IdentifiesRuns,
       OwnsPriceSection)


@pytest.mark.parametrize("cls", list(EXPECTED), ids=lambda c: c.__name__)
def test_each_builtin_declares_exactly_its_capabilities(cls):
    declared = {cap for cap in ALL if can(cls, cap)}
    assert declared == EXPECTED[cls], sorted(c.__name__ for c in declared ^ EXPECTED[cls])
    # an instance declares what its class does
    inst = cls(Target(name="t", backend=cls.name, options=None, raw={}), None)
    assert {cap for cap in ALL if can(inst, cap)} == declared


def test_remote_workdir_follows_the_target_options():
    assert SlurmBackend.workdir_is_remote({"ssh_host": "login"})
    assert not SlurmBackend.workdir_is_remote({"partition": "gpu"})


def test_a_local_submit_host_is_this_machine():
    b = LocalBackend(Target(name="local", backend="local"), None)
    assert b.runner.where == "localhost"
    s = SlurmBackend(Target(name="c", backend="slurm", options=None, raw={}), None)
    assert s.runner.where == "localhost"
