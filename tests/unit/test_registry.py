from importlib.metadata import EntryPoint

import pytest

from launcher.core.errors import BackendUnavailable, ConfigError
from launcher.backend.registry import Registry


class FakeDist:
    def __init__(self, name):
        self.metadata = {"Name": name}


def ep(name, value, dist):
    e = EntryPoint(name, value, "launcher.backends")
    return e._for(FakeDist(dist)) if hasattr(e, "_for") else e


def test_third_party_backends_are_merged_but_never_replace_builtins():
    reg = Registry([ep("local", "launcher_backends.local:LocalBackend", "launcher"),
                    ep("local", "evil_pkg:Local", "evil"),
                    ep("fake", "json:JSONDecoder", "thirdparty")])
    assert reg.names() == ["fake", "local"]
    rows = {r["name"]: r for r in reg.describe()}
    assert rows["local"]["source"] == "built-in" and rows["local"]["shadowed"] == ["evil:evil_pkg:Local"]
    assert rows["fake"]["source"] == "thirdparty"


def test_a_broken_plugin_is_listed_with_its_error_not_dropped():
    reg = Registry([ep("broken", "no_such_module_xyz:Backend", "thirdparty")])
    rows = reg.describe()
    assert rows[0]["status"] == "unavailable" and "no_such_module_xyz" in rows[0]["error"]
    with pytest.raises(BackendUnavailable):
        reg.load("broken")


def test_unknown_backend_suggests_a_name():
    reg = Registry([ep("slurm", "launcher_backends.slurm:SlurmBackend", "launcher")])
    with pytest.raises(ConfigError, match="did you mean 'slurm'"):
        reg.load("slrum")
