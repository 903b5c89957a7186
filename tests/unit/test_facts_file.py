"""`launcher render --facts FILE.json`: a target's facts from a file, in the shapes
`launcher targets --json` and a captured probe write; clear errors naming the file."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.core.errors import ConfigError
from launcher.backend.factsfile import load_facts

from .slurm_facts import facts_2411_block

FACTS = facts_2411_block().data


def write(tmp_path, data, name="facts.json"):
    f = tmp_path / name
    f.write_text(data if isinstance(data, str) else json.dumps(data))
    return f


@pytest.mark.parametrize("shape", [
    [{"name": "local", "backend": "local", "facts": {"host": "h"}}, {"name": "far", "backend": "slurm", "facts": FACTS}],
    [{"name": "elsewhere", "backend": "slurm", "facts": FACTS}],  # one row: used whatever its name
    {"name": "far", "backend": "slurm", "facts": FACTS},  # one row of `targets --json`
    {"probed_at": 1700000000.0, "data": FACTS},  # the probe cache, $LAUNCHER_HOME/facts/far.json
    {"target": "far", "backend": "slurm", "data": FACTS},  # Facts as a dict
], ids=["targets-json", "one-row-list", "one-row", "probe-cache", "facts-dict"])
def test_every_shape_gives_the_targets_facts(tmp_path, shape):
    facts = load_facts(write(tmp_path, shape), "far", "slurm")
    assert facts.target == "far" and facts.backend == "slurm" and facts.data == FACTS


@pytest.mark.parametrize("content, words", [
    (None, "does not exist"),
    ("{not json", "is not JSON"),
    ("[1, 2]", "has no facts for target far (targets in it: none)"),
    ([{"name": "a", "backend": "slurm", "facts": FACTS}, {"name": "b", "backend": "slurm", "facts": FACTS}],
     "has no facts for target far (targets in it: a, b)"),
    ([{"name": "far", "backend": "slurm", "error": "cannot reach Slurm on login1"}],
     "its probe failed when the file was written: cannot reach Slurm on login1"),
    ([{"name": "far", "backend": "skypilot", "facts": {"infra": "aws"}}], "has facts of a skypilot target"),
    ({"data": "sinfo output"}, "expected the target's facts as a JSON object"),
    ('"just a string"', "expected the output of `launcher targets --json`"),
])
def test_a_bad_facts_file_is_an_error_naming_the_file(tmp_path, content, words):
    path = tmp_path / "facts.json" if content is None else write(tmp_path, content)
    with pytest.raises(ConfigError) as ei:
        load_facts(path, "far", "slurm")
    assert str(path) in str(ei.value) and words in str(ei.value)


def test_render_with_facts_never_probes_the_target(tmp_path, launcher_env, monkeypatch):
    """A Slurm target behind an address nothing answers on, and no Slurm command on PATH:
    the script renders from the file's facts alone (a probe would fail either way)."""
    from launcher_backends.slurm import SlurmBackend

    def no_probe(self):
        raise AssertionError("probed")

    monkeypatch.setattr(SlurmBackend, "probe", no_probe)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    launcher_env["config"].write_text("targets:\n  far: {backend: slurm, ssh_host: 192.0.2.1, remote_dir: /scratch/j}\n")
    spec = tmp_path / "j.yaml"
    spec.write_text("name: offline\nrun: echo hi\nseed: 1\nresources: {gpus_per_node: 8, accelerator: H100}\n")
    facts = write(tmp_path, [{"name": "far", "backend": "slurm", "facts": FACTS}])
    r = CliRunner().invoke(main, ["render", str(spec), "-t", "far", "--facts", str(facts)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "#SBATCH --gres=gpu:h100:8" in r.output and "#SBATCH --output=/scratch/j/JOB_ID/slurm-%j.out" in r.output
    r = CliRunner().invoke(main, ["render", str(spec), "-t", "far", "--facts", str(tmp_path / "none.json")])
    assert r.exit_code == 2 and "none.json does not exist" in r.output


def test_facts_need_a_target(tmp_path, launcher_env):
    spec = tmp_path / "j.yaml"
    spec.write_text("name: offline\nrun: echo hi\n")
    facts = write(tmp_path, {"probed_at": 1.0, "data": {"host": "h"}})
    r = CliRunner().invoke(main, ["render", str(spec), "--facts", str(facts)])
    assert r.exit_code == 2 and "--facts needs --target" in r.output
