"""The spec (and the config) says what it means: what plain YAML or a lenient model would
silently read some other way is refused, with the field path and the line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.backend.config import load_config
from launcher.core.errors import ConfigError, SpecError
from launcher.spec.model import resolve_paths
from launcher.backend.sections import spec_from_text
from launcher.spec.yamlio import MAX_DEPTH, MAX_NODES, load_yaml
from launcher_backends.slurm.options import RESERVED_SBATCH

LAUNCHER = str(Path(sys.executable).parent / "launcher")


def problems(text: str) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as ei:
        spec_from_text(text, "j.yaml")
    return ei.value.problems


def cli(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    """The real command, as a user runs it (tracebacks would show on stderr)."""
    import os

    return subprocess.run([LAUNCHER, *map(str, args)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})}, cwd=cwd)


# ---- duplicate keys

def test_a_key_written_twice_is_refused_naming_both_lines():
    (path, msg), = problems("name: x\nrun: y\nresources:\n  nodes: 2\n  nodes: 4\n")
    assert "duplicate key 'nodes'" in msg and "line 4" in msg and "line 5" in msg


def test_a_top_level_key_written_twice_is_refused():
    (path, msg), = problems("name: a\nrun: y\nname: b\n")
    assert "duplicate key 'name'" in msg and "first at line 1, again at line 3" in msg


def test_merge_keys_still_override_what_they_merge():
    data, _ = load_yaml("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n", "t")
    assert data["c"] == {"x": 3, "y": 2}


def test_the_config_refuses_duplicate_targets_too(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("targets:\n  a: {backend: local}\n  b: {backend: local}\n  a: {backend: slurm}\n")
    with pytest.raises(SpecError) as ei:
        load_config(cfg)
    assert "duplicate key 'a'" in str(ei.value) and "line 2" in str(ei.value) and "line 4" in str(ei.value)


# ---- zero sizes and durations

@pytest.mark.parametrize("field,value", [
    ("resources.time_limit", "0s"), ("resources.time_limit", "00:00:00"), ("resources.memory_per_node", "0GB"),
    ("resources.disk_per_node", "0TB"), ("resources.expected_runtime", "0h"), ("topology.switch_wait", "0m"),
    ("checkpoint.interval", "0s"), ("checkpoint.cost", "0s"), ("recovery.grace", "0s"), ("cost.deadline", "0d"),
])
def test_a_zero_size_or_duration_is_refused_with_its_path(field, value):
    section, key = field.split(".")
    (path, msg), = problems(f"name: x\nrun: y\n{section}: {{{key}: {value}}}\n")
    assert path == field and "zero" in msg and "line 3" in msg


def test_negative_sizes_and_durations_do_not_parse():
    assert problems("name: x\nrun: y\nresources: {time_limit: -5m}\n")[0][0] == "resources.time_limit"
    assert problems("name: x\nrun: y\nresources: {memory_per_node: -1GB}\n")[0][0] == "resources.memory_per_node"


# ---- slurm.extra cannot take over the launcher's own options

@pytest.mark.parametrize("item", [
    "--comment=mine", "--output=/tmp/x", "--error=/tmp/e", "--requeue", "--no-requeue", "--signal=B:USR2@60",
    "--open-mode=truncate", "--job-name=other", "--array=0-9", "--export=NONE",
    "--comm=x", "--out=/x", "--no-req", "--sig=USR1", "--open=truncate", "--job=n", "--arr=1-3",  # prefixes
    "--OUTPUT=/x", "--output", "--comment",  # case, and the separate-argument form's first half
])
def test_slurm_extra_cannot_override_what_the_launcher_sets(item):
    (path, msg), = problems(f"name: x\nrun: y\nslurm: {{extra: ['--mail-type=END', '{item}']}}\n")
    assert path == "slurm.extra[1]" and "is set by the launcher" in msg
    reserved = [r for r in RESERVED_SBATCH if r.startswith(item[2:].split("=")[0].lower())]
    assert f"--{reserved[0]}" in msg and RESERVED_SBATCH[reserved[0]] in msg


@pytest.mark.parametrize("item", ["-o", "-o/tmp/x", "-J", "-a", "-e", "/tmp/x", "--", "--=x", "--x\n--output=/y",
                                  "--x\t--output=/y"])
def test_slurm_extra_takes_only_long_options_one_per_item(item):
    (path, msg), = problems(f"name: x\nrun: y\nslurm: {{extra: [{json.dumps(item)}]}}\n")
    assert path == "slurm.extra[0]"


def test_other_sbatch_options_pass_through():
    spec = spec_from_text("name: x\nrun: y\nslurm: {extra: ['--mail-type=END', '--exclusive', '--mem-bind=local', "
                          "'--gpus-per-task=1', '--hold']}\n")
    assert len(spec.slurm.extra) == 5


# ---- free-form sections are typed and bounded

def test_skypilot_job_recovery_is_typed():
    spec = spec_from_text("name: x\nrun: y\nskypilot: {managed: true, job_recovery: {strategy: failover, "
                          "max_restarts_on_errors: 3, recover_on_exit_codes: [33]}}\n")
    assert spec.skypilot.job_recovery.strategy == "FAILOVER"
    probs = dict(problems("name: x\nrun: y\nskypilot: {job_recovery: {strategy: x, bomb: [1, 2], "
                          "recover_on_exit_codes: [300]}}\n"))
    assert "skypilot.job_recovery.bomb" in probs and "skypilot.job_recovery.strategy" in probs
    assert "skypilot.job_recovery.recover_on_exit_codes[0]" in probs


def test_an_alias_bomb_is_refused_while_it_is_composed():
    # 10 levels of 10 aliases: 10**10 values once expanded; refused from its ~300 bytes of text
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 11)]
    (path, msg), = problems("name: x\nrun: y\nskypilot:\n  job_recovery:\n" +
                            "".join(f"    {l}\n" for l in lines))
    assert f"more than {MAX_NODES:,} values" in msg and "aliases" in msg


def test_a_recursive_alias_is_refused():
    (path, msg), = problems("name: x\nrun: &r [a, *r]\n")
    assert "refers to a node that contains it" in msg


def test_deep_nesting_is_a_clear_error_not_a_recursion_error(tmp_path):
    f = tmp_path / "deep.yaml"
    f.write_text("name: x\nrun: y\nenv: " + "[" * 1000 + "]" * 1000 + "\n")
    p = cli("validate", f)
    assert p.returncode == 2 and f"nesting deeper than {MAX_DEPTH} levels" in p.stderr
    assert "Traceback" not in p.stderr and "RecursionError" not in p.stderr
    f.write_text("name: x\nrun: y\nenv:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(600)))
    p = cli("validate", f)
    assert p.returncode == 2 and "nesting deeper" in p.stderr and "Traceback" not in p.stderr


# ---- env

@pytest.mark.parametrize("name", ["LAUNCHER_SEED", "LAUNCHER_X", "MASTER_ADDR", "MASTER_PORT"])
def test_reserved_env_names_are_refused_with_their_path(name):
    (path, msg), = problems(f"name: x\nrun: y\nenv: {{{name}: v}}\n")
    assert path == f"env.{name}" and "reserved" in msg and "line 3" in msg


@pytest.mark.parametrize("name", ["1X", "A-B", "A B", "$(x)", "A.B", ""])
def test_env_names_must_be_shell_identifiers(name):
    (path, msg), = problems(f"name: x\nrun: y\nenv: {{'{name}': v}}\n")
    assert path.startswith("env") and "not a valid variable name" in msg


def test_secrets_cannot_use_reserved_names_either():
    (path, msg), = problems("name: x\nrun: y\nsecrets: [LAUNCHER_JOB_ID]\n")
    assert path == "secrets[0]" and "reserved" in msg


def test_a_schedulers_own_prefix_is_the_backends_to_refuse_not_the_specs():
    # SLURM_* is refused on Slurm targets (tests/unit/test_unsupported.py), by the backend's declaration
    assert spec_from_text("name: x\nrun: y\nenv: {SLURM_X: v}\nsecrets: [SKYPILOT_Y]\n").env == {"SLURM_X": "v"}


# ---- NUL bytes and paths

def test_a_nul_byte_anywhere_is_refused_with_its_path():
    probs = dict(problems('name: x\nrun: [echo, "a\\0b"]\nenv: {A: "x\\0"}\nslurm: {qos: "q\\0"}\n'))
    assert set(probs) == {"run[1]", "env.A", "slurm.qos"}
    assert all("NUL" in m for m in probs.values())


def test_a_nul_in_a_relative_workdir_is_a_clear_error(tmp_path):
    f = tmp_path / "j.yaml"
    f.write_text('name: x\nrun: y\nworkdir: "sub\\0dir"\n')
    for cmd in ("validate", "render"):
        p = cli(cmd, f, env={"LAUNCHER_HOME": str(tmp_path / "home")})
        assert p.returncode == 2 and "workdir: contains a NUL byte" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr


def test_validate_refuses_a_workdir_that_does_not_exist_naming_the_resolved_path(tmp_path):
    f = tmp_path / "j.yaml"
    f.write_text("name: x\nrun: y\nworkdir: ../nowhere\n")
    r = CliRunner().invoke(main, ["validate", str(f)])
    assert r.exit_code == 2 and f"workdir: {tmp_path.parent / 'nowhere'} does not exist" in r.output
    (tmp_path.parent / "afile").write_text("")
    f.write_text("name: x\nrun: y\nworkdir: ../afile\n")
    r = CliRunner().invoke(main, ["validate", str(f)])
    assert r.exit_code == 2 and "is not a directory" in r.output
    (tmp_path / "src").mkdir()
    f.write_text("name: x\nrun: y\nworkdir: src\n")
    assert CliRunner().invoke(main, ["validate", str(f)]).output.strip() == "ok"


def test_recovery_re_reads_a_spec_whose_workdir_is_gone_without_failing(tmp_path):
    spec = spec_from_text("name: x\nrun: y\nworkdir: gone\n")
    assert resolve_paths(spec, tmp_path).workdir == str(tmp_path / "gone")


# ---- target names

@pytest.mark.parametrize("name", ["a b", "a/b", "../x", "x\ny", "", "-x", "$(x)"])
def test_target_names_in_specs_and_configs_are_plain(name, tmp_path):
    (path, msg), = problems(f"name: x\nrun: y\ntargets: [{name!r}]\n".replace("\n'", "\\n'"))
    assert path == "targets[0]" and "target name" in msg
    cfg = tmp_path / "config.yaml"
    import yaml

    cfg.write_text(yaml.safe_dump({"targets": {name: {"backend": "local"}}}))
    with pytest.raises(SpecError) as ei:
        load_config(cfg)
    assert ei.value.problems[0][0].startswith("targets")


# ---- messages

def test_an_unknown_target_names_the_config_file_says_if_it_exists_and_shows_how_to_add_one(tmp_path):
    f = tmp_path / "j.yaml"
    f.write_text("name: x\nrun: y\n")
    env = {"LAUNCHER_HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "LAUNCHER_CONFIG": ""}
    p = cli("render", f, "--target", "gpu-cluster", env=env)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "unknown target 'gpu-cluster'" in p.stderr
    assert f"config file: {tmp_path / 'cfg' / 'launcher' / 'config.yaml'} (does not exist" in p.stderr
    assert "targets:\n      gpu-cluster:\n        backend: slurm" in p.stderr and '"Configuration"' in p.stderr
    cfg = tmp_path / "cfg" / "launcher" / "config.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("targets:\n  gpu-clutser: {backend: local}\n")
    p = cli("render", f, "--target", "gpu-cluster", env=env)
    assert "did you mean 'gpu-clutser'?" in p.stderr and f"config file: {cfg} (exists" in p.stderr


def test_a_config_error_names_the_file_it_read():
    from launcher.backend.config import Config, ConfigFile

    c = Config(path=Path("/etc/x/config.yaml"), file=ConfigFile(), exists=True)
    with pytest.raises(ConfigError, match=r"config file: /etc/x/config.yaml \(exists"):
        c.raw_target("nope")


@pytest.mark.parametrize("text,line,col,what", [
    ("name: x\nresources: {nodes: 2\nrun: y\n", 2, 12, "flow mapping"),
    ("name: x\ntargets: [a, b\nrun: y\nseed: 1\n", 2, 10, "flow sequence"),
    ("name: 'x\nrun: y\n", 1, 7, "quoted scalar"),
])
def test_a_yaml_syntax_error_points_at_the_unclosed_bracket(text, line, col, what):
    (path, msg), = problems(text)
    assert msg.startswith(f"YAML syntax error at line {line}, column {col}: a {what} that starts here")
    assert text.splitlines()[line - 1] in msg  # the line itself is shown, with a caret under the column
    assert "\n" + " " * (6 + col - 1) + "^" in msg
